"""Fresh wants on the real stack (Temporal dev server, Spark local): a new version of one job makes
exactly its partitions and their readers stale; ``--fresh`` rebuilds exactly those (new instances, the
others keep theirs), as its plan said, and two fresh wants at once build each partition once; an
unchanged version rebuilds nothing; ``backfill --stale-only`` wants exactly the stale partitions of a
range. The worker judges staleness with its own graph's versions: here a second worker, deployed with the
new version of ``base`` over the same BEL and storage."""

import asyncio

from databuild.backfill import BackfillRequest
from databuild.domain.plans import Action
from databuild.models import JobRun, JobRunState, WantSource, WantState

CHAIN = "tests.graphs:chain"  # derived/{n} reads base/{n} (found at run time)
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]
ONE, TWO, THREE = DAYS


async def wait_all(stack, specs) -> None:
    for spec in specs:
        done = await asyncio.wait_for(stack.db.wait(spec), timeout=300)
        assert done.state is WantState.successful, done.reason


def live(stack) -> dict[str, str | None]:
    return {p.ref: p.instance_id for p in stack.bel.partitions.query(limit=100)}


def runs_since(stack, seen: set[str]) -> list[JobRun]:
    """The job runs recorded since ``seen`` that built (not those skipped: a historical delegation)."""
    found = stack.bel.job_runs.query(limit=200)
    return [r for r in found if r.job_run_id not in seen and r.state is not JobRunState.skipped]


async def test_fresh_rebuilds_exactly_what_a_new_version_made_stale(make_stack) -> None:
    v1 = await make_stack(graph=CHAIN)
    await wait_all(
        v1, [await v1.db.want(ref) for ref in (f"derived/{ONE}", f"derived/{TWO}", f"base/{THREE}")]
    )
    built, seen = live(v1), {r.job_run_id for r in v1.bel.job_runs.query(limit=200)}

    # The graph that built it: a fresh want finds nothing stale and rebuilds nothing.
    unchanged = await v1.db.want(f"derived/{ONE}", fresh=True)
    await wait_all(v1, [unchanged])
    assert live(v1) == built and runs_since(v1, seen) == []
    assert v1.bel.wants.get(unchanged.want_id).fresh

    # A deploy with a new version of base, over the same BEL and storage.
    v2 = await make_stack(
        graph="tests.graphs:chain_v2",
        database_url=v1.settings.database_url.get_secret_value(),
        storage_root=v1.settings.storage_root,
    )
    assert sorted(p.ref for p in await v2.db.stale()) == [
        f"base/{ONE}",
        f"base/{TWO}",
        f"base/{THREE}",
        f"derived/{ONE}",
        f"derived/{TWO}",
    ]
    usual = await v2.db.plan(f"derived/{ONE}")
    assert [(p.action, bool(p.stale)) for p in usual.partitions] == [(Action.live, True)]
    planned = await v2.db.plan(f"derived/{ONE}", fresh=True)
    assert [(p.ref, p.action) for p in planned.partitions] == [
        (f"base/{ONE}", Action.build),
        (f"derived/{ONE}", Action.build),
    ]

    # Two fresh wants at once for derived/ONE (two sources: two wants): each partition is built once.
    pair = [
        await v2.db.want(f"derived/{ONE}", fresh=True, source=s) for s in (WantSource.cli, WantSource.api)
    ]
    assert len({w.want_id for w in pair}) == 2
    await wait_all(v2, pair)
    ran = runs_since(v2, seen)
    assert sorted((r.job_label, tuple(r.outputs)) for r in ran) == sorted(
        (r.job_label, tuple(r.outputs)) for r in planned.runs
    )
    now = live(v2)
    rebuilt = {ref for ref in now if now[ref] != built.get(ref)}
    assert rebuilt == {f"base/{ONE}", f"derived/{ONE}"}
    assert v2.bel.partitions.instance(now[f"base/{ONE}"] or "").job_version == "2"
    seen |= {r.job_run_id for r in ran}

    # A stale-only backfill of derived: derived/TWO is stale (and base/TWO with it); derived/THREE was never
    # built, so it is not stale, and not wanted; base/THREE is left stale.
    request = BackfillRequest(pattern="derived/{n}", start=ONE, end=THREE, stale_only=True)
    assert [p.ref for p in (await v2.db.plan_backfill(request)).partitions if p.action is Action.build] == [
        f"base/{TWO}",
        f"derived/{TWO}",
    ]
    progress = await v2.db.backfill(request)
    assert progress.partitions == 1
    for _ in range(600):
        progress = await v2.db.backfill_progress(progress.backfill_id)
        if progress.finished:
            break
        await asyncio.sleep(0.5)
    assert progress.finished and progress.by_state == {WantState.successful: 1}, progress
    assert sorted(r.outputs[0] for r in runs_since(v2, seen)) == [f"base/{TWO}", f"derived/{TWO}"]
    assert [p.ref for p in await v2.db.stale()] == [f"base/{THREE}"]
    # Asked again with nothing stale in the range: nothing is registered.
    again = await v2.db.backfill(request)
    assert again.partitions == 0 and again.registered == 0
