"""The storage interface and garbage collection, on the local file system and on a real S3-compatible
server on loopback (moto's): write, list, read back, delete, and which instance locations gc removes."""

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from databuild.bel import BuildEventLog
from databuild.domain.decisions import Execute
from databuild.errors import InvalidInputError
from databuild.graph import Graph
from databuild.jobs.storage import Storage
from databuild.models import InstanceRef, WantSpec
from databuild.operations.garbage import collect_garbage
from databuild.refs import storage_uri
from tests.helpers import s3_server

pytestmark = pytest.mark.unit

graph = Graph("gc")
graph.job("p/{n}")(lambda ctx, n: None)
graph.job("w/{n}", label="w", batch=5)(lambda ctx, partitions: None)
WEEK = timedelta(days=7)
BUCKET = "lake"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with s3_server(BUCKET) as s3:
        yield s3.endpoint


@pytest.fixture(params=["local", "s3"])
def storage(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Storage:
    if request.param == "local":
        return Storage(tmp_path / "lake")
    endpoint = request.getfixturevalue("s3_endpoint")
    # How a user points DataBuild (pyarrow) at an S3-compatible store: the standard AWS variables.
    for name, value in {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    return Storage(f"s3a://{BUCKET}/{uuid.uuid4().hex[:8]}")


def test_files_are_written_listed_read_back_and_deleted(storage: Storage) -> None:
    storage.write_text("a/b.json", "one")
    storage.write_text("a/b.json", "two")  # replaced whole
    storage.write_text("a/c/d.txt", "three")
    assert storage.read_text("a/b.json") == "two"
    assert sorted(key for key, _ in storage.files("a")) == ["a/b.json", "a/c/d.txt"]
    assert all(modified is not None for _, modified in storage.files())
    assert storage.exists("a/c") and not storage.exists("a/x")
    with pytest.raises(FileNotFoundError):
        storage.read_text("a/missing.json")
    storage.delete("a/c")
    storage.delete("a/never-there")  # nothing there is not an error
    assert [key for key, _ in storage.files()] == ["a/b.json"]
    for escaping in ("../outside", "/etc/passwd", "a/../../x"):
        with pytest.raises(InvalidInputError, match="not inside the storage root"):
            storage.write_text(escaping, "x")


def test_an_instances_rows_bytes_and_files_come_from_its_parquet_footers(storage: Storage) -> None:
    """Rows from each data file's footer (several read at once), bytes and files from the listing; what
    is not data (``_SUCCESS``, a hidden file) is not counted."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    key = storage.instance_key("p/1", str(uuid.uuid4()))
    one = storage.instance_key("p/2", str(uuid.uuid4()))
    for folder in (key, one):
        storage._fs.create_dir(storage._path(folder))
    for part, rows in enumerate((3, 4, 5)):
        table = pa.table({"n": list(range(rows))})
        pq.write_table(table, f"{storage._path(key)}/part-{part}.parquet", filesystem=storage._fs)
    storage.write_text(f"{key}/_SUCCESS", "")
    storage.write_text(f"{key}/.part-0.parquet.crc", "x")
    rows, size, files = storage.parquet_summary(key)
    assert (rows, files) == (12, 3) and size > 0
    pq.write_table(pa.table({"n": [1]}), f"{storage._path(one)}/part-0.parquet", filesystem=storage._fs)
    assert storage.parquet_summary(one)[::2] == (1, 1)


def test_instance_locations_are_found_and_deleted(storage: Storage) -> None:
    first, second, nested = (str(uuid.uuid4()) for _ in range(3))
    for ref, instance_id in (("p/1", first), ("p/1", second), ("deep/a/b", nested)):
        storage.write_text(f"{Storage.instance_key(ref, instance_id)}/part-0.parquet", "rows")
        storage.write_text(f"{Storage.instance_key(ref, instance_id)}/sub/part-1.parquet", "rows")
    storage.write_text("p/2/part-0.parquet", "an external producer's data, in the ref's own folder")
    storage.write_text(f"_databuild/submissions/jr-x-1/{'request.json'}", "{}")

    assert sorted((i.ref, i.instance_id) for i in storage.instances()) == sorted(
        [("p/1", first), ("p/1", second), ("deep/a/b", nested)]
    )
    assert [(a.job_run_id, a.attempt) for a in storage.submission_areas()] == [("jr-x", 1)]
    assert storage.location("p/1", first) == f"{storage.uri}/p/1/~{first}"
    storage.delete(Storage.instance_key("p/1", first))
    assert sorted(i.instance_id for i in storage.instances()) == sorted([second, nested])
    with pytest.raises(ValueError):
        Storage.instance_key("p/1", "../../etc")  # an instance id is a UUID, nothing else
    with pytest.raises(InvalidInputError, match="not a job run id"):
        Storage.write_key("p", "../../etc", 1)
    # A partition's folder in a partitioned write is named as Spark's partitionBy names it.
    assert Storage.partition_folder({"day": "2024-01-01", "k": "a=b:c/d"}) == "day=2024-01-01/k=a%3Db%3Ac%2Fd"


def test_storage_roots_are_uris() -> None:
    assert storage_uri("/data/lake/") == "file:///data/lake"
    assert storage_uri("s3a://bucket/lake/") == "s3a://bucket/lake"
    for bad, reason in (("ftp://host/x", "scheme 'ftp'"), ("s3a:///nobucket", "names no bucket")):
        with pytest.raises(InvalidInputError, match=reason):
            storage_uri(bad)


def claim(bel: BuildEventLog, ref: str) -> Execute:
    generation = bel.partitions.generations([ref]).get(ref, 0)  # a want after a taint is a new want
    want = WantSpec(
        ref=ref, data_timestamp=datetime(2024, 1, 1, tzinfo=UTC), source="cli", generation=generation
    )  # type: ignore[arg-type]
    bel.wants.register(want)
    decision = bel.decisions.decide(want.want_id, 1, graph.resolve(ref))
    assert isinstance(decision, Execute), decision
    return decision


def attempt(bel: BuildEventLog, storage: Storage, ref: str, number: int = 1) -> tuple[str, str]:
    """Start an attempt of ``ref``'s job run and write its output; returns (job run id, instance id)."""
    runs = [r for r in bel.job_runs.query(limit=100) if ref in r.outputs and not r.state.is_final]
    job_run_id = runs[0].job_run_id if runs else claim(bel, ref).job_run_id
    instance_id = str(uuid.uuid4())
    bel.job_runs.start(job_run_id, number, "w", [InstanceRef(ref=ref, instance_id=instance_id)])
    storage.write_text(f"{Storage.instance_key(ref, instance_id)}/part-0.parquet", "rows")
    return job_run_id, instance_id


def publish(bel: BuildEventLog, storage: Storage, ref: str) -> str:
    job_run_id, instance_id = attempt(bel, storage, ref)
    bel.job_runs.succeed(job_run_id, [], [InstanceRef(ref=ref, instance_id=instance_id)])
    return instance_id


def test_gc_deletes_only_what_nothing_needs(storage: Storage, bel: BuildEventLog) -> None:
    superseded = publish(bel, storage, "p/1")
    bel.partitions.taint("p/1", reason="bad data")
    rebuilt = publish(bel, storage, "p/1")  # the rebuild: the tainted instance is retired now
    live = publish(bel, storage, "p/2")
    pinned = publish(bel, storage, "p/3")
    bel.partitions.taint("p/3")
    publish(bel, storage, "p/3")
    bel.partitions.pin_instance(pinned, reason="the audit of 2024")
    failed_run, orphan = attempt(bel, storage, "p/4")
    bel.job_runs.fail(failed_run, "boom")
    _, writing = attempt(bel, storage, "p/5")  # a run that has not ended
    foreign = str(uuid.uuid4())
    storage.write_text(f"{Storage.instance_key('p/6', foreign)}/part-0.parquet", "another graph's")

    soon = collect_garbage(storage, bel, keep=WEEK)
    assert soon.deleted == []
    # The open run of p/5 was created after everything else retired: it may read none of them.
    assert soon.kept == {
        "live": 3,
        "pinned": 1,
        "within retention": 2,
        "being written": 1,
        "unknown to the BEL": 1,
    }

    later = datetime.now(UTC) + WEEK + timedelta(hours=1)
    preview = collect_garbage(storage, bel, keep=WEEK, now=later, dry_run=True)
    assert sorted(c.instance_id or "" for c in preview.deleted) == sorted([superseded, orphan])
    assert len(storage.instances()) == 8  # a dry run deletes nothing

    report = collect_garbage(storage, bel, keep=WEEK, now=later)
    assert {c.instance_id: c.reason.split(" ")[0] for c in report.deleted} == {
        superseded: "tainted",
        orphan: "left",
    }
    left = {i.instance_id for i in storage.instances()}
    assert left == {rebuilt, live, pinned, writing, foreign} | {bel.partitions.get("p/3").instance_id or ""}

    bel.partitions.pin_instance(pinned, pinned=False)
    unpinned = collect_garbage(storage, bel, keep=WEEK, now=later)
    assert [c.instance_id for c in unpinned.deleted] == [pinned]


def test_gc_keeps_what_a_job_run_open_since_may_still_read(tmp_path: Path, bel: BuildEventLog) -> None:
    storage = Storage(tmp_path / "lake")
    old = publish(bel, storage, "p/1")
    reader = claim(bel, "p/9")  # a run that started while `old` was live, and reads it slowly
    bel.partitions.taint("p/1")
    publish(bel, storage, "p/1")
    later = datetime.now(UTC) + WEEK * 2
    assert collect_garbage(storage, bel, keep=timedelta(0), now=later).kept["may be read"] == 1
    bel.job_runs.fail(reader.job_run_id, "done reading")
    assert [c.instance_id for c in collect_garbage(storage, bel, keep=timedelta(0), now=later).deleted] == [
        old
    ]


def test_gc_collects_only_the_submission_folders_of_attempts_its_bel_started(
    storage: Storage, bel: BuildEventLog, tmp_path: Path
) -> None:
    """Two graphs' BELs share one storage root. Each one's gc, even with no retention, deletes only the
    folders of attempts it started that ended or were superseded: never the other's, running or not."""
    other = BuildEventLog.create(f"sqlite:///{tmp_path / 'other.sqlite'}")

    def submitted(log: BuildEventLog, ref: str, attempts: int = 1) -> str:
        job_run_id = claim(log, ref).job_run_id
        for number in range(1, attempts + 1):  # as the submit executor does: the start, then the folder
            log.job_runs.start(job_run_id, number, "w", [InstanceRef(ref=ref, instance_id=str(uuid.uuid4()))])
            storage.write_text(f"{storage.submission_key(job_run_id, number)}/request.json", "{}")
        return job_run_id

    try:
        failed = submitted(bel, "p/1")
        bel.job_runs.fail(failed, "boom")
        retried = submitted(bel, "p/2", attempts=2)  # attempt 1 failed; attempt 2 is running
        their_failed = submitted(other, "p/1")
        other.job_runs.fail(their_failed, "boom")
        their_running = submitted(other, "p/3")
        later = datetime.now(UTC) + timedelta(minutes=1)

        def areas() -> set[tuple[str, int]]:
            return {(a.job_run_id, a.attempt) for a in storage.submission_areas()}

        ours = collect_garbage(storage, bel, keep=timedelta(0), now=later)
        assert sorted(
            (c.job_run_id or "", c.reason) for c in ours.deleted if c.kind == "submission"
        ) == sorted([(failed, "job run failed"), (retried, "attempt 1 was superseded by attempt 2")])
        assert areas() == {(retried, 2), (their_failed, 1), (their_running, 1)}
        theirs = collect_garbage(storage, other, keep=timedelta(0), now=later)
        assert [(c.job_run_id, c.reason) for c in theirs.deleted if c.kind == "submission"] == [
            (their_failed, "job run failed")
        ]
        assert areas() == {(retried, 2), (their_running, 1)}
    finally:
        other.dispose()


def written_together(bel: BuildEventLog, storage: Storage, refs: list[str], *, publish: bool) -> str:
    """An attempt of one batch job run that writes ``refs`` as one partitioned write (each a sub-folder
    of the attempt's folder, as Spark names it), published or not; returns the job run id."""
    job_run_id = claim(bel, refs[0]).job_run_id
    for ref in refs[1:]:  # each joins the first's batch
        want = WantSpec(ref=ref, data_timestamp=datetime(2024, 1, 1, tzinfo=UTC), source="cli")  # type: ignore[arg-type]
        bel.wants.register(want)
        assert bel.decisions.decide(want.want_id, 1, graph.resolve(ref)).job_run_id == job_run_id  # type: ignore[union-attr]
    instances = [InstanceRef(ref=ref, instance_id=str(uuid.uuid4())) for ref in refs]
    bel.job_runs.start(job_run_id, 1, "w", instances)
    folder = Storage.write_key("w", job_run_id, 1)
    keys = {ref: f"{folder}/{Storage.partition_folder({'n': ref.split('/')[1]})}" for ref in refs}
    for key in keys.values():
        storage.write_text(f"{key}/part-0.parquet", "rows")
    storage.write_text(f"{folder}/_SUCCESS", "")
    if publish:
        locations = {ref: storage.uri_of(key) for ref, key in keys.items()}
        bel.job_runs.succeed(job_run_id, [], instances, 1, locations)
    return job_run_id


def test_gc_deletes_a_partitioned_write_whole_or_a_partition_at_a_time(
    storage: Storage, bel: BuildEventLog
) -> None:
    live = written_together(bel, storage, ["w/1", "w/2"], publish=True)
    failed = written_together(bel, storage, ["w/3", "w/4"], publish=False)
    bel.job_runs.fail(failed, "boom")
    writing = written_together(bel, storage, ["w/5", "w/6"], publish=False)
    foreign = Storage.write_key("w", "jr-0123456789abcdef", 1)
    storage.write_text(f"{foreign}/n=1/part-0.parquet", "another graph's")
    assert {(w.job_run_id, w.attempt) for w in storage.partitioned_writes()} == {
        (live, 1),
        (failed, 1),
        (writing, 1),
        ("jr-0123456789abcdef", 1),
    }
    assert storage.instances() == []  # a partitioned write's folders are not instance locations
    assert bel.partitions.instance(bel.partitions.get("w/2").instance_id or "").location == storage.uri_of(
        f"w/~{live}-1/n=2"
    )

    later = datetime.now(UTC) + WEEK + timedelta(hours=1)
    report = collect_garbage(storage, bel, keep=WEEK, now=later)
    assert [(c.location, c.reason.split(" ")[0]) for c in report.deleted] == [
        (storage.uri_of(Storage.write_key("w", failed, 1)), "left")
    ]
    assert report.kept == {"live": 2, "being written": 1, "unknown to the BEL": 1}

    # One partition of the live write is rebuilt: after the retention (and once the run that was open
    # while it was live has ended) its folder goes, not the write's.
    bel.partitions.taint("w/1", reason="bad data")
    publish(bel, storage, "w/1")
    much_later = later + WEEK * 2
    assert collect_garbage(storage, bel, keep=WEEK, now=much_later).kept["may be read"] == 1
    bel.job_runs.fail(writing, "stopped")
    retired = collect_garbage(storage, bel, keep=WEEK, now=much_later)
    assert sorted((c.ref or "", c.location) for c in retired.deleted) == [
        ("", storage.uri_of(Storage.write_key("w", writing, 1))),
        ("w/1", storage.uri_of(f"w/~{live}-1/n=1")),
    ]
    assert storage.exists(f"w/~{live}-1/n=2") and not storage.exists(f"w/~{live}-1/n=1")
    # Then the other: the write's folder goes whole.
    bel.partitions.taint("w/2")
    publish(bel, storage, "w/2")
    gone = collect_garbage(storage, bel, keep=WEEK, now=much_later + WEEK * 2)
    assert [c.location for c in gone.deleted] == [storage.uri_of(f"w/~{live}-1")]
    assert {w.job_run_id for w in storage.partitioned_writes()} == {"jr-0123456789abcdef"}
