"""Prometheus metrics of a real worker on the real stack: after a want is built, its endpoint and the web
server's report the same cluster figures (the metrics against a BEL alone: tests/test_metrics.py)."""

from databuild.models import WantState
from databuild.testing import free_port
from databuild.web import create_app, serving, web_context
from tests.conftest import Stack
from tests.test_metrics import DURATION, assert_durations, scrape, series, value


async def test_a_worker_serves_the_cluster_metrics_after_a_want_is_built(make_stack: object) -> None:
    port = free_port()
    stack: Stack = await make_stack(graph="tests.graphs:chain", metrics_port=port)  # type: ignore[operator]
    spec = await stack.db.want("derived/1")  # dep-misses, builds base/1, then itself
    assert (await stack.db.wait(spec)).state is WantState.successful

    worker = await scrape(f"http://127.0.0.1:{port}/metrics")
    async with serving(create_app(web_context(stack.settings, stack.bel)), "127.0.0.1", free_port()) as base:
        web = await scrape(f"{base}/metrics")
    cluster = ("databuild_wants", "databuild_job_runs", f"{DURATION}_gcount", f"{DURATION}_bucket")
    for name in cluster:  # every process reports the same BEL
        assert {k: v for k, v in worker.items() if k[0] == name} == {
            k: v for k, v in web.items() if k[0] == name
        }
    assert value(worker, "databuild_wants", state="successful") == 2  # derived/1 and its derivative base/1
    assert series(worker, "databuild_job_runs", "job_label", "state") == {
        ("base", "succeeded"),
        ("derived", "dep_miss"),
        ("derived", "succeeded"),
    }
    runs = stack.bel.job_runs.query(limit=100)
    assert_durations(worker, runs)
    assert value(worker, "databuild_bel_write_seconds_count") > 0
    assert value(worker, "process_resident_memory_bytes") > 0
