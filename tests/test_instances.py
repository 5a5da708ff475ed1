"""Immutable instances on the real stack (Temporal, Spark, the BEL): a rebuild writes a new instance
beside the old one; a reader keeps the instance it resolved; garbage collection racing builds never
deletes a live instance or one being written or read."""

import asyncio
import threading
import uuid
from datetime import timedelta

import pytest

from databuild.errors import JobContractError
from databuild.jobs.context import SparkJobContext
from databuild.jobs.storage import Storage
from databuild.models import InstanceStatus, WantState
from databuild.operations.garbage import GcReport, collect_garbage
from tests import graphs
from tests.conftest import Stack
from tests.helpers import instance_dir, until

pytestmark = pytest.mark.slow


async def built(stack: Stack, ref: str) -> str:
    want = await asyncio.wait_for(stack.db.wait(await stack.db.want(ref)), timeout=120)
    assert want.state is WantState.successful, want.reason
    instance_id = stack.bel.partitions.get(ref).instance_id
    assert instance_id is not None
    return instance_id


def rows(stack: Stack, ref: str, instance_id: str) -> int:
    return int(
        stack.parts.spark.session().read.parquet(str(instance_dir(stack.settings, ref, instance_id))).count()
    )


async def test_a_reader_keeps_the_instance_it_resolved_while_its_job_rebuilds(make_stack) -> None:
    stack = await make_stack(graph="tests.graphs:lake")
    n = uuid.uuid4().hex[:6]
    first = await built(stack, f"left/{n}")
    assert rows(stack, f"left/{n}", first) == 10

    reader = await stack.db.want(f"held/{n}")
    await until(lambda: n in graphs.READING and graphs.READING[n].is_set())
    # A sibling output is tainted and wanted again: its job rebuilds both outputs, as new instances.
    await stack.db.taint(f"right/{n}", reason="late events")
    second = await built(stack, f"right/{n}")
    rebuilt = stack.bel.partitions.get(f"left/{n}").instance_id
    assert rebuilt is not None and rebuilt != first
    assert rows(stack, f"left/{n}", rebuilt) == 20
    # Both instances exist side by side; the old one is readable by UUID, and gc keeps it while a job
    # run that started when it was live is still open.
    assert instance_dir(stack.settings, f"right/{n}", second).is_dir()
    storage = Storage(stack.settings.storage_root)
    racing = collect_garbage(storage, stack.bel, keep=timedelta(0))
    assert first not in {c.instance_id for c in racing.deleted}
    assert rows(stack, f"left/{n}", first) == 10

    graphs.RELEASE.setdefault(n, threading.Event()).set()
    done = await asyncio.wait_for(stack.db.wait(reader), timeout=120)
    assert done.state is WantState.successful, done.reason
    held = stack.bel.partitions.get(f"held/{n}").instance_id
    assert held is not None and rows(stack, f"held/{n}", held) == 10  # what it resolved, to the end
    run = stack.bel.job_runs.get(stack.bel.partitions.get(f"held/{n}").built_by or "")
    assert [(r.ref, r.instance_id) for r in run.reads] == [(f"left/{n}", first)]
    assert stack.bel.partitions.instance(first).status is InstanceStatus.superseded

    # Nobody can read it any more: past the retention (here none), gc deletes it, and only it.
    after = collect_garbage(storage, stack.bel, keep=timedelta(0))
    assert {c.instance_id for c in after.deleted} >= {first}
    for ref in (f"left/{n}", f"right/{n}", f"held/{n}"):
        live = stack.bel.partitions.get(ref).instance_id
        assert instance_dir(stack.settings, ref, live).is_dir()
        assert live not in {c.instance_id for c in after.deleted}


async def test_gc_racing_builds_never_deletes_a_live_or_unfinished_instance(make_stack) -> None:
    stack = await make_stack(graph="tests.graphs:chain")
    storage = Storage(stack.settings.storage_root)
    stop = threading.Event()
    reports: list[GcReport] = []

    def collect_all_the_time() -> None:
        while not stop.is_set():
            reports.append(collect_garbage(storage, stack.bel, keep=timedelta(0)))

    collector = threading.Thread(target=collect_all_the_time)
    collector.start()
    try:
        names = [uuid.uuid4().hex[:6] for _ in range(4)]
        specs = [await stack.db.want(f"derived/{n}") for n in names]
        done = await asyncio.wait_for(asyncio.gather(*(stack.db.wait(s) for s in specs)), timeout=300)
        # A rebuild while the collector runs: the superseded instance may go, the new one never.
        await stack.db.taint(f"base/{names[0]}")
        rebuilt = await stack.db.wait(await stack.db.want(f"base/{names[0]}"))
    finally:
        stop.set()
        collector.join()
    assert all(w.state is WantState.successful for w in (*done, rebuilt)), [w.reason for w in done]
    assert len(reports) > 3  # it really ran alongside
    live = {
        p.instance_id
        for n in names
        for p in (stack.bel.partitions.get(f"base/{n}"), stack.bel.partitions.get(f"derived/{n}"))
    }
    deleted = {c.instance_id for r in reports for c in r.deleted}
    assert not live & deleted
    for n in names:
        for ref in (f"base/{n}", f"derived/{n}"):
            assert rows(stack, ref, stack.bel.partitions.get(ref).instance_id or "") == 3


async def test_a_job_reads_a_past_instance_by_uuid_until_gc_removes_it(make_stack) -> None:
    stack = await make_stack(graph="tests.graphs:lake", worker=True)
    n = uuid.uuid4().hex[:6]
    first = await built(stack, f"left/{n}")
    await stack.db.taint(f"left/{n}")
    await built(stack, f"left/{n}")

    def context() -> SparkJobContext:
        return SparkJobContext(
            spark=stack.parts.spark.session(),
            bel=stack.bel,
            graph=stack.graph,
            storage=Storage(stack.settings.storage_root),
            job_run_id="jr-reader",
            job_label="reader",
            instances={f"held/{n}": str(uuid.uuid4())},
            params={"n": n},
            cancelled=threading.Event(),
        )

    ctx = context()
    assert ctx.read_instance(first).count() == 10  # the tainted instance, exactly as it was
    assert [(r.ref, r.instance_id) for r in ctx.reads] == [(f"left/{n}", first)]  # recorded for lineage
    with pytest.raises(JobContractError, match="no partition instance"):
        context().read_instance(str(uuid.uuid4()))
    collect_garbage(Storage(stack.settings.storage_root), stack.bel, keep=timedelta(0))
    with pytest.raises(JobContractError, match="garbage collection removed"):
        context().read_instance(first)
