"""Staleness on the real stack: the worker records the version of the job it ran on every instance, and
a new version of one job makes exactly its partitions and their readers stale (and the same graph,
nothing)."""

import asyncio

from databuild.client import DataBuild
from databuild.domain.staleness import StaleKind
from databuild.graph import load_graph
from databuild.models import WantState

CHAIN = "tests.graphs:chain"


async def test_a_new_job_version_makes_exactly_its_partitions_and_their_readers_stale(make_stack) -> None:
    stack = await make_stack(graph=CHAIN)
    wants = [await stack.db.want(ref) for ref in ("derived/1", "derived/2", "base/3")]
    for want in wants:
        done = await asyncio.wait_for(stack.db.wait(want), timeout=300)
        assert done.state is WantState.successful, done.reason

    versions = {job.label: job.version for job in stack.graph.jobs}
    recorded = {p.ref: p.instance_id for p in stack.bel.partitions.query(limit=100)}
    built = {
        i.ref: i.job_version
        for i in stack.bel.partitions.instances_by_id([i for i in recorded.values() if i])
    }
    assert built == {
        "base/1": versions["base"],
        "base/2": versions["base"],
        "base/3": versions["base"],
        "derived/1": versions["derived"],
        "derived/2": versions["derived"],
    }
    assert await stack.db.stale() == []  # the graph that built it: nothing is stale

    deployed = DataBuild(None, stack.bel, load_graph("tests.graphs:chain_v2"), stack.settings)
    stale = await deployed.stale()
    assert [(p.ref, [r.kind for r in p.reasons]) for p in stale] == [
        ("base/1", [StaleKind.code_changed]),
        ("base/2", [StaleKind.code_changed]),
        ("base/3", [StaleKind.code_changed]),
        ("derived/1", [StaleKind.input_stale]),
        ("derived/2", [StaleKind.input_stale]),
    ]
    assert stale[0].reasons[0].current_version == "2"
    explained = await deployed.why("derived/1")
    assert explained.stale and explained.chain[-1].text.endswith(
        f"from {versions['base']} (which built it) to 2"
    )
