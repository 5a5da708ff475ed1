"""Iceberg tables on the real stack: Temporal, Spark writing the instances, the BEL, and pyiceberg reading
the tables from the SQL catalog in the BEL's own database (Spark's Iceberg runtime cannot be installed on
these machines, so every read here is pyiceberg's)."""

import asyncio
import os
import signal
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from databuild.jobs.storage import Storage
from databuild.jobs.tables.iceberg import INSTANCES, open_catalog
from databuild.jobs.tables.publisher import TablePublisher
from databuild.jobs.tables.setup import iceberg_tables
from databuild.models import Instance, PartitionStatus, WantState
from databuild.operations.garbage import collect_garbage
from databuild.operations.metrics import BelCollector
from databuild.testing import POSTGRES_ADMIN_URL, postgres_database
from databuild.views.lineage import partition_view
from databuild.web import create_app, web_context
from tests import graphs
from tests.conftest import Stack, cli_batch, require_postgres, stack_env
from tests.helpers import start_in_own_group, wide_days_built
from worker.run import running_worker

pytestmark = pytest.mark.slow


async def built(stack: Stack, ref: str) -> Instance:
    want = await asyncio.wait_for(stack.db.wait(await stack.db.want(ref)), timeout=120)
    assert want.state is WantState.successful, want.reason
    return stack.bel.partitions.instance(stack.bel.partitions.get(ref).instance_id or "")


async def committed(stack: Stack, instance_id: str, seconds: float = 60) -> Instance:
    """The instance once its table commit is recorded (the commit follows the BEL's, in the background)."""
    deadline = time.monotonic() + seconds
    while (instance := stack.bel.partitions.instance(instance_id)).table is None:
        assert time.monotonic() < deadline, f"instance {instance_id} was never committed to its table"
        await asyncio.sleep(0.1)
    return instance


async def withdrawn(stack: Stack, instance_id: str, seconds: float = 60) -> Instance:
    deadline = time.monotonic() + seconds
    while (
        instance := stack.bel.partitions.instance(instance_id)
    ).table is None or instance.table.removed_at is None:
        assert time.monotonic() < deadline, f"instance {instance_id} was never taken out of its table"
        await asyncio.sleep(0.1)
    return instance


def rows_by(table: Any, column: str, **scan: Any) -> dict[str, int]:
    counted: dict[str, int] = {}
    for value in table.scan(**scan).to_arrow().column(column).to_pylist():
        counted[value] = counted.get(value, 0) + 1
    return counted


