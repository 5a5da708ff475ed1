"""Where a process's logs go. `databuild dev` draws a live display on the terminal, and anything else
written there tears it, so its logs go to files under ``<home>/logs/``: ``databuild.log`` (Python
logging: DataBuild, the Temporal SDK and its core, py4j, uvicorn, warnings), ``spark.log`` (the
worker's Spark driver JVM) and ``temporal.log`` (the Temporal dev server); the terminal shows only
problems. `worker` and `web` are services: they log to stderr, where supervisors collect logs, and a
worker keeps its Spark driver's output in ``spark.log`` all the same. Every other command prints its
result and its errors, a line each: what it logs (the Temporal SDK's retries of a server that is down,
warnings, the traceback of an unexpected error) goes to ``databuild.log``."""

import gc
import logging
import sys
import tempfile
import traceback
from io import TextIOWrapper
from pathlib import Path

from rich.console import Console
from rich.text import Text
from temporalio.runtime import LogForwardingConfig, LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter

DATABUILD_LOG = "databuild.log"
SPARK_LOG = "spark.log"
TEMPORAL_LOG = "temporal.log"
# DataBuild's own loggers log at INFO (what a worker did: catalog tables, garbage collected, wants
# restarted); every other library stays at Python's default WARNING (httpx alone logs each request).
OWN_LOGGERS = ("databuild", "worker", "activities", "workflows")
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_dir(home: Path) -> Path:
    return home / "logs"


def spark_log(home: Path) -> Path:
    return log_dir(home) / SPARK_LOG


def temporal_log(home: Path) -> Path:
    return log_dir(home) / TEMPORAL_LOG


def log_to_files(home: Path, console: Console) -> Path:
    """`databuild dev`: logging to ``<home>/logs/databuild.log``; on ``console`` (through rich, so it
    lands above the live display) only DataBuild's warnings and anyone's errors. Returns the folder."""
    folder = log_dir(home)
    folder.mkdir(parents=True, exist_ok=True)
    to_file = logging.FileHandler(folder / DATABUILD_LOG, encoding="utf-8")
    to_file.setFormatter(logging.Formatter(FORMAT))
    _configure(to_file, _Problems(console, folder / DATABUILD_LOG))
    return folder


def log_quietly(home: Path) -> Path:
    """The CLI's commands: logging to ``<home>/logs/databuild.log``, made only once something is logged,
    and nothing on the terminal. Returns the file. A command that logs otherwise (`dev`, `worker`,
    `web`) sets its own logging up in place of this."""
    path = log_dir(home) / DATABUILD_LOG
    handler = _LazyFile(path)
    handler.setFormatter(logging.Formatter(FORMAT))
    _configure(handler)
    return path


def keep_traceback(error: BaseException, log_file: Path) -> Path:
    """Append ``error``'s traceback to ``log_file``, or to a new file in the temporary folder if that
    cannot be written; returns where it went."""
    text = "".join(traceback.format_exception(error))
    try:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with log_file.open("a", encoding="utf-8") as out:
            out.write(text)
        return log_file
    except OSError:
        with tempfile.NamedTemporaryFile("w", prefix="databuild-", suffix=".log", delete=False) as spare:
            spare.write(text)
        return Path(spare.name)


class _LazyFile(logging.FileHandler):
    """A log file made (folder and all) by its first record, so a command that logs nothing makes none;
    a file that cannot be made loses the records, silently: they are never a command's output."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, encoding="utf-8", delay=True)

    def _open(self) -> TextIOWrapper:
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()

    def handleError(self, record: logging.LogRecord) -> None:
        pass


def log_to_stderr() -> None:
    """`databuild worker` and `web`: logging to stderr, one line a record."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    _configure(handler)


class _Problems(logging.Handler):
    """DataBuild's warnings and anyone's errors on the terminal, a line each (a traceback stays in the
    file), printed through rich: above the live display instead of across it."""

    def __init__(self, console: Console, log_file: Path) -> None:
        super().__init__(logging.WARNING)
        self.console = console
        self.log_file = log_file

    def filter(self, record: logging.LogRecord) -> bool:
        own = record.name.partition(".")[0] in OWN_LOGGERS
        return record.levelno >= (logging.WARNING if own else logging.ERROR)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            error = record.levelno >= logging.ERROR
            line = Text(f"{record.levelname.lower()}: ", style="bold red" if error else "yellow")
            line.append(record.getMessage())
            if record.exc_info and record.exc_info[1] is not None:
                line.append(f": {record.exc_info[1]}")
            line.append(f"  (more in {self.log_file})", style="dim")
            self.console.print(line, soft_wrap=True)
        except Exception:
            self.handleError(record)


_HANDLERS: list[logging.Handler] = []  # what _configure installed, replaced by its next call


def _configure(*handlers: logging.Handler) -> None:
    root = logging.getLogger()
    for handler in _HANDLERS:
        root.removeHandler(handler)
        handler.close()
    _HANDLERS[:] = handlers
    for handler in handlers:
        root.addHandler(handler)
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO)
    # Warnings (pyspark's, pandas') would be printed to stderr; as records they follow the handlers.
    logging.captureWarnings(True)
    forward_core_logs()


def forward_core_logs() -> None:
    """The Temporal SDK's core (Rust) writes its warnings (a workflow task over 5 s, TMPRL1104) to the
    process's stderr itself unless they are forwarded to a Python logger, ``temporalio.core``. Call it
    before the first client connects: a runtime is chosen then."""
    core = LogForwardingConfig(logger=logging.getLogger("temporalio.core"))
    logs = LoggingConfig(filter=TelemetryFilter(core_level="WARN", other_level="ERROR"), forwarding=core)
    Runtime.set_default(Runtime(telemetry=TelemetryConfig(logging=logs)), error_if_already_set=False)


def settle_heap() -> None:
    """Move what start-up allocated (modules, graph, pydantic schemas) out of the garbage collector's
    way, so a full collection walks only what requests allocate: without this, one request in ~20
    paid a 50-60 ms pause in bench/bench_views.py."""
    gc.collect()
    gc.freeze()
