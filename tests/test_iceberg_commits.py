"""Iceberg commits without Spark: the publisher over pyiceberg, on local files and on an S3-compatible
server on loopback (moto), with instances the BEL made live: concurrent commits of different partitions,
each from a publisher of its own, all land (Iceberg's optimistic retry), and a crash before the table
commit is caught up by the next start, once. (With Spark and Temporal: tests/test_iceberg.py.)"""

import threading
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from databuild.bel import BuildEventLog
from databuild.errors import TableSchemaError
from databuild.graph import Graph
from databuild.jobs.storage import Storage
from databuild.jobs.tables.iceberg import INSTANCES, IcebergTables, open_catalog
from databuild.jobs.tables.publisher import TablePublisher
from databuild.jobs.tables.spec import Placed
from databuild.models import InstanceRef
from databuild.testing import record_build
from tests.test_storage import s3_endpoint, storage  # noqa: F401 (fixtures: a local and an S3 storage)

graph = Graph("ice_commits")
graph.job("t/{day}")(lambda ctx, day: None)


def built(bel: BuildEventLog, store: Storage, day: str, rows: int = 3) -> InstanceRef:
    """A run of ``t/{day}`` that wrote ``rows`` rows (the partition column in the files) and went live."""

    def write(location: str) -> None:
        store.filesystem.create_dir(store.arrow_path(location))
        frame = pa.table({"id": list(range(rows)), "day": [day] * rows})
        pq.write_table(frame, store.arrow_path(f"{location}/part-0.parquet"), filesystem=store.filesystem)

    return record_build(bel, graph, store, f"t/{day}", write)


def publisher(bel: BuildEventLog, store: Storage, namespace: str) -> TablePublisher:
    """A publisher as a worker of its own has one: its own catalog connection."""
    tables = IcebergTables(bel.url, namespace=namespace, storage=store, shown="the BEL's database")
    return TablePublisher(bel, graph, {"iceberg": tables}, "iceberg")


def test_concurrent_commits_of_different_partitions_all_land_and_a_crash_is_caught_up_once(
    storage: Storage,  # noqa: F811
    tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    bel = BuildEventLog.create(f"sqlite:///{tmp_path / 'bel.sqlite'}")
    namespace = f"ns_{uuid.uuid4().hex[:6]}"
    try:
        days = [f"2024-01-0{k}" for k in range(1, 5)]
        instances = {day: built(bel, storage, day, rows=k + 1) for k, day in enumerate(days)}
        # Four workers publish one partition each, at once: each opening of the catalog (making its tables),
        # each creation of the table and each commit races the others'.
        publishers = [publisher(bel, storage, namespace) for _ in days]
        start = threading.Barrier(len(days))
        failures: list[BaseException] = []

        def publish(each: TablePublisher, day: str) -> None:
            start.wait()
            try:
                assert each.follow([f"t/{day}"]) == 1
            except BaseException as error:
                failures.append(error)

        threads = [threading.Thread(target=publish, args=pair) for pair in zip(publishers, days, strict=True)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert failures == []
        catalog = open_catalog(bel.url, storage.uri)
        table = catalog.load_table(f"{namespace}.t")
        rows = table.scan().to_arrow().column("day").to_pylist()
        assert {day: rows.count(day) for day in days} == {day: k + 1 for k, day in enumerate(days)}
        named = sorted(
            s.summary.get(INSTANCES) for s in table.snapshots() if s.summary and s.summary.get(INSTANCES)
        )
        assert named == sorted(i.instance_id for i in instances.values())
        assert all(bel.partitions.instance(i.instance_id or "").table is not None for i in instances.values())
        files = {task.file.file_path for task in table.scan().plan_files()}
        assert all(path.startswith(storage.uri) and "/~" in path for path in files)  # where they were written

        # A worker that died after the BEL commit and before its table commit: the next start commits it,
        # once; a second start finds nothing behind.
        late = built(bel, storage, "2024-01-05")
        assert publisher(bel, storage, namespace).repair() == 1
        assert publisher(bel, storage, namespace).repair() == 0
        table.refresh()
        assert [s.summary.get(INSTANCES) for s in table.snapshots() if s.summary].count(late.instance_id) == 1
        # One that died after its table commit, before the BEL recorded it: the commit is found in the
        # table's history by the instance in its summary, recorded, and not made again.
        later = built(bel, storage, "2024-01-06")
        dying = publisher(bel, storage, namespace)
        spec, values = dying.table("t/2024-01-06") or (None, {})
        assert spec is not None
        placed = Placed(
            "t/2024-01-06",
            values,
            later.instance_id,
            bel.partitions.instance(later.instance_id or "").location,
        )
        made = dying.formats["iceberg"].publish(spec, [placed], {})
        assert bel.partitions.instance(later.instance_id or "").table is None
        snapshots = len(table.refresh().snapshots())
        assert publisher(bel, storage, namespace).repair() == 1
        assert len(table.refresh().snapshots()) == snapshots
        recorded = bel.partitions.instance(later.instance_id or "").table
        assert recorded is not None and recorded.snapshot_id == made.snapshot_id
    finally:
        bel.dispose()


@pytest.mark.unit
def test_files_holding_another_partitions_rows_are_refused_before_anything_is_published(
    tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    bel = BuildEventLog.create(f"sqlite:///{tmp_path / 'bel.sqlite'}")
    store = Storage(tmp_path / "lake")
    try:
        tables = publisher(bel, store, "ns")
        for frame, problem in (
            (pa.table({"id": [1, 2], "day": ["2024-01-01", "2024-01-02"]}), "holds 2024-01-01 to 2024-01-02"),
            (pa.table({"id": [1]}), "without its partition column 'day'"),
        ):
            ref, instance_id = "t/2024-01-01", str(uuid.uuid4())
            location = store.location(ref, instance_id)
            store.filesystem.create_dir(store.arrow_path(location))
            pq.write_table(frame, store.arrow_path(f"{location}/part-0.parquet"), filesystem=store.filesystem)
            with pytest.raises(TableSchemaError, match=f"^table ns.t: .*{problem}"):
                tables.audit({ref: location}, {ref: instance_id})
        assert not open_catalog(bel.url, store.uri).table_exists("ns.t")
    finally:
        bel.dispose()
