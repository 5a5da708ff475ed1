"""What went wrong in Spark's JVM, said first. A Java exception reaches Python as a Py4J error whose text is
the whole Java stack trace: 15 KB for a write that filled the disk, with "No space left on device" near
character 11,000 behind "An error occurred while calling o34.parquet". The line that matters is the
deepest cause; the whole trace stays in the attempt's log.

A write that failed also leaves its output streams open in the JVM until they are collected, holding the
space of files Spark already deleted: a full disk stayed full until the worker restarted. ``release``
collects them."""

import logging
import re
from typing import TYPE_CHECKING

from databuild.failures import bounded

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
_CAUSED_BY = re.compile(r"^\s*Caused by: (.+?)\s*$", re.MULTILINE)
_THROWN = re.compile(r"^: ([\w.$]+(?:Exception|Error)\b.*?)\s*$", re.MULTILINE)
_NO_SPACE = "No space left on device"


def from_jvm(error: BaseException) -> bool:
    """Whether ``error`` was raised in the JVM (a Py4J error, or one pyspark captured from the JVM)."""
    kind = type(error)
    return kind.__name__ == "Py4JJavaError" or (
        kind.__module__.startswith("pyspark.errors") and "\n\tat " in str(error)
    )


def reason(error: BaseException) -> str:
    """One reason for a JVM error: its deepest Java cause first (with what to do for a full disk), then
    the call it came from, bounded (the whole trace is in the attempt's log)."""
    text = str(error)
    outer = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    causes = _CAUSED_BY.findall(text) or _THROWN.findall(text)
    deepest = causes[-1] if causes else outer
    if _NO_SPACE in text:
        deepest = (
            f"{_NO_SPACE}: the storage or Spark's local directory (spark.local.dir) is full; free space, "
            f"then `databuild resolve` what failed ({deepest})"
        )
    said = deepest if deepest == outer else f"{deepest} (in: {outer})"
    return bounded(said, "the attempt's log")


def release(session: "SparkSession") -> None:
    """Close what a failed write left open in the session's JVM (streams no longer referenced, which its
        garbage collector closes, on its cleaner thread): the space of the files they held comes back within
    moments. A Spark Connect
        session has no JVM here; its server keeps its own."""
    try:
        jvm = getattr(session, "_jvm", None)
        if jvm is not None:
            jvm.java.lang.System.gc()
    except Exception as error:  # releasing must not hide why the attempt failed
        log.warning("could not release what the failed attempt held in the JVM: %s", error)
