"""What the CLI prints: never a password (the BEL's URL carries one in production), and a one-line error
with the fix, not a traceback, when Temporal does not answer (a bad setting, which needs no server:
tests/test_settings.py)."""

import os
import subprocess
import sys
from pathlib import Path

from sqlalchemy import make_url

from databuild.testing import POSTGRES_URL, free_port
from tests.conftest import forked_cli
from tests.helpers import until_listening

ROOT = Path(__file__).resolve().parents[1]
SECRET = "s3cret-pw-of-the-bel"
BEL_URL = make_url(POSTGRES_URL).set(password=SECRET).render_as_string(hide_password=False)


def cli_env(**extra: str) -> dict[str, str]:
    """A password in the BEL URL (PostgreSQL trusts loopback, so it is ignored there) and a Temporal
    address where nothing listens."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATABUILD_")}
    return {
        **env,
        "PYTHONPATH": str(ROOT),
        "COLUMNS": "500",  # no wrapping: a secret split across lines would escape the check
        "DATABUILD_DATABASE_URL": BEL_URL,
        "DATABUILD_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
        **extra,
    }


def test_commands_never_print_the_bel_password(tmp_path: Path) -> None:
    # Each command in a process of its own, forked from one that imported the CLI once.
    migrated, worker, bad, follow = forked_cli(
        [
            ["migrate"],
            ["worker"],  # prints its settings, then finds no Temporal
            (["migrate"], {"DATABUILD_OPENLINEAGE_URL": f"ftp://ci:{SECRET}@lineage.example/x"}),
            ["upstream", "add", f"http://ci:{SECRET}@up.example:8000", "--pattern", "a/*"],
        ],
        cli_env(),
        tmp_path,
    )
    assert migrated.returncode == 0, migrated.stderr
    assert "BEL schema at postgresql+psycopg://postgres:***@127.0.0.1" in migrated.stdout

    port = free_port()
    log = tmp_path / "web.log"
    with log.open("w") as out:
        web = subprocess.Popen(
            [sys.executable, "-m", "worker", "web", "--port", str(port)],
            cwd=tmp_path,
            env=cli_env(PYTHONUNBUFFERED="1"),
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        until_listening(port, seconds=60)
    finally:
        web.terminate()
        web.wait(timeout=30)
    assert f"dashboard http://127.0.0.1:{port}/" in log.read_text()

    assert "BEL postgresql+psycopg://postgres:***@127.0.0.1" in worker.stdout
    assert "worker on task queue databuild-examples.demo-graph at" in worker.stdout  # the graph's own
    assert (
        bad.returncode == 2
        and "bad setting DATABUILD_OPENLINEAGE_URL: unsupported scheme 'ftp'" in bad.stderr
    )
    assert follow.returncode == 2 and "carries credentials" in follow.stderr, follow.stderr
    for run in (migrated, worker, bad, follow):
        assert SECRET not in run.stdout + run.stderr
    assert SECRET not in log.read_text()


# Commands that need Temporal, each run where nothing listens (forked from one process that imported the CLI).
NEED_TEMPORAL = [
    ["worker"],
    ["want", "daily_summary/2024-01-07"],
    ["publish", "raw_events/2024-01-01"],
    ["resolve", "daily_users/2024-01-01"],
    ["upstream", "list"],
    ["schedule", "list"],
]


def test_an_unreachable_temporal_is_one_line_with_the_fix(tmp_path: Path) -> None:
    addresses = [f"127.0.0.1:{free_port()}" for _ in NEED_TEMPORAL]
    commands = [
        (args, {"DATABUILD_TEMPORAL_ADDRESS": a}) for args, a in zip(NEED_TEMPORAL, addresses, strict=True)
    ]
    for address, run in zip(addresses, forked_cli(commands, cli_env(), tmp_path), strict=True):
        assert run.returncode == 1, (run.args, run.stdout + run.stderr)  # a dependency that is down
        assert run.stderr == (
            f"error: cannot reach Temporal at {address}: Connection refused; start the embedded stack with "
            "`databuild dev`, or set DATABUILD_TEMPORAL_ADDRESS to your server\n"
        ), run.args
        assert "Traceback" not in run.stdout
