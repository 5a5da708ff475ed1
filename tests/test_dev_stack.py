"""`databuild dev`: the embedded stack a newcomer starts, as a real subprocess."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sqlalchemy import make_url

from databuild.bel import BuildEventLog
from databuild.jobs.tables.iceberg import INSTANCES, open_catalog
from databuild.models import PartitionStatus
from databuild.refs import storage_uri
from databuild.testing import POSTGRES_URL, free_port
from tests.helpers import until_listening
from worker.ports import listener_pid

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SECRET = "s3cret-pw-of-the-bel"
# What Spark's JVM (log4j, its console progress bar, its own start-up warnings), py4j, uvicorn and the
# Temporal dev server print when they write to the terminal; `dev` sends all of it to .databuild/logs.
# The progress line of a demo that built everything (alphabetical by state; see the race noted below).
JOB_RUNS_SUCCEEDED = r"job runs: (\d+ skipped, )?\d+ succeeded"
NOISE = ("WARN", "log4j", "NativeCodeLoader", "[Stage", "py4j", "uvicorn", "level=", "Traceback")


def dev_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATABUILD_")}
    return {**env, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", "COLUMNS": "500", **extra}


def dev_command(*args: str, port: int, ui_port: int, web_port: int) -> list[str]:
    ports = ["--port", str(port), "--ui-port", str(ui_port), "--web-port", str(web_port)]
    return [sys.executable, "-m", "worker", "dev", *args, *ports]


def start_dev(folder: Path, log: Path, command: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    folder.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out_file:
        return subprocess.Popen(
            command, cwd=folder, env=env, stdout=out_file, stderr=subprocess.STDOUT, text=True
        )


def wait_for_output(process: subprocess.Popen[str], log: Path, text: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while text not in log.read_text():
        assert process.poll() is None, f"dev exited with {process.returncode}:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"no {text!r} after {seconds} s:\n{log.read_text()}"
        time.sleep(0.2)


def assert_quiet(terminal: str) -> None:
    """Only DataBuild's own output on the terminal."""
    noise = [line for line in terminal.splitlines() if any(marker in line for marker in NOISE)]
    assert not noise, "\n".join(noise)


def port_frees(port: int, seconds: float = 5) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
                return True
            except OSError:
                pass
        time.sleep(0.1)
    return False


