"""Dashboard pages and the graph view without a browser or a server (a BEL and the app in process): text
from user code and operators is escaped everywhere, and the graph view counts partitions by pattern and
shows each job's declared and effective policies, on SQLite and PostgreSQL. (In a real browser over the
demo: tests/test_dashboard.py.)"""

import contextlib
import threading
import time
import uuid
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from databuild.bel import BuildEventLog
from databuild.client import DataBuild
from databuild.config import Settings
from databuild.graph import Graph
from databuild.models import InstanceRef, PartitionStatus, WantSpec, WantState
from databuild.refreshed import Refreshed
from databuild.testing import POSTGRES_ADMIN_URL, postgres_database
from databuild.views.graph import JobInput, graph_view
from databuild.web import create_app, web_context
from tests.conftest import require_postgres

UI = "http://127.0.0.1:8233"
HOSTILE = """<script>window.__pwned=1</script>"'&<b>"""


@pytest.mark.unit
def test_hostile_labels_and_reasons_render_as_text(tmp_path: Path) -> None:
    """Job labels come from user code and taint reasons from operators: both are escaped everywhere."""
    graph = Graph("hostile")

    @graph.job("h/{n}", label=HOSTILE)
    def hostile(ctx: object, n: str) -> None:  # pragma: no cover - never run
        raise AssertionError

    settings = Settings(home=tmp_path)
    bel = BuildEventLog.create(settings.database_url.get_secret_value())
    from datetime import UTC, datetime

    spec = WantSpec(ref="h/1", data_timestamp=datetime(2024, 1, 1, tzinfo=UTC))
    bel.wants.register(spec)
    decision = bel.decisions.decide(spec.want_id, 1, graph.resolve("h/1"))
    assert decision.job_run_id is not None
    bel.job_runs.start(decision.job_run_id, 1, "w")
    bel.job_runs.fail(decision.job_run_id, HOSTILE)
    bel.wants.finish(spec.want_id, WantState.failed, reason=HOSTILE)
    app = create_app(web_context(settings, bel, UI))
    with TestClient(app, base_url="http://localhost:8000", client=("127.0.0.1", 50000)) as client:
        for path in (
            "/wants",
            f"/wants/{spec.want_id}",
            "/job-runs",
            f"/job-runs/{decision.job_run_id}",
            "/partitions/h/1",
        ):
            page = client.get(path)
            assert page.status_code == 200, path
            assert "<script>window.__pwned" not in page.text, path
            assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in page.text, path
        missing = client.get("/wants/" + quote("<img src=x onerror=alert(1)>", safe=""))
        assert missing.status_code == 404 and "<img" not in missing.text and "&lt;img src=x" in missing.text
        bad = client.get("/partitions/h/1", params={"fan_out": "lots"})
        assert bad.status_code == 400 and "fan_out" in bad.text and "Back to wants" in bad.text
        before = bel.events.last_idx()
        forged = client.post("/wants", data={"ref": "h/2"}, headers={"origin": "http://evil.example"})
        assert forged.status_code == 403 and "another site" in forged.text
        remote = TestClient(app, base_url="http://localhost:8000", client=("192.0.2.7", 50000))
        refused = remote.post("/wants", data={"ref": "h/2"})
        assert refused.status_code == 401 and "loopback clients only" in refused.text
        assert (
            bel.events.last_idx() == before and bel.wants.query(ref_prefix="h/2") == []
        )  # neither was recorded
        unknown = client.get("/no/such/page")
        assert unknown.status_code == 404 and "Back to wants" in unknown.text  # an HTML page, not JSON
    bel.dispose()


# The graph page ------------------------------------------------------------------------------------------

POLICIES = Graph("policies")
POLICIES.external("feed/{day}")


def _week(day: str) -> list[str]:  # needs a real date: not listable from placeholder names
    end = date.fromisoformat(day)
    return [f"clean/{end - timedelta(days=n)}" for n in range(7)]


@POLICIES.job(
    "clean/{day}",
    inputs=lambda day: [f"feed/{day}"],
    batch=4,
    pool="etl",
    max_running=2,
    retries=1,
    timeout="30m",
    heartbeat_timeout="45s",
    executor="submit",
    spark_conf={"spark.sql.shuffle.partitions": "8"},
)
def clean(ctx: object, partitions: list[dict[str, str]]) -> None:  # pragma: no cover - never run
    raise AssertionError


@POLICIES.job("weekly/{day}", inputs=_week)
def weekly(ctx: object, day: str) -> None:  # pragma: no cover - never run
    raise AssertionError


@POLICIES.job("report/{day}")  # declares nothing: its input edge is what its run read
def report(ctx: object, day: str) -> None:  # pragma: no cover - never run
    raise AssertionError


def _run(bel: BuildEventLog, ref: str) -> str:
    """Record a run for ``ref`` and start it; returns its id."""
    spec = WantSpec(ref=ref, data_timestamp=datetime(2024, 1, 1, tzinfo=UTC))
    bel.wants.register(spec)
    decision = bel.decisions.decide(spec.want_id, 1, POLICIES.resolve(ref))
    assert decision.job_run_id is not None
    bel.job_runs.start(decision.job_run_id, 1, "w")
    return decision.job_run_id


def _live(bel: BuildEventLog, ref: str) -> InstanceRef:
    return InstanceRef(ref=ref, instance_id=bel.partitions.get(ref).instance_id)


def _new(ref: str) -> InstanceRef:
    return InstanceRef(ref=ref, instance_id=str(uuid.uuid4()))


def by_status(bel: BuildEventLog, glob: str) -> dict[PartitionStatus, int]:
    return dict(Counter(p.status for p in bel.partitions.query(ref_glob=glob, limit=1000)))


