"""Declared inputs on the real stack: a want starts derivative wants for the inputs its job declares
before the first run (no dep-miss round trip), and runtime discovery still finds what was not declared."""

import asyncio
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from databuild.models import JobRunState, WantState
from databuild.views.lineage import want_view
from tests.conftest import Stack, cli

pytestmark = pytest.mark.slow


async def fulfilled(stack: Stack, ref: str) -> str:
    # A data time of its own: want ids (and workflow ids) are shared by the session's Temporal server,
    # and other modules want the demo's refs too.
    spec = await stack.db.want(
        ref,
        data_timestamp=datetime(2024, 1, 7, tzinfo=UTC) + timedelta(microseconds=uuid.uuid4().int % 10**6),
    )
    want = await asyncio.wait_for(stack.db.wait(spec), timeout=120)
    assert want.state is WantState.successful, want.reason
    return spec.want_id


def runs(stack: Stack) -> Counter[tuple[str, JobRunState]]:
    return Counter((r.job_label, r.state) for r in stack.bel.job_runs.query(limit=100))


async def test_declared_inputs_are_built_first_without_a_dep_miss(make_stack) -> None:
    stack = await make_stack(graph="tests.graphs:declared")
    n = uuid.uuid4().hex[:6]
    want_id = await fulfilled(stack, f"top/{n}")
    assert runs(stack) == {
        ("declared_base", JobRunState.succeeded): 1,
        ("declared_top", JobRunState.succeeded): 1,
    }
    # The fulfillment tree: the derivative want for base, started by the declaration, not a dep-miss.
    tree = want_view(stack.bel, want_id)
    (edge,) = tree.data.nodes[want_id].derivatives
    assert edge.triggered_by is None and tree.index.wants[edge.want_id].ref == f"base/{n}"
    shown = await cli(stack, "wants", "show", want_id)
    assert "a declared input of its parent's job" in shown.stdout and "dep-miss" not in shown.stdout


async def test_inputs_it_did_not_declare_are_still_discovered(make_stack) -> None:
    stack = await make_stack(graph="tests.graphs:declared")
    n = uuid.uuid4().hex[:6]
    await fulfilled(stack, f"stage/{n}")
    # base (declared) was built before the first run; extra (not declared) by a dep-miss of it.
    assert runs(stack) == {
        ("declared_base", JobRunState.succeeded): 1,
        ("declared_extra", JobRunState.succeeded): 1,
        ("declared_stage", JobRunState.dep_miss): 1,
        ("declared_stage", JobRunState.succeeded): 1,
    }
    miss = next(r for r in stack.bel.job_runs.query(limit=100) if r.state is JobRunState.dep_miss)
    assert miss.missing == [f"extra/{n}"]


async def test_a_declaration_that_fails_fails_the_want_with_the_reason(make_stack) -> None:
    stack = await make_stack(graph="tests.graphs:declared_broken")
    want = await asyncio.wait_for(stack.db.wait(await stack.db.want("bad/1")), timeout=60)
    assert want.state is WantState.failed
    assert "the inputs job 'bad' declares" in (want.reason or "") and "not a ref" in (want.reason or "")
    assert stack.bel.job_runs.query() == []


async def test_the_demo_declares_its_inputs_and_builds_without_dep_miss_runs(make_stack) -> None:
    stack = await make_stack(graph="examples.demo:graph")
    want_id = await fulfilled(stack, "daily_summary/2024-01-07")
    assert runs(stack) == {
        ("raw_events", JobRunState.succeeded): 7,
        ("daily_users", JobRunState.succeeded): 7,
        ("weekly_rollup", JobRunState.succeeded): 1,
    }
    tree = want_view(stack.bel, want_id)
    assert len(tree.data.nodes) == 15  # the root want and its 14 derivative wants, as when discovered
    assert all(e.triggered_by is None for node in tree.data.nodes.values() for e in node.derivatives)
