"""`databuild dev --demo --exit`: the embedded stack a newcomer starts, as a real subprocess."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_dev_stack_runs_the_demo(tmp_path: Path) -> None:
    port, ui_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATABUILD_")}
    env["COLUMNS"] = "160"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "databuild.cli",
            "dev",
            "--demo",
            "--exit",
            "--port",
            str(port),
            "--ui-port",
            str(ui_port),
        ],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert f"http://127.0.0.1:{ui_port}/namespaces/default/workflows" in out
    assert "want daily_summary/2024-01-07 [successful]" in out
    assert out.count("[successful]") >= 15  # the root want and its 14 derivative wants
    assert (tmp_path / ".databuild" / "bel.sqlite").exists()
    assert (tmp_path / ".databuild" / "data" / "top_spenders" / "2024-01-07").is_dir()
