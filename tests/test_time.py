"""SLA and TTL timers on the time-skipping test server: days of virtual time in seconds."""

import shutil
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from databuild.bel import BuildEventLog
from databuild.client import DataBuild
from databuild.graph import load_graph
from databuild.jobs.spark import SparkRuntime
from databuild.models import WantState
from databuild.testing import make_settings, skip_time
from tests.helpers import lake, until, waiting_for_feed
from worker.run import WorkerParts, running_worker

pytestmark = pytest.mark.slow


@pytest.fixture
async def skipping(
    spark_runtime: SparkRuntime, tmp_path: Path
) -> AsyncIterator[tuple[WorkflowEnvironment, DataBuild]]:
    path = shutil.which("temporal-test-server") or str(Path(sys.executable).parent / "temporal-test-server")
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=path, data_converter=pydantic_data_converter
    )
    settings = make_settings(tmp_path, env.client, "tests.graphs:late")
    bel = BuildEventLog.create(settings.database_url.get_secret_value())
    graph = load_graph(settings.graph)
    parts = WorkerParts(settings, env.client, bel, graph, spark_runtime)
    async with running_worker(parts):
        yield env, DataBuild(env.client, bel, graph, settings)
    bel.dispose()
    await env.shutdown()


def spark_runtime_session(db: DataBuild):  # type: ignore[no-untyped-def]
    from pyspark.sql import SparkSession

    return SparkSession.builder.getOrCreate()


async def test_sla_missed_then_fulfilled_late(skipping: tuple[WorkflowEnvironment, DataBuild]) -> None:
    env, db = skipping
    start = await env.get_current_time()
    spec = await db.want("report/late", data_timestamp=start, sla=timedelta(hours=9), ttl=timedelta(days=30))
    await until(lambda: waiting_for_feed(db, "feed/late"))
    assert not db.bel.wants.get(spec.want_id).sla_missed

    await env.sleep(timedelta(hours=10))
    await until(lambda: db.bel.wants.get(spec.want_id).sla_missed)
    want = db.bel.wants.get(spec.want_id)
    assert want.state is WantState.upstream_building  # late, but still working
    assert [w.want_id for w in db.bel.wants.sla_misses()].count(spec.want_id) == 1
    assert [e.type for e in db.bel.events.query(want_id=spec.want_id)].count("WantSlaMissed") == 1

    spark_runtime_session(db).range(5).write.parquet(str(lake(db.settings) / "feed/late"))
    await db.publish("feed/late")
    done = await db.wait(spec)
    assert done.state is WantState.successful
    assert done.sla_missed  # the flag stays raised
    assert db.bel.partitions.get("report/late").status.value == "live"


async def test_ttl_expiry_stops_the_want(skipping: tuple[WorkflowEnvironment, DataBuild]) -> None:
    env, db = skipping
    start = await env.get_current_time()
    spec = await db.want("report/never", data_timestamp=start, sla=timedelta(hours=9), ttl=timedelta(days=30))
    await until(lambda: waiting_for_feed(db, "feed/never"))

    await skip_time(env, timedelta(days=31))
    done = await db.wait(spec)
    assert done.state is WantState.expired
    assert "TTL" in (done.reason or "")
    assert done.sla_missed
    types = [e.type for e in db.bel.events.query(want_id=spec.want_id, limit=1000)]
    assert types.count("WantExpired") == 1 and types[-1] == "WantExpired"
    # Its derivative want shares the deadline and expires too.
    feed = next(w for w in db.bel.wants.query(ref_prefix="feed/never"))
    await until(lambda: db.bel.wants.get(feed.want_id).state is WantState.expired)


async def test_deadline_already_past_fires_at_once(skipping: tuple[WorkflowEnvironment, DataBuild]) -> None:
    env, db = skipping
    start = await env.get_current_time()
    spec = await db.want("report/overdue", data_timestamp=start - timedelta(days=1), sla=timedelta(hours=1))
    await until(lambda: db.bel.wants.get(spec.want_id).sla_missed)
    assert not db.bel.wants.get(spec.want_id).state.is_final