def gone(pid: int, seconds: float = 5) -> bool:
    """Whether ``pid`` exits within ``seconds`` (a zombie nobody reaped yet counts as gone)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.1)
    return False


@dataclass
class Leftovers:
    """What a failing test must not leave running: `dev` itself, and the server the old `dev` orphaned
    (killed only while it still listens on its port, so a reused pid is never hit)."""

    processes: list[subprocess.Popen[str]] = field(default_factory=list)
    servers: dict[int, int] = field(default_factory=dict)  # port -> pid

    def server(self, port: int) -> int:
        pid = listener_pid(port)
        assert pid is not None, f"nothing listens on {port}"
        self.servers[port] = pid
        return pid

    def clean(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        for port, pid in self.servers.items():
            if listener_pid(port) == pid:
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def leftovers() -> Iterator[Leftovers]:
    found = Leftovers()
    yield found
    found.clean()


def test_dev_stack_runs_the_demo_and_serves_the_dashboard(tmp_path: Path) -> None:
    """The newcomer's command, with the demo's tables in Iceberg (read with pyiceberg at the end)."""
    port, ui_port, web_port = free_port(), free_port(), free_port()
    log = tmp_path / "dev.log"
    command = dev_command("--demo", "--exit", port=port, ui_port=ui_port, web_port=web_port)
    process = start_dev(tmp_path, log, command, dev_env(COLUMNS="160", DATABUILD_TABLE_FORMAT="iceberg"))
    # While the demo runs, the dashboard and the API answer.
    served = None
    deadline = time.monotonic() + 120
    while served is None and process.poll() is None and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/api/wants", timeout=5) as response:
                served = json.load(response)
        except OSError:
            time.sleep(0.5)
    code = process.wait(timeout=300)
    out = log.read_text()
    assert code == 0, out
    assert served is not None and set(served) == {"data", "index", "page"}, out
    assert f"http://127.0.0.1:{ui_port}/namespaces/default/workflows" in out
    assert f"dashboard     http://127.0.0.1:{web_port}/" in out
    assert "want daily_summary/2024-01-07 [successful]" in out
    assert out.count("[successful]") >= 15  # the root want and its 14 derivative wants
    assert (tmp_path / ".databuild" / "bel.sqlite").exists()
    assert (tmp_path / ".databuild" / "data" / "top_spenders" / "2024-01-07").is_dir()
    # A quiet terminal: the live progress and the tree, the logs' folder named once, none of what the
    # JVM, py4j and the servers print; that is in the logs. (A want whose watch saw its run end before
    # the run told it decides again, finds its partition live and records a skipped run: a race on a
    # loaded machine when a run ends just as the watch's lease does.)
    assert re.search(JOB_RUNS_SUCCEEDED, out), out
    assert out.count(".databuild/logs/") == 1, out
    assert_quiet(out)
    logs = tmp_path / ".databuild" / "logs"
    spark = (logs / "spark.log").read_text()
    assert "NativeCodeLoader" in spark and "Using incubator modules" in spark, spark  # log4j; the JVM
    assert "[Stage" not in spark  # no progress bar anywhere
    assert "Spark driver started" in (logs / "databuild.log").read_text()
    assert "Temporal Server:" in (logs / "temporal.log").read_text()
    demo_tables_are_iceberg_commits(tmp_path / ".databuild")


def demo_tables_are_iceberg_commits(home: Path) -> None:
    """Every live partition of the demo is in its Iceberg table (its rows, its partition), each committed
    by a snapshot whose summary names its instance; `dev` finished its commits before it exited."""
    bel = BuildEventLog(f"sqlite:///{home / 'bel.sqlite'}")
    try:
        catalog = open_catalog(bel.url, storage_uri(home / "data"))
        for name in ("raw_events", "daily_users", "daily_summary", "top_spenders"):
            live = {
                p.ref: p
                for p in bel.partitions.query(status=PartitionStatus.live, ref_prefix=f"{name}/", limit=100)
            }
            table = catalog.load_table(f"default.{name}")
            dates = table.scan().to_arrow().column("date").to_pylist()
            assert {str(d) for d in dates} == {ref.split("/")[1] for ref in live}, name
            named = {
                id for s in table.snapshots() if s.summary for id in s.summary.get(INSTANCES, "").split(",")
            }
            assert {p.instance_id for p in live.values()} <= named, name
            for partition in live.values():
                instance = bel.partitions.instance(partition.instance_id or "")
                assert instance.table is not None and instance.table.snapshot_id is not None
                assert instance.facts is not None and instance.facts.rows == dates.count(
                    next(d for d in dates if str(d) == partition.ref.split("/")[1])
                )
    finally:
        bel.dispose()


def test_dev_takes_its_temporal_server_down_with_it_and_never_joins_another(
    tmp_path: Path, leftovers: Leftovers
) -> None:
    """SIGTERM (what supervisors send) stops the stack in order; SIGKILL leaves no server either, so the
    port frees at once. Meanwhile a second `dev` on the same port refuses and names the server there,
    where it used to join it and give its wants to the first stack's worker."""
    port, ui_port, web_port = free_port(), free_port(), free_port()
    command = dev_command(port=port, ui_port=ui_port, web_port=web_port)
    # The BEL URL has a password: no line `dev` prints may show it.
    env = dev_env(DATABUILD_DATABASE_URL=make_url(POSTGRES_URL).set(password=SECRET).render_as_string(False))
    project, log, log_again = tmp_path / "project", tmp_path / "dev.log", tmp_path / "again.log"

    first = start_dev(project, log, command, env)
    leftovers.processes.append(first)
    wait_for_output(first, log, "stack running")
    server = leftovers.server(port)
    assert server != first.pid

    # `want --wait` from another shell: its progress and tree, nothing else on either terminal.
    wanted = subprocess.run(
        [sys.executable, "-m", "worker", "want", "raw_events/2030-06-15", "--wait"],
        cwd=project,
        env={**env, "DATABUILD_TEMPORAL_ADDRESS": f"127.0.0.1:{port}"},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert wanted.returncode == 0, wanted.stdout + wanted.stderr
    assert "want raw_events/2030-06-15 [successful]" in wanted.stdout
    assert re.search(JOB_RUNS_SUCCEEDED, wanted.stdout), wanted.stdout
    assert wanted.stderr == ""
    assert_quiet(wanted.stdout)
    assert "NativeCodeLoader" in (project / ".databuild" / "logs" / "spark.log").read_text()

    other = tmp_path / "other"
    other.mkdir()
    second_command = dev_command(port=port, ui_port=free_port(), web_port=free_port())
    refused = subprocess.run(second_command, cwd=other, env=env, capture_output=True, text=True, timeout=90)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stdout == "", refused.stdout
    assert re.fullmatch(
        rf"error: --port {port} taken by pid {server} \(\S+temporal server start-dev .*\) "
        rf"in {re.escape(str(project))}\. "
        r"Stop that process, or start `databuild dev` on free ports \(--port, --ui-port, --web-port\)\n",
        refused.stderr,
    ), refused.stderr
    assert list(other.iterdir()) == []  # nothing recorded, not even the .databuild folder

    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=30) == 128 + signal.SIGTERM, log.read_text()
    assert "stopped by SIGTERM" in log.read_text()
    assert_quiet(log.read_text())  # its worker built the want above
    assert gone(server) and port_frees(port) and port_frees(web_port), log.read_text()

    # Again in the same folder, then killed outright: the kernel kills the server with it.
    again = start_dev(project, log_again, command, env)
    leftovers.processes.append(again)
    wait_for_output(again, log_again, "stack running")
    server = leftovers.server(port)
    again.kill()
    again.wait(timeout=10)
    assert gone(server), f"the Temporal dev server (pid {server}) outlived `dev`"
    assert port_frees(port) and port_frees(ui_port)
    printed = log.read_text() + log_again.read_text() + refused.stdout + refused.stderr
    assert SECRET not in printed
    assert printed.count("postgres:***@") == 2  # the BEL line of each start


def test_dev_refuses_a_port_another_process_listens_on(tmp_path: Path) -> None:
    web_port = free_port()
    listen = (
        "import socket, sys, time; s = socket.create_server(('127.0.0.1', int(sys.argv[1]))); time.sleep(600)"
    )
    holder = subprocess.Popen([sys.executable, "-c", listen, str(web_port)])
    try:
        until_listening(web_port)
        command = dev_command(port=free_port(), ui_port=free_port(), web_port=web_port)
        refused = subprocess.run(
            command, cwd=tmp_path, env=dev_env(), capture_output=True, text=True, timeout=90
        )
    finally:
        holder.kill()
        holder.wait()
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert (
        f"--web-port {web_port} taken by pid {holder.pid} ({sys.executable} -c import socket"
        in refused.stderr
    )
    assert list(tmp_path.iterdir()) == []
