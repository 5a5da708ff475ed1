"""The log of one job attempt, as it runs: `ctx.log`, Python `logging` records and warnings emitted
while the job body runs, and the exception that ended it, bounded in size, saved on the storage.

Jobs run on threads of one worker process, several at once, so nothing here changes logging for the
process: one handler on the root logger hands each record to the attempt whose context emitted it (a
context variable, which the threads that `ctx.write_all` starts carry over), and leaves every other
record, and the worker's console, as they were."""

import logging
import threading
import time
import traceback
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TextIO

DEFAULT_MAX_BYTES = 1024 * 1024

_current: ContextVar["AttemptLog | None"] = ContextVar("databuild_attempt_log", default=None)
_FORMAT = logging.Formatter("%(asctime)sZ %(levelname)s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%S")
_FORMAT.converter = time.gmtime
_FORMAT.default_msec_format = "%s.%03d"


def _size(text: str) -> int:
    return len(text.encode(errors="replace"))


TRUNCATED = "bytes left out here"


def _marker(dropped: int, max_bytes: int) -> str:
    return (
        f"[... {dropped} {TRUNCATED}: the log is kept to {max_bytes} bytes "
        "(DATABUILD_JOB_LOG_MAX_BYTES), its beginning and its end ...]"
    )


def _tail_of(text: str, budget: int) -> str:
    data = text.encode(errors="replace")
    return data[max(0, len(data) - budget) :].decode(errors="ignore")


def bounded(text: str, max_bytes: int) -> str:
    """``text`` kept to about ``max_bytes``: when longer, its first quarter and its last three quarters,
    cut at line ends, with a line saying how much was left out between them. The end is kept whole
    because that is where a failure's traceback is."""
    size = _size(text)
    if size <= max_bytes:
        return text
    head = text.encode(errors="replace")[: max_bytes // 4].decode(errors="ignore")
    head = head[: head.rfind("\n") + 1]
    tail = _tail_of(text, max_bytes - _size(head) - 200)
    tail = tail[tail.find("\n") + 1 :] if "\n" in tail[:-1] else tail
    return f"{head}{_marker(size - _size(head) - _size(tail), max_bytes)}\n{tail}"


APPLICATION_OUTPUT = (
    "==== the Spark application's output: spark-submit, the JVM's log4j, the driver's stderr ===="
)


def with_application_output(body: str, output: str, max_bytes: int) -> str:
    """An attempt's log followed by the output of the application that ran it, within about
    ``max_bytes``: the output gets what the log leaves, and at least half."""
    output = bounded(output, max(max_bytes // 2, max_bytes - _size(body)))
    body = bounded(body, max_bytes - _size(output))
    return f"{body.rstrip()}\n\n{APPLICATION_OUTPUT}\n{output}"


def line(message: str, level: str = "INFO") -> str:
    """A line of DataBuild's own in an attempt's log, formatted as the captured records are."""
    return _FORMAT.format(logging.makeLogRecord({"name": "databuild", "levelname": level, "msg": message}))


class AttemptLog:
    """An attempt's lines as they come, within ``max_bytes``: the first quarter is kept as it came, then
    the newest lines push the oldest of the rest out, so memory stays bounded however much a job logs."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._head: list[str] = []
        self._head_bytes = 0
        self._tail: deque[str] = deque()
        self._tail_bytes = 0
        self._dropped = 0
        self._lock = threading.Lock()  # a batch's outputs are written, and may log, on several threads

    def write(self, entry: str) -> None:
        line = entry if entry.endswith("\n") else entry + "\n"
        size = _size(line)
        with self._lock:
            if not self._tail and self._head_bytes + size <= self.max_bytes // 4:
                self._head.append(line)
                self._head_bytes += size
                return
            budget = self.max_bytes - self._head_bytes - 200  # room for the marker
            if size > budget:  # one huge entry: its end
                self._dropped += size - budget
                line, size = _tail_of(line, budget), budget
            self._tail.append(line)
            self._tail_bytes += size
            while self._tail_bytes > budget:
                gone = self._tail.popleft()
                self._tail_bytes -= _size(gone)
                self._dropped += _size(gone)

    def note(self, message: str) -> None:
        """A line of DataBuild's own about the attempt (what it ran, how it ended)."""
        self.write(line(message))

    def failure(self, error: BaseException) -> None:
        self.write(line(f"the attempt failed: {type(error).__name__}: {error}", "ERROR"))
        self.write("".join(traceback.format_exception(error)).rstrip())

    @property
    def truncated(self) -> bool:
        return self._dropped > 0

    def text(self) -> str:
        with self._lock:
            marker = [_marker(self._dropped, self.max_bytes) + "\n"] if self._dropped else []
            return "".join([*self._head, *marker, *self._tail])


class _Dispatcher(logging.Handler):
    """Hands each record to the attempt whose context emitted it. Being a handler on the root logger,
    it would stop Python falling back to its last-resort handler (warnings and errors to stderr, in a
    process that configures no logging: a submitted application, a program embedding DataBuild): it
    does that itself for the records that reach no other handler, so such a process prints as before."""

    def emit(self, record: logging.LogRecord) -> None:
        log = _current.get()
        if log is not None:
            log.write(self.format(record))
        last_resort = logging.lastResort
        if last_resort is not None and record.levelno >= last_resort.level and not self._others(record):
            last_resort.handle(record)

    def _others(self, record: logging.LogRecord) -> bool:
        logger: logging.Logger | None = logging.getLogger(record.name)
        while logger is not None:
            if any(handler is not self for handler in logger.handlers):
                return True
            logger = logger.parent if logger.propagate else None
        return False


_DISPATCHER = _Dispatcher()
_DISPATCHER.setFormatter(_FORMAT)
_installed = threading.Lock()


class _WarningHook:
    """Shows a warning to the attempt that raised it, then as Python would have shown it."""

    def __init__(self, shown: Callable[..., None]) -> None:
        self.shown = shown

    def __call__(
        self,
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        log = _current.get()
        if log is not None:
            text = warnings.formatwarning(message, category, filename, lineno, line).rstrip()
            log.write(
                _FORMAT.format(
                    logging.makeLogRecord({"name": "py.warnings", "levelname": "WARNING", "msg": text})
                )
            )
        self.shown(message, category, filename, lineno, file, line)


def _install() -> None:
    """Once per process: the dispatcher on the root logger, and a hook that also shows each warning
    to the attempt that raised it (unless `logging.captureWarnings` already turns warnings into
    records, which the dispatcher sees)."""
    with _installed:
        root = logging.getLogger()
        if _DISPATCHER not in root.handlers:
            root.addHandler(_DISPATCHER)
        shown = warnings.showwarning
        if not isinstance(shown, _WarningHook) and getattr(shown, "__module__", "") != "logging":
            warnings.showwarning = _WarningHook(shown)


@contextmanager
def capturing(log: AttemptLog) -> Iterator[AttemptLog]:
    """Within the block, and in threads that copy its context, records and warnings go to ``log`` too."""
    _install()
    token = _current.set(log)
    try:
        yield log
    finally:
        _current.reset(token)
