"""The storage sweep: what attempts and killed publishes leave on the storage goes once the BEL says
nothing can use it; a live partition a killed publish moved aside is put back."""

import asyncio
import os
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from databuild.bel import BuildEventLog
from databuild.graph import Graph
from databuild.models import InstanceRef, InstanceStatus, WantSpec, WantState
from databuild.protocol import Decision
from databuild.storage import Storage
from databuild.sweep import PUBLISH_GRACE, SweepReport, sweep
from tests.helpers import until

graph = Graph("sweep")
graph.job("p/{n}")(lambda ctx, n: None)
graph.job("pair/{n}", "twin/{n}", label="pair")(lambda ctx, n: None)
WEEK = timedelta(days=7)


@pytest.fixture
def bel(tmp_path: Path) -> Iterator[BuildEventLog]:
    log = BuildEventLog.create(f"sqlite:///{tmp_path / 'bel.sqlite'}")
    yield log
    log.dispose()


def claim(bel: BuildEventLog, ref: str, source: str = "cli") -> Decision:
    generation = bel.generations([ref]).get(ref, 0)
    want = WantSpec(
        ref=ref, data_timestamp=datetime(2024, 1, 1, tzinfo=UTC), source=source, generation=generation
    )  # type: ignore[arg-type]
    bel.register_want(want)
    return bel.decide(want.want_id, 1, graph.resolve(ref))


def aged(path: Path, age: timedelta) -> Path:
    """Last modified ``age`` ago, as the sweep sees it."""
    then = time.time() - age.total_seconds()
    os.utime(path, (then, then))
    return path


def folder(path: Path, age: timedelta = timedelta(0)) -> Path:
    path.mkdir(parents=True)
    (path / "log").write_text("...")
    return aged(path, age)


def test_sweep_removes_what_ended_runs_left_and_keeps_what_is_in_use(
    tmp_path: Path, bel: BuildEventLog
) -> None:
    storage = Storage(tmp_path / "lake")
    reserved = storage.root / "_databuild"
    ended, running = claim(bel, "p/1").job_run_id, claim(bel, "p/2").job_run_id
    bel.start_job_run(ended, 1, "w")
    bel.fail_job_run(ended, "boom")
    bel.start_job_run(running, 1, "w")
    bel.start_job_run(running, 2, "w")  # attempt 1's worker was lost

    gone = [
        folder(reserved / "staging" / f"{ended}-1"),
        folder(reserved / "submissions" / f"{ended}-1", age=WEEK + timedelta(hours=1)),
        folder(reserved / "staging" / f"{running}-1"),
        folder(reserved / "staging" / "jr-unknown-1", age=WEEK + timedelta(hours=1)),
    ]
    kept = [
        folder(reserved / "submissions" / f"{ended}-2"),  # a failed attempt's log, for a week
        folder(reserved / "staging" / f"{running}-2"),  # the attempt running now
        folder(reserved / "submissions" / f"{running}-2"),
        folder(reserved / "staging" / "jr-unknown-2"),
    ]

    preview = sweep(storage, bel, keep_failed=WEEK, dry_run=True)
    assert sorted(r.path for r in preview.removed) == sorted(str(p) for p in gone)
    assert all(p.exists() for p in gone + kept)  # a dry run removes nothing

    report = sweep(storage, bel, keep_failed=WEEK)
    assert sorted((r.kind, Path(r.path).name, r.reason) for r in report.removed) == sorted(
        [
            ("staging", f"{ended}-1", "job run failed"),
            ("submission", f"{ended}-1", "job run failed"),
            ("staging", f"{running}-1", "attempt 1 was superseded by attempt 2"),
            ("staging", "jr-unknown-1", "no such job run in the BEL"),
        ]
    )
    assert [p for p in gone if p.exists()] == []
    assert [p for p in kept if not p.exists()] == []
    assert report.kept == len(kept)

    # Past the retention, the failed attempt's folder goes too; the running attempt's never does.
    later = sweep(storage, bel, keep_failed=WEEK, now=datetime.now(UTC) + WEEK + timedelta(days=1))
    assert sorted(Path(r.path).name for r in later.removed) == sorted([f"{ended}-2", "jr-unknown-2"])
    assert (reserved / "staging" / f"{running}-2").exists()


def build(bel: BuildEventLog, storage: Storage, ref: str, source: str = "cli") -> dict[str, str]:
    """Want ``ref``, run its job and publish every output as a new instance; returns them by ref."""
    decision = claim(bel, ref, source)
    bel.start_job_run(decision.job_run_id, 1, "w")
    area = storage.staging_area(decision.job_run_id, 1)
    instances = {out: str(uuid.uuid4()) for out in decision.outputs}
    for out in decision.outputs:
        folder(storage.staged(area, out))
    replaced = storage.publish(area, instances)
    writes = [InstanceRef(ref=out, instance_id=i) for out, i in instances.items()]
    bel.succeed_job_run(decision.job_run_id, [], writes)
    storage.discard(replaced)
    return instances


def killed_publish(storage: Storage, ref: str, age: timedelta) -> Path:
    """What a publish killed between its two renames leaves: the live partition in its trash folder."""
    publish = storage.root / "_databuild" / "trash" / uuid.uuid4().hex
    publish.mkdir(parents=True)
    os.rename(storage.path(ref), publish / uuid.uuid4().hex)
    return aged(publish, age)