# SQLite is the unit tier's; PostgreSQL is a server.
@pytest.mark.parametrize("backend", [pytest.param("sqlite", marks=pytest.mark.unit), "postgresql"])
def test_the_graph_view_counts_partitions_by_pattern_and_shows_declared_and_effective_policies(
    tmp_path: Path, backend: str
) -> None:
    with contextlib.ExitStack() as cleanup:
        url = f"sqlite:///{tmp_path / 'bel.sqlite'}"
        if backend == "postgresql":
            require_postgres()
            url = cleanup.enter_context(postgres_database(POSTGRES_ADMIN_URL, "graphview", durable=False))
        bel = BuildEventLog.create(url)
        cleanup.callback(bel.dispose)
        for day in ("2024-01-01", "2024-01-02", "2024-01-03"):
            bel.partitions.publish_external(f"feed/{day}")
        bel.partitions.publish_external("renamed/x")  # a ref no pattern of the graph matches any more
        built = _run(bel, "clean/2024-01-01")
        bel.job_runs.succeed(built, [_live(bel, "feed/2024-01-01")], [_new("clean/2024-01-01")])
        bel.job_runs.fail(_run(bel, "clean/2024-01-02"), "boom")
        _run(bel, "clean/2024-01-03")  # still running: building
        reporting = _run(bel, "report/2024-01-01")
        bel.job_runs.succeed(reporting, [_live(bel, "clean/2024-01-01")], [_new("report/2024-01-01")])

        settings = Settings(home=tmp_path, pools={"etl": 3}, job_executors={"report": "submit"})
        view = graph_view(bel, POLICIES, settings)
        patterns = {p.pattern: p for p in view.patterns}
        assert list(patterns) == ["feed/{day}", "clean/{day}", "weekly/{day}", "report/{day}"]
        for p in view.patterns:
            assert p.counts == by_status(bel, p.glob), p.pattern
        assert patterns["clean/{day}"].counts == {
            PartitionStatus.live: 1,
            PartitionStatus.failed: 1,
            PartitionStatus.building: 1,
        }
        assert patterns["feed/{day}"].job is None and view.unmatched == {PartitionStatus.live: 1}

        jobs = {j.label: j for j in view.jobs}
        assert jobs["clean"].inputs == [JobInput(pattern="feed/{day}", declared=True, observed=True)]
        assert jobs["report"].inputs == [JobInput(pattern="clean/{day}", declared=False, observed=True)]
        assert jobs["report"].latest_run == reporting
        assert jobs["weekly"].inputs == [] and "once it has succeeded" in (jobs["weekly"].inputs_note or "")
        clean_policies = jobs["clean"].policies
        assert (clean_policies.batch, clean_policies.pool, clean_policies.pool_slots) == (4, "etl", 3)
        assert clean_policies.max_running == 2 and clean_policies.batch_window == settings.batch_window
        assert clean_policies.effective.attempts == 2  # retries=1
        assert clean_policies.effective.start_to_close_timeout == timedelta(minutes=30)
        assert clean_policies.effective.heartbeat_timeout == timedelta(seconds=45)
        assert (clean_policies.effective_executor, clean_policies.executor_from) == ("submit", "graph")
        report_policies = jobs["report"].policies
        assert report_policies.effective.attempts == settings.job_attempts and report_policies.retries is None
        assert report_policies.executor_from == "DATABUILD_JOB_EXECUTORS"
        assert jobs["weekly"].policies.executor_from == "DATABUILD_EXECUTOR"

        # The JSON and the page are this one view.
        db = DataBuild(None, bel, POLICIES, settings)
        app = create_app(web_context(settings, bel, UI, client=db))
        with TestClient(app, base_url="http://localhost:8000", client=("127.0.0.1", 50000)) as client:
            served = client.get("/api/graph").json()
            assert served.pop("counted_at") is not None  # a small estate is counted within the request
            assert served == view.model_dump(mode="json", exclude={"counted_at"})
            page = client.get("/graph")
        assert page.status_code == 200
        assert all(f'data-job="{label}"' in page.text for label in jobs)
        assert all(f'data-pattern="{p}"' in page.text for p in patterns)
        assert '<td class="attempts">2 <span class="note declared"' in page.text
        assert (
            "etl <span" in page.text
            and "3 slots" in page.text
            and "spark.sql.shuffle.partitions=8" in page.text
        )


@pytest.mark.unit
def test_a_slow_partition_count_never_holds_up_the_graph(tmp_path: Path) -> None:
    """On a big estate counting every partition takes seconds: the graph answers at once with the last
    counts (none, and no time, before the first count ends), and one count runs however many ask."""
    bel = BuildEventLog.create(f"sqlite:///{tmp_path / 'bel.sqlite'}")
    try:
        bel.partitions.publish_external("feed/2024-01-01")
        settings = Settings(home=tmp_path)
        release, calls = threading.Event(), []

        def slow_count() -> dict[str | None, dict[PartitionStatus, int]]:
            calls.append(1)
            release.wait(30)
            return bel.partitions.counts([p.glob for p in POLICIES.patterns])

        counter = Refreshed(slow_count, name="test counts", every=60, patience=0.05)
        started = time.monotonic()
        first, second = (graph_view(bel, POLICIES, settings, counter) for _ in range(2))
        assert time.monotonic() - started < 5 and len(calls) == 1
        assert first.counted_at is None and second.counted_at is None
        assert all(not p.counts for p in first.patterns)
        release.set()
        deadline = time.monotonic() + 10
        while (view := graph_view(bel, POLICIES, settings, counter)).counted_at is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert {p.pattern: p.total for p in view.patterns}["feed/{day}"] == 1 and len(calls) == 1
    finally:
        bel.dispose()