async def test_instances_are_iceberg_commits_audited_before_they_are_published(  # type: ignore[no-untyped-def]
    postgres_url: str, make_stack, tmp_path: Path
) -> None:
    """One scenario on a PostgreSQL BEL, its SQL catalog in the BEL's own database: a worker killed
    between the BEL commit and its table commit; commits that name their builds; a taint, a rebuild and time
    travel; everywhere a user looks; a failed check and a dropped column publishing nothing; a new column;
    retention; a batch as one snapshot."""
    namespace = f"ice_{uuid.uuid4().hex[:8]}"
    stack = await make_stack(
        graph="tests.graphs:lake",
        worker=False,
        database_url=postgres_url,
        table_format="iceberg",
        catalog_database=namespace,
        batch_window=timedelta(seconds=60),
    )
    catalog = open_catalog(postgres_url, stack.settings.storage_root)
    a, b = uuid.uuid4().hex[:6], uuid.uuid4().hex[:6]

    # The worker is killed after the BEL commit that made left/a live, as it was to commit it to its table:
    # the next worker's start makes that commit, once, and the want completes.
    await asyncio.to_thread(stack.parts.spark.session)  # warm: the next worker builds at once
    dying = start_in_own_group(
        "tests.dying_publisher", stack_env(stack, PYTHONUNBUFFERED="1"), tmp_path / "dying.log"
    )
    try:
        want_a = await stack.db.want(f"left/{a}")
        killed = await asyncio.to_thread(dying.wait, 240)
        assert killed == -signal.SIGKILL, (tmp_path / "dying.log").read_text()[-3000:]
    finally:
        if dying.poll() is None:
            os.killpg(dying.pid, signal.SIGKILL)
    live = stack.bel.partitions.get(f"left/{a}")
    assert live.status is PartitionStatus.live and live.instance_id is not None
    assert stack.bel.partitions.instance(live.instance_id).table is None
    assert not catalog.table_exists(f"{namespace}.left")  # the table was never made
    graphs.BUILDS[a] = 1  # left/a's first build was the dying worker's (10 rows): its next has 20
    async with running_worker(stack.parts, warm_spark=False):
        first_a = await committed(stack, live.instance_id)
        done = await asyncio.wait_for(stack.db.wait(want_a), timeout=120)
        assert done.state is WantState.successful
        assert len(catalog.load_table(f"{namespace}.left").snapshots()) == 1

        # A second run, a second commit; each snapshot names the build it is.
        first_b = await committed(stack, (await built(stack, f"left/{b}")).instance_id)
        table = catalog.load_table(f"{namespace}.left")
        assert rows_by(table, "n") == {a: 10, b: 10}
        assert [f.name for f in table.spec().fields] == ["n"]
        assert first_a.table is not None and first_a.table.format == "iceberg"
        assert first_a.table.table == f"{namespace}.left"
        snapshot = table.snapshot_by_id(first_a.table.snapshot_id or 0)
        assert snapshot is not None and snapshot.summary is not None
        run = stack.bel.job_runs.get(first_a.job_run_id or "")
        assert snapshot.summary[INSTANCES] == first_a.instance_id
        assert snapshot.summary["databuild.job-run"] == run.job_run_id
        assert snapshot.summary["databuild.want"] == run.want_id
        assert snapshot.summary["databuild.job-version"] == first_a.job_version
        assert snapshot.summary["databuild.refs"] == f"left/{a}"
        # The files are where Spark wrote them: the instance's own location.
        files = {task.file.file_path for task in table.scan().plan_files()}
        assert all("/~" in path for path in files) and any(first_a.instance_id in path for path in files)
        b_files = {path for path in files if first_b.instance_id in path}

        # A taint takes the partition out of the current snapshot (a delete snapshot); the rebuild adds the new
        # instance and leaves every other partition's files as they were.
        await stack.db.taint(f"left/{a}", reason="late events")
        await withdrawn(stack, first_a.instance_id)
        table.refresh()
        assert rows_by(table, "n") == {b: 10}
        second_a = await committed(stack, (await built(stack, f"left/{a}")).instance_id)
        table.refresh()
        assert rows_by(table, "n") == {a: 20, b: 10}
        assert {
            p for p in (t.file.file_path for t in table.scan().plan_files()) if first_b.instance_id in p
        } == b_files
        # Time travel to the first instance by the snapshot id the BEL recorded for it.
        assert rows_by(table, "n", snapshot_id=first_a.table.snapshot_id) == {a: 10}
        assert second_a.table is not None and second_a.table.snapshot_id != first_a.table.snapshot_id

        # Everywhere a user looks: the instance's commit in `partitions show --json`, the table in `tables`,
        # the commits in /metrics.
        shown = partition_view(stack.bel, f"left/{a}").model_dump(mode="json")
        commit = shown["index"]["instances"][second_a.instance_id]["table"]
        assert (commit["format"], commit["table"], commit["snapshot_id"]) == (
            "iceberg",
            f"{namespace}.left",
            second_a.table.snapshot_id,
        )
        assert shown["index"]["instances"][first_a.instance_id]["table"]["removed_at"] is not None
        (left,) = [view for view in await stack.db.tables() if view.pattern == "left/{n}"]
        assert (left.table, left.format, left.exists, left.partitions, left.behind) == (
            f"{namespace}.left",
            "iceberg",
            True,
            2,
            0,
        )
        assert left.snapshot_id == second_a.table.snapshot_id and left.commits == 4 and left.failures == 0
        app = create_app(web_context(stack.settings, stack.bel, "http://127.0.0.1:8233"))
        with TestClient(app, base_url="http://localhost:8000", client=("127.0.0.1", 50000)) as client:
            page = client.get(f"/partitions/left/{a}").text
            assert 'id="table-commit"' in page and str(second_a.table.snapshot_id) in page
            listed = client.get("/api/tables").json()
            assert {"pattern": "left/{n}", "snapshot_id": left.snapshot_id, "behind": 0}.items() <= next(
                t for t in listed if t["pattern"] == "left/{n}"
            ).items()
        shown_cli, tables_cli = await cli_batch(stack, ["partitions", "show", f"left/{a}"], ["tables"])
        assert (
            f"table {namespace}.left (iceberg) snapshot {second_a.table.snapshot_id}" in shown_cli.stdout
        ), shown_cli
        (row,) = [line.split() for line in tables_cli.stdout.splitlines() if line.split()[:1] == ["left/{n}"]]
        assert row[:4] == ["left/{n}", f"{namespace}.left", "iceberg", str(left.snapshot_id)], tables_cli
        scraped = {m.name: m for m in BelCollector(stack.bel, {}).collect()}
        assert any(
            sample.labels == {"table": f"{namespace}.left", "format": "iceberg"} and sample.value == 4
            for sample in scraped["databuild_table_commits"].samples
        )

        # A blocking check that fails publishes nothing: no snapshot, nothing in the BEL.
        snapshots = len(table.snapshots())
        failing = uuid.uuid4().hex[:6]
        graphs.LEFT_AUDIT_FAILS.add(f"left/{failing}")
        want = await asyncio.wait_for(stack.db.wait(await stack.db.want(f"left/{failing}")), timeout=120)
        assert want.state is WantState.failed
        table.refresh()
        assert len(table.snapshots()) == snapshots and failing not in rows_by(table, "n")

        # A new column evolves the table; a dropped one is refused in one line, and nothing is published.
        graphs.SHAPE[:] = ["id", "label"]
        await committed(stack, (await built(stack, f"shape/{a}")).instance_id)
        graphs.SHAPE[:] = ["id", "label", "score"]
        await committed(stack, (await built(stack, f"shape/{b}")).instance_id)
        shape = catalog.load_table(f"{namespace}.shape")
        assert [f.name for f in shape.schema().fields] == ["id", "label", "n", "score"]
        scanned = shape.scan().to_arrow().to_pydict()
        assert sorted(zip(scanned["n"], scanned["score"], strict=True))[0][1] in (None, 0.0)
        graphs.SHAPE[:] = ["id", "score"]
        dropped = uuid.uuid4().hex[:6]
        want = await asyncio.wait_for(stack.db.wait(await stack.db.want(f"shape/{dropped}")), timeout=120)
        assert want.state is WantState.failed
        reason = stack.bel.partitions.get(f"shape/{dropped}").reason or ""
        assert f"table {namespace}.shape" in reason and "'label'" in reason and "\n" not in reason, reason
        shape.refresh()
        assert dropped not in rows_by(shape, "n")

        # Retention: b's first snapshot also reads a's first instance (tainted since). Pinned, it is kept with
        # the files it reads, though gc keeps nothing else; unpinned, it expires and a's files go.
        storage = Storage(stack.settings.storage_root)
        tables = TablePublisher(
            stack.bel, stack.graph, {"iceberg": iceberg_tables(stack.settings, storage)}, "iceberg"
        )
        await stack.db.pin(first_b.instance_id)
        report = collect_garbage(storage, stack.bel, keep=timedelta(0), tables=tables)
        assert report.expired_snapshots > 0 and first_a.instance_id not in {
            c.instance_id for c in report.deleted
        }
        table.refresh()
        assert {s.snapshot_id for s in table.snapshots()} == {
            first_b.table.snapshot_id,
            table.current_snapshot().snapshot_id,
        }
        assert rows_by(table, "n", snapshot_id=first_b.table.snapshot_id) == {a: 10, b: 10}
        await stack.db.pin(first_b.instance_id, pinned=False)
        report = collect_garbage(storage, stack.bel, keep=timedelta(0), tables=tables)
        assert first_a.instance_id in {c.instance_id for c in report.deleted}
        table.refresh()
        assert len(table.snapshots()) == 1 and rows_by(table, "n") == {a: 20, b: 10}

        # A batch: one run writes three days as one DataFrame (ctx.write_partitioned), one snapshot.
        days = await wide_days_built(stack.db)
        (run,) = stack.bel.job_runs.query(job_label="wide", limit=10)
        instances = [
            await committed(stack, stack.bel.partitions.get(f"wide/{day}").instance_id or "") for day in days
        ]
        assert {i.table.snapshot_id for i in instances if i.table} == {instances[0].table.snapshot_id}
        table = catalog.load_table(f"{namespace}.wide")
        (snapshot,) = table.snapshots()
        assert snapshot.summary is not None and snapshot.summary["databuild.job-run"] == run.job_run_id
        assert snapshot.summary[INSTANCES] == ",".join(sorted(i.instance_id for i in instances))
        assert rows_by(table, "day") == {day: k + 1 for k, day in enumerate(days)}
        # Each day's instance is its own folder of the run's one write, its files holding the day.
        for day, instance in zip(days, instances, strict=True):
            assert instance.location and instance.location.endswith(
                f"/~{run.job_run_id}-1/day__partition={day}"
            )
            files = {t.file.file_path for t in table.scan(row_filter=f"day = '{day}'").plan_files()}
            assert files and all(path.startswith(instance.location) for path in files)


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A database of its own on the PostgreSQL server, for a BEL and its SQL catalog (requested before the
    stack, so it outlives the stack's worker)."""
    require_postgres()
    with postgres_database(POSTGRES_ADMIN_URL, "iceberg", durable=False) as url:
        yield url
