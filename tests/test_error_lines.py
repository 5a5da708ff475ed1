"""The error rule (tests/test_error_surfaces.py) where no server is needed: an unexpected error is one line
saying where its traceback is, on the CLI and over HTTP, and a web server on a taken port is one line."""

import html
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from databuild.bel import BuildEventLog
from databuild.config import Settings
from databuild.web import create_app, web_context
from tests.test_error_surfaces import BASE, LOOPBACK, ROOT, SECRET, forked, one_line

pytestmark = pytest.mark.unit


# Unexpected errors, and a port that is taken -------------------------------------------------------------

BUGGY_COMMAND = f"""
import databuild.cli
from databuild.cli.app import app

@app.command()
def buggy() -> None:
    raise RuntimeError("{SECRET}")

databuild.cli.main()
"""


def test_an_unexpected_error_is_one_line_saying_where_its_traceback_is(tmp_path: Path) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DATABUILD_")}
    ran = subprocess.run(
        [sys.executable, "-c", BUGGY_COMMAND, "buggy"],
        cwd=tmp_path,
        env={**clean, "PYTHONPATH": str(ROOT), "DATABUILD_HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    log = tmp_path / "home" / "logs" / "databuild.log"
    one_line(ran, 1, f"unexpected RuntimeError (a bug in DataBuild); its traceback is in {log}")
    assert "Traceback" in log.read_text() and SECRET in log.read_text()

    bel = BuildEventLog.create(f"sqlite:///{tmp_path / 'bel.sqlite'}")
    app = create_app(web_context(Settings(home=tmp_path), bel))

    @app.get("/api/buggy")
    @app.get("/buggy")
    def buggy() -> None:
        raise RuntimeError(SECRET)

    with TestClient(app, base_url=BASE, client=LOOPBACK, raise_server_exceptions=False) as client:
        for path in ("/api/buggy", "/buggy"):
            response = client.get(path)
            shown = html.unescape(response.text)
            assert response.status_code == 500, shown
            assert "unexpected RuntimeError" in shown and "its traceback is in the web server's log" in shown
            assert SECRET not in shown
        assert client.get("/api/buggy").json()["type"] == "UnexpectedError"
    bel.dispose()


def test_web_on_a_port_that_is_taken_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        (ran,) = forked(tmp_path, (["web", "--port", str(port)], {}))
    one_line(ran, 2, f"the web server cannot listen on 127.0.0.1:{port}: Address already in use")


class Py4JJavaError(Exception):
    """Named as py4j's: what the JVM's errors look like to Python (its text is the Java trace)."""


TRACE = (
    "An error occurred while calling o34.parquet.\n"
    ": org.apache.spark.SparkException: [TASK_WRITE_FAILED] Task failed while writing rows to file:/lake/x\n"
    + "\tat org.apache.spark.Something.method(Something.scala:1)\n" * 200
    + "Caused by: org.apache.spark.SparkException: Job aborted\n"
    + "\tat org.apache.spark.Other.method(Other.scala:2)\n" * 100
    + "Caused by: java.io.IOException: No space left on device\n"
    + "\tat java.base/java.io.FileOutputStream.writeBytes(Native Method)\n"
)


def test_an_error_from_the_jvm_says_its_deepest_cause_first() -> None:
    from databuild.jobs import java_errors

    full = Py4JJavaError(TRACE)
    assert java_errors.from_jvm(full) and not java_errors.from_jvm(ValueError(TRACE))
    said = java_errors.reason(full)
    assert said.startswith("No space left on device: the storage or Spark's local directory")
    assert said.endswith("(in: An error occurred while calling o34.parquet.)") and len(said) < 400
    other = java_errors.reason(Py4JJavaError(TRACE.replace("No space left on device", "Stream closed")))
    assert other == "java.io.IOException: Stream closed (in: An error occurred while calling o34.parquet.)"
    # No "Caused by": the exception the call threw.
    thrown = java_errors.reason(Py4JJavaError(TRACE.split("Caused by")[0]))
    assert thrown.startswith("org.apache.spark.SparkException: [TASK_WRITE_FAILED]")
