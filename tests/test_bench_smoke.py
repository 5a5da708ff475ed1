"""The view benchmark stays runnable: a small history, checked against a replay, then timed once."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_views_runs_on_a_small_history() -> None:
    command = [sys.executable, "-m", "bench.bench_views", "--events", "5000", "--backend", "sqlite"]
    result = subprocess.run(
        [*command, "--samples", "5"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "projections equal a replay of the events" in result.stdout
    assert "every view under 50 ms p95" in result.stdout