def test_sweep_puts_back_a_live_partition_a_killed_publish_moved_aside(
    tmp_path: Path, bel: BuildEventLog
) -> None:
    storage = Storage(tmp_path / "lake")
    live = build(bel, storage, "p/live")["p/live"]
    old_publish = killed_publish(storage, "p/live", age=PUBLISH_GRACE * 2)
    build(bel, storage, "p/young")
    young_publish = killed_publish(storage, "p/young", age=timedelta(0))
    uncommitted = build(bel, storage, "p/uncommitted")["p/uncommitted"]
    uncommitted_publish = killed_publish(storage, "p/uncommitted", age=PUBLISH_GRACE * 2)
    folder(storage.path("p/uncommitted"))  # data whose BEL commit never happened

    report = sweep(storage, bel, keep_failed=WEEK)
    assert sorted((r.ref, r.instance_id) for r in report.restored) == [
        ("p/live", live),
        ("p/uncommitted", uncommitted),
    ]
    assert storage.instance_on_disk("p/live") == live
    assert storage.instance_on_disk("p/uncommitted") == uncommitted
    assert not old_publish.exists() and not uncommitted_publish.exists()
    assert young_publish.exists()  # a publish may still be running: left for a later sweep


def test_sweep_waits_for_a_rebuild_and_drops_an_instance_it_superseded(
    tmp_path: Path, bel: BuildEventLog
) -> None:
    storage = Storage(tmp_path / "lake")
    first = build(bel, storage, "pair/1")
    publish = killed_publish(storage, "twin/1", age=PUBLISH_GRACE * 2)
    bel.taint("pair/1")
    rebuild = claim(bel, "pair/1", source="api")  # rebuilds both outputs: twin/1 is being published
    folder(storage.path("twin/1"))

    held = sweep(storage, bel, keep_failed=WEEK)
    assert (held.restored, held.removed, held.kept) == ([], [], 1)
    assert publish.exists()  # still twin/1's live instance: kept until the rebuild settles it

    bel.start_job_run(rebuild.job_run_id, 1, "w")
    writes = [InstanceRef(ref=out, instance_id=str(uuid.uuid4())) for out in rebuild.outputs]
    bel.succeed_job_run(rebuild.job_run_id, [], writes)
    assert bel.instance(first["twin/1"]).status is not InstanceStatus.live
    settled = sweep(storage, bel, keep_failed=WEEK)
    assert settled.restored == [] and [r.path for r in settled.removed] == [str(publish)]
    assert not publish.exists()


def test_a_build_killed_before_its_commit_leaves_the_live_instance_to_put_back(
    tmp_path: Path, bel: BuildEventLog
) -> None:
    """The rebuild of pair/2 and twin/2 published, then its worker died before the BEL commit: twin/2
    holds data no BEL event describes, and its live instance is in the publish's trash."""
    storage = Storage(tmp_path / "lake")
    first = build(bel, storage, "pair/2")
    bel.taint("pair/2")
    rebuild = claim(bel, "pair/2", source="api")
    bel.start_job_run(rebuild.job_run_id, 1, "w")
    area = storage.staging_area(rebuild.job_run_id, 1)
    for out in rebuild.outputs:
        folder(storage.staged(area, out))
    replaced = storage.publish(area, {out: str(uuid.uuid4()) for out in rebuild.outputs})
    bel.fail_job_run(rebuild.job_run_id, "worker lost")  # its lease ran out; the lock is released
    aged(replaced, PUBLISH_GRACE * 2)

    report = sweep(storage, bel, keep_failed=WEEK)
    assert [(r.ref, r.instance_id) for r in report.restored] == [("twin/2", first["twin/2"])]
    assert storage.instance_on_disk("twin/2") == bel.partition("twin/2").instance_id == first["twin/2"]
    assert not replaced.exists()  # pair/2's old instance was tainted: nobody reads it


async def test_workers_sweep_the_storage_periodically(make_stack) -> None:
    """A worker killed mid-job leaves its attempt's staging folder; a running worker removes it once
    the BEL says its job run has ended."""
    stack = await make_stack(graph="tests.graphs:flaky", job_attempts=1, sweep_every="1s")
    n = uuid.uuid4().hex[:6]
    want = await asyncio.wait_for(stack.db.wait(await stack.db.want(f"fails/{n}")), timeout=120)
    assert want.state is WantState.failed
    (run,) = stack.bel.job_runs(limit=10)
    leftover = folder(stack.settings.storage_root / "_databuild" / "staging" / f"{run.job_run_id}-7")
    await until(lambda: not leftover.exists(), seconds=30)


def sweeps_at_once(storage: Storage, bel: BuildEventLog, count: int) -> list[SweepReport]:
    start = threading.Barrier(count)
    reports: list[SweepReport] = []
    errors: list[Exception] = []

    def sweep_when_all_are_ready() -> None:
        start.wait()
        try:
            reports.append(sweep(storage, bel, keep_failed=WEEK))
        except Exception as error:  # reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=sweep_when_all_are_ready) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    return reports


def test_overlapping_sweeps_restore_each_live_instance_and_lose_none(
    tmp_path: Path, bel: BuildEventLog
) -> None:
    """Every worker sweeps at start, so sweeps overlap: only one of them may restore a live instance,
    and none may remove it from under another."""
    storage = Storage(tmp_path / "lake")
    for round_ in range(15):
        refs = [f"p/r{round_}-{i}" for i in range(4)]
        live = {ref: build(bel, storage, ref)[ref] for ref in refs}
        for ref in refs:
            killed_publish(storage, ref, age=PUBLISH_GRACE * 2)
            folder(storage.path(ref))  # data whose BEL commit never happened
        reports = sweeps_at_once(storage, bel, 3)
        assert {ref: storage.instance_on_disk(ref) for ref in refs} == live
        assert sorted(r.ref for report in reports for r in report.restored) == refs  # each once
    sweep(storage, bel, keep_failed=WEEK)  # what a sweep kept while another worked on it
    assert list((storage.root / "_databuild" / "trash").iterdir()) == []
