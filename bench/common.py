"""What the benchmarks share: how they end, and what makes a run of the product fail whatever it measured."""

import asyncio
import contextlib
import logging
import os
import subprocess
import sys
import time
import timeit
import traceback
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

# What the Temporal SDK logs for a workflow task that took over 5 s (TMPRL1104), and for a completion that
# came after the server had timed its task out: a benchmark fails on either, whatever else it measured.
STALLED_TASK_MARKERS = ("TMPRL1104", "Workflow task not found")


def python_loop_ms() -> float:
    """Milliseconds this machine's Python takes for a fixed pure-Python loop (the best of 5), printed
    beside the figures whose targets are absolute (decisions/s, ms of orchestration per run): these
    machines' speed moves by 2x and more from one session to the next, and this says at which speed a
    figure was taken: compare two runs' figures only at a like speed."""
    return min(timeit.repeat("sum(range(100_000))", number=20, repeat=5)) / 20 * 1000


def stalled_workflow_tasks(log: Path) -> int:
    """How many lines of a worker's log report a stalled workflow task."""
    if not log.exists():
        return 0
    text = log.read_text(errors="replace")
    return sum(1 for line in text.splitlines() if any(marker in line for marker in STALLED_TASK_MARKERS))


def log_tail(log: Path, lines: int = 40) -> str:
    """The last lines of a process's log, to show with a failure (the benchmark's directory is gone after)."""
    if not log.exists():
        return f"({log.name}: no log)"
    tail = log.read_text(errors="replace").splitlines()[-lines:]
    return "\n".join([f"--- the last {len(tail)} lines of {log.name} ---", *tail])


async def wait_ready(proc: "subprocess.Popen[bytes]", log: Path, text: str, limit_s: float = 120) -> None:
    """Until ``text`` is in the process's log; fails with the log's tail if it exits or ``limit_s`` passes."""
    deadline = time.perf_counter() + limit_s

    def seen() -> bool:
        return log.exists() and text in log.read_text(errors="replace")

    while not await asyncio.to_thread(seen):
        if proc.poll() is not None:
            raise RuntimeError(f"the process exited (code {proc.returncode})\n{log_tail(log)}")
        if time.perf_counter() > deadline:
            raise RuntimeError(f"not ready after {limit_s:.0f} s\n{log_tail(log)}")
        await asyncio.sleep(0.2)


async def while_running(
    proc: "subprocess.Popen[bytes]", log: Path, work: Awaitable[T], limit_s: float, what: str
) -> T:
    """``work``'s result, unless the process it depends on exits or ``limit_s`` passes first: then a
    failure that says which, with the process's log tail (a benchmark never waits on a dead worker)."""
    task = asyncio.ensure_future(work)
    deadline = time.perf_counter() + limit_s
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=0.5)
            if task.done():
                break
            if proc.poll() is not None:
                raise RuntimeError(f"{what}: the worker exited (code {proc.returncode})\n{log_tail(log)}")
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{what}: not done after {limit_s:.0f} s\n{log_tail(log)}")
        return task.result()
    finally:
        task.cancel()


class _StallCounter(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if any(marker in message for marker in STALLED_TASK_MARKERS):
            self.count += 1


@contextlib.contextmanager
def counting_stalled_tasks() -> Iterator[Callable[[], int]]:
    """For a worker running in this process: yields a function that says how many stalled workflow tasks
    the SDK has logged so far (``databuild.process.forward_core_logs`` must have been called before the
    first client connected)."""
    counter = _StallCounter()
    root = logging.getLogger()
    root.addHandler(counter)
    try:
        yield lambda: counter.count
    finally:
        root.removeHandler(counter)


def run_and_exit(work: Callable[[], int]) -> None:
    """Run ``work`` (it returns the exit code), report a failure plainly, and leave directly: the
    Temporal SDK can abort the interpreter at exit."""
    code = 1
    try:
        code = work()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    except SystemExit as stop:
        print(stop, file=sys.stderr)
    except Exception:
        traceback.print_exc()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
