"""Where a process's logs go. `databuild dev` draws a live display on the terminal, and anything else
written there tears it, so its logs go to files under ``<home>/logs/``: ``databuild.log`` (Python
logging: DataBuild, the Temporal SDK and its core, py4j, uvicorn, warnings), ``spark.log`` (the
worker's Spark driver JVM) and ``temporal.log`` (the Temporal dev server); the terminal shows only
problems. `worker` and `web` are services: they log to stderr, where supervisors collect logs, and a
worker keeps its Spark driver's output in ``spark.log`` all the same."""

import logging
import sys
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


def _configure(*handlers: logging.Handler) -> None:
    root = logging.getLogger()
    for handler in handlers:
        root.addHandler(handler)
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO)
    # Warnings (pyspark's, pandas') would be printed to stderr; as records they follow the handlers.
    logging.captureWarnings(True)
    # The Temporal SDK's core (Rust) writes its warnings to the process's stderr itself unless they are
    # forwarded to a Python logger. Set before the first client connects: a runtime is chosen then.
    core = LogForwardingConfig(logger=logging.getLogger("temporalio.core"))
    logs = LoggingConfig(filter=TelemetryFilter(core_level="WARN", other_level="ERROR"), forwarding=core)
    Runtime.set_default(Runtime(telemetry=TelemetryConfig(logging=logs)), error_if_already_set=False)
