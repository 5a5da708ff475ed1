"""The view benchmark stays runnable and meets its target on a small history: generated through the
projector, checked against a replay, then every view timed and judged."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.serial

ROOT = Path(__file__).resolve().parents[1]
EVENTS = 5000
HOURLY = 300  # partitions of the hourly estate: about 6 events each, beside the history
# Enough samples that a p95 is not the second-slowest of a handful: with 20, two full garbage collections
# (50-60 ms each, see databuild.process.settle_heap) or two preemptions in one view's samples failed CI.
SAMPLES = 60
CPU_MARGIN = 1.5


def test_bench_views_meets_its_target_on_a_small_history() -> None:
    command = [sys.executable, "-m", "bench.bench_views", "--events", str(EVENTS), "--backend", "sqlite"]
    sizes = ["--hourly", str(HOURLY), "--samples", str(SAMPLES), "--page-samples", "5"]
    result = subprocess.run([*command, *sizes], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    figures = json.loads(result.stdout.strip().splitlines()[-1])

    # The history: as long as asked, every event projected, every want ended, state what the events say.
    assert EVENTS + 5 * HOURLY <= figures["events"] < (EVENTS + 7 * HOURLY) * 1.05, figures["events"]
    counts = figures["counts"]["sqlite"]
    assert counts["events"] == figures["events"]
    # Every want and run ended, so nobody waits: no subscription, and no pool slot held or waited for.
    transient = ("subscriptions", "run_pools")
    assert all(counts[table] == 0 for table in transient), counts
    assert all(n > 0 for table, n in counts.items() if table not in transient), counts
    assert figures["verified"] == {"sqlite": True}

    # Every view was measured, with sane figures.
    views = figures["views"]
    for kind in (
        "want_view",
        "partition_view",
        "instance_view",
        "job_run_view",
        "list_wants",
        "list_partitions",
        "list_job_runs",
        "taint_impact",
        "backfill_progress",
        "partition_view (hourly)",
        "job_run_view (batch of 24)",
    ):
        assert any(v["view"].startswith(kind) and v["gated"] for v in views), (kind, views)
    for view in views:
        assert 0 < view["p50"] <= view["p95"], view
        assert 0 < view["base_p50"] <= view["base_p95"], view
        assert view["cpu_p95"] > 0, view

    # The verdict. Every view's own work (its CPU time) is under the target, within what this shared
    # machine moves it by: the same code's slowest view measured 38 ms, then 57 ms, in consecutive runs
    # (CPU time swings with the host's load too). A regression past half as much again fails here; the
    # target itself is judged on the full-size run. The verdict printed is the target's.
    over = [(v["view"], v["cpu_p95"]) for v in views if v["cpu_p95"] > CPU_MARGIN * figures["target_ms"]]
    assert not over, over
    failed = [v["view"] for v in views if v["cpu_verdict"] == "FAIL"]
    assert figures["cpu_verdict"] == ("FAIL" if failed else "PASS"), failed
    if max(figures["load_average"]["sqlite"]) < figures["cpus"]:
        failed = [(v["view"], v["p95"], v["cpu_p95"]) for v in views if v["verdict"] == "FAIL"]
        assert figures["verdict"] == "PASS" and not failed, (figures["load_average"], failed)

    # Every dashboard page and /metrics answered, through the real app over this log, well within 1 s.
    pages = figures["pages"]["sqlite"]
    assert {p["page"] for p in pages} >= {"/wants/{id}", "/partitions/{ref}", "/graph", "/cost", "/metrics"}
    assert all(p["status"] == 200 for p in pages), pages
    if max(figures["load_average"]["sqlite"]) < figures["cpus"]:
        assert figures["page_verdict"] == "PASS", pages
