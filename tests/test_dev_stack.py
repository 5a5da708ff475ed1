"""`databuild dev --demo --exit`: the embedded stack a newcomer starts, as a real subprocess."""

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import free_port

pytestmark = pytest.mark.slow


def test_dev_stack_runs_the_demo_and_serves_the_dashboard(tmp_path: Path) -> None:
    port, ui_port, web_port = free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATABUILD_")}
    env["COLUMNS"] = "160"
    log = tmp_path / "dev.log"
    command = [sys.executable, "-m", "databuild.cli", "dev", "--demo", "--exit"]
    command += ["--port", str(port), "--ui-port", str(ui_port), "--web-port", str(web_port)]
    with log.open("w") as out_file:
        process = subprocess.Popen(
            command,
            cwd=tmp_path,
            env={**env, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "PYTHONUNBUFFERED": "1"},
            stdout=out_file,
            stderr=subprocess.STDOUT,
            text=True,
        )
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
