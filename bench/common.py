"""What the benchmarks share: how they end, and what makes a run of the product fail whatever it measured."""

import contextlib
import logging
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

# What the Temporal SDK logs for a workflow task that took over 5 s (TMPRL1104), and for a completion that
# came after the server had timed its task out: a benchmark fails on either, whatever else it measured.
STALLED_TASK_MARKERS = ("TMPRL1104", "Workflow task not found")


def stalled_workflow_tasks(log: Path) -> int:
    """How many lines of a worker's log report a stalled workflow task."""
    if not log.exists():
        return 0
    text = log.read_text(errors="replace")
    return sum(1 for line in text.splitlines() if any(marker in line for marker in STALLED_TASK_MARKERS))


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
