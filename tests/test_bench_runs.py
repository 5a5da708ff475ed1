"""The benchmarks of orchestration, the BEL and backfills stay runnable: each at a small size, as its own
process, its figures sane and the verdicts that do not depend on how busy the machine is asserted (no
stalled workflow task, every want successful, memory within its bound). Their ratios are targets at full
size, judged when they are run so (docs/development/benchmarks.md). tests/test_bench_builds.py runs the
benchmarks of Spark builds; the two modules run side by side."""

import pytest

from tests.helpers import bench

pytestmark = pytest.mark.slow


def test_bench_scale_runs_every_want_without_a_stalled_workflow_task() -> None:
    f = bench("bench.bench_scale", "--wants", "20")
    assert f["databuild"]["states"] == {"successful": 20} and f["bare"]["workflows"] == 20
    assert f["stalled_tasks"] == 0, f["worker_log"]
    assert f["memory"]["databuild_worker_peak_mib"] <= 600
    for kind in ("Want", "JobRun"):
        assert f["histories"][kind]["runs"] == 20 and f["histories"][kind]["open"] == 0
    # Only the ratio, which a busy machine moves, may miss its target here.
    assert all(miss.startswith("ratio") for miss in f["misses"]), f["misses"]
    assert f["verdict"] == ("PASS" if not f["misses"] else "FAIL")


def test_bench_orchestration_registers_and_builds_without_a_stalled_workflow_task() -> None:
    f = bench("bench.bench_orchestration", "--n", "10", "--jobs", "2")
    reg, job = f["registration"], f["per_job"]
    assert reg["n"] == 10 and len(reg["round_ratios"]) == reg["rounds"] == 3
    assert reg["ratio"] == pytest.approx(reg["databuild_s"] / reg["bare_s"])
    assert job["jobs"] == 2 and job["direct_median_s"] > 0 and job["want_median_s"] > 0
    assert job["direct_back_to_back_median_s"] > 0
    assert job["overhead_per_job_s"] == pytest.approx(job["want_median_s"] - job["direct_median_s"])
    # Cost accounting measured in the same run: jobs with it off, and reading a group's cost alone.
    assert job["want_no_accounting_median_s"] > 0 and job["accounting_read_median_s"] > 0
    assert job["accounting_per_job_s"] == pytest.approx(
        job["want_median_s"] - job["want_no_accounting_median_s"]
    )
    assert f["stalled_tasks"] == 0 and f["python_loop_ms"] > 0
    # Only the ratio and the overhead, which a busy machine moves, may miss their targets here.
    assert all(miss.startswith(("registration ratio", "overhead per job")) for miss in f["misses"])
    assert f["verdict"] == ("PASS" if not f["misses"] else "FAIL")


def test_bench_bel_measures_decisions_against_raw_commits_on_both_backends() -> None:
    f = bench(
        "bench.bench_bel",
        "--decisions",
        "40",
        "--commits",
        "100",
        "--appends",
        "50",
        "--reads",
        "50",
        "--runs",
        "20",
    )
    assert f["python_loop_ms"] > 0  # the machine's speed the absolute figures were taken at
    for backend in ("sqlite", "postgresql"):
        figures = f[backend]
        for case in ("distinct", "contended", "raw"):
            assert set(figures[case]) == {"1", "4", "16"} and all(v > 0 for v in figures[case].values())
        assert figures["append"]["bel_per_s"] > 0 and figures["append"]["raw_per_s"] > 0
        # A job run's start and publish: one connection each (the fan-out's first reads come with it).
        assert figures["job_run"]["checkouts"] == 2 and figures["job_run"]["ratio"] > 0
        assert figures["read"]["ratio"] == pytest.approx(
            figures["read"]["raw_per_s"] / figures["read"]["bel_per_s"]
        )
        # What one decision sends the database: statements and one commit; decisions of 16 clients at
        # once share their group's transaction and statements, never send more.
        alone, together = figures["per_decision"]["distinct"], figures["per_decision"]["distinct-16"]
        for per in (alone, figures["per_decision"]["contended"]):
            assert per["statements"] > 0 and per["commits"] == 1
        assert 0 < together["commits"] <= 1 and 0 < together["statements"] <= alone["statements"]
    # PostgreSQL reserves a command's indexes and writes its events in one statement.
    assert f["postgresql"]["per_decision"]["distinct"]["statements"] <= 10
    assert f["sqlite"]["per_decision"]["distinct"]["statements"] <= 11
    # Decisions against the database's own rate: targets the BEL does not meet yet (issue 23, item 4).
    assert all(miss.startswith(("sqlite:", "postgresql:")) for miss in f["misses"])
    assert f["verdict"] == ("PASS" if not f["misses"] else "FAIL")


def test_bench_announce_signals_every_blocked_want_without_a_stalled_workflow_task() -> None:
    f = bench("bench.bench_announce", "--n", "30")
    assert f["n"] == f["signalled"] == f["wants_successful"] == 30
    assert f["stalled_tasks"] == 0
    assert f["baseline_signal_s"] == pytest.approx((f["baseline_before_s"] + f["baseline_after_s"]) / 2)
    assert f["ratio"] == pytest.approx(f["announce_signal_s"] / f["baseline_signal_s"])
    # The ratio is the only target, and a busy machine moves it.
    assert f["verdict"] == ("PASS" if f["pass"] else "FAIL")


def test_bench_executors_fulfils_a_want_without_a_stalled_workflow_task() -> None:
    # Local mode alone: tests/test_cluster.py builds on the cluster session, submit and Connect executors
    # (a cluster, an application per attempt, a Connect server: a minute or more each here).
    skip = [arg for variant in ("cluster", "submit", "connect") for arg in ("--skip", variant)]
    # Its own limit, under the test's: a want that hangs fails with the worker's log, not a bare timeout.
    f = bench("bench.bench_executors", "--ref", "raw_events/2024-01-07", "--timeout", "180", *skip)
    assert f["local"]["job_runs"] == f["local"]["attempts"] == 1, f["local"]
    assert f["local"]["attempt_ratio"] == 1.0 and f["stalled_tasks"] == 0
    assert f["misses"] == [] and f["verdict"] == "PASS"


def test_bench_big_backfill_keeps_its_window_and_cancels_within_seconds() -> None:
    f = bench("bench.bench_big_backfill", "--partitions", "1000", "--window", "20", "--run-for", "3")
    # Every want it had not started was cancelled, with those still open; nothing is left open.
    assert f["partitions"] - f["started"] <= f["cancelled"] <= f["partitions"] - f["done_before_cancel"]
    assert f["finished"]
    assert 0 < f["done_before_cancel"] <= f["started"] <= f["done_before_cancel"] + 2 * f["window"]
    assert 0 < f["most_open_wants"] <= 20
    assert f["job_runs_after_cancel"] == f["stalled_tasks"] == f["job_runs_while_paused"] == 0
    assert f["record_ratio"] == pytest.approx(f["record_s"] / f["raw_s"])
    # The web process served the backfill's page at every look, and neither process outgrew its bound.
    assert f["page_p95_ms"] > 0 and f["web_peak_rss_mib"] > 0 and f["worker_peak_rss_mib"] > 0
    # Only the timings, which a busy machine moves, may miss their targets here.
    timings = {
        "record",
        "first progress",
        "progress view",
        "page",
        "pause",
        "resume",
        "cancel",
        "nothing open",
    }
    assert set(f["misses"]) <= timings, f["misses"]
    assert f["verdict"] == ("PASS" if not f["misses"] else "FAIL")
