"""Two workers on one task queue with different versions of a job (a deploy half done): `databuild envs`
says which worker runs which version, and a fresh rebuild they disagree on is refused, since each would
find the other's build stale for ever (five `--fresh`, five rebuilds, before)."""

import json
from datetime import UTC, datetime

import pytest

from databuild.backfill import BackfillRequest
from databuild.client import DataBuild
from databuild.errors import ConfigurationError
from databuild.graph import load_graph
from databuild.models import WantState
from databuild.temporal.connection import connect
from tests.conftest import Stack, cli
from tests.helpers import until
from worker.run import WorkerParts, running_worker

pytestmark = pytest.mark.slow


async def workers_serving(stack: Stack, n: int) -> bool:
    return len((await stack.db.envs())[0].workers) == n


async def test_workers_that_disagree_on_a_version_are_shown_and_refuse_a_fresh_rebuild(make_stack) -> None:
    stack: Stack = await make_stack(graph="tests.graphs:chain")
    await until(lambda: workers_serving(stack, 1), "the first worker polls", seconds=30)
    (env,) = await stack.db.envs()
    assert env.name == "prod" and env.differing == {}
    (first,) = env.workers
    assert first.versions["base"] == stack.graph.job_by_label("base").version

    # Built by the first worker alone: at its version of base.
    day = await stack.db.wait(await stack.db.want("base/2024-01-01"))
    assert day.state is WantState.successful

    # A second worker, deployed with base at version 2.
    v2 = load_graph("tests.graphs:chain_v2")
    # A client of its own: the SDK admits one worker per task queue and client in a process.
    other = WorkerParts(stack.settings, await connect(stack.settings), stack.bel, v2, stack.parts.spark)
    async with running_worker(other, warm_spark=False):
        await until(lambda: workers_serving(stack, 2), "the second worker polls", seconds=30)
        (env,) = await stack.db.envs()
        second = next(w for w in env.workers if w.identity != first.identity)
        assert env.differing == {"base": {first.versions["base"]: [first.identity], "2": [second.identity]}}
        with pytest.raises(ConfigurationError, match=r"fresh rebuild of base/v cannot converge.*'base'"):
            await stack.db.want("base/v", fresh=True)
        assert stack.bel.partitions.find("base/v") is None  # refused before anything was recorded
        # A want that is not fresh is taken: any live instance will do, whichever version built it.
        built = await stack.db.wait(await stack.db.want("base/v"))
        assert built.state is WantState.successful

        shown = await cli(stack, "envs")
        assert shown.returncode == 0, shown.stderr
        assert "versions differ for base" in shown.stdout and second.identity in shown.stdout
        listed = json.loads((await cli(stack, "envs", "--json")).stdout)
        assert listed[0]["differing"]["base"]["2"] == [second.identity]
        refused = await cli(stack, "want", "base/w", "--fresh")
        assert refused.returncode == 2 and "cannot converge" in refused.stderr, refused.stderr
        # A stale-only backfill from a client of the new version (the first worker's build is stale to
        # it) is refused too, before it records a want.
        deployer = DataBuild(stack.client, stack.bel, v2, stack.settings)
        at = datetime(2024, 1, 1, tzinfo=UTC)
        stale = BackfillRequest(pattern="base/{n}", start=at, end=at, stale_only=True)
        with pytest.raises(ConfigurationError, match="cannot converge"):
            await deployer.backfill(stale)
        assert stack.bel.wants.query(ref_prefix="base/2024-01-01", limit=10) == [day]
