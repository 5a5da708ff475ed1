"""bench_views copies its generated history into PostgreSQL with COPY, the values as SQLite holds them (JSON
as text, booleans as 0 or 1, datetimes as naive UTC text): its --verify holds the copy to the generated
events value for value, and the projections to a replay of them (which together say what a comparison with the
SQLite copy would: tests/test_bench_smoke.py runs that backend)."""

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import require_postgres

ROOT = Path(__file__).resolve().parents[1]


def test_the_postgres_copy_of_a_history_holds_its_events_and_what_they_say() -> None:
    require_postgres()
    command = [sys.executable, "-m", "bench.bench_views", "--events", "3000", "--hourly", "200"]
    options = ["--backend", "postgres", "--verify", "--samples", "3", "--page-samples", "0"]
    result = subprocess.run([*command, *options], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["verified"] == {"postgresql": True}
    assert figures["counts"]["postgresql"]["events"] == figures["events"]
