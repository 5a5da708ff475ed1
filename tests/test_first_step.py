"""A want workflow's first step, as its local activity runs it (no Temporal server: the verdicts here
start nothing): the want recorded and decided in one BEL transaction, for the opening its run serves."""

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from activities.wants import WantActivities
from databuild.bel import BuildEventLog
from databuild.config import Settings
from databuild.errors import WantReplacedError
from databuild.graph import Graph
from databuild.models import WantSpec, WantState
from databuild.temporal import protocol as p

pytestmark = pytest.mark.unit

graph = Graph("first-steps")
graph.external("ext/{n}")


@pytest.fixture
def activities(tmp_path: Path) -> Iterator[WantActivities]:
    settings = Settings(home=tmp_path, graph="tests.test_first_step:graph", catalog="none")
    bel = BuildEventLog.create(settings.database_url.get_secret_value())
    yield WantActivities(bel, graph, None, settings)  # type: ignore[arg-type]  # no Temporal needed here
    bel.dispose()


def want(ref: str, *, fresh: bool = False) -> WantSpec:
    return WantSpec(ref=ref, data_timestamp=datetime(2024, 1, 1, tzinfo=UTC), source="cli", fresh=fresh)  # type: ignore[arg-type]


@pytest.mark.parametrize("fresh", [False, True], ids=["usual", "fresh"])
async def test_a_first_step_decides_for_the_opening_its_run_serves(
    activities: WantActivities, fresh: bool
) -> None:
    """A retry reopens a want (its opening 1): the new run's first step decides, where the run of the
    opening before it is told it was replaced, whether the want is fresh (recorded, then decided) or not
    (both in one transaction)."""
    bel, spec = activities.bel, want(f"ext/{int(fresh)}", fresh=fresh)
    first = await activities.first_step(p.WantInput(spec=spec))
    assert first.seq == 1 and first.decision.kind == "wait_external"
    bel.wants.finish(spec.want_id, WantState.failed, "upstream never came", opening=0)
    [reopened] = bel.wants.reopen([spec.want_id])
    assert reopened.opening == 1
    step = await activities.first_step(p.WantInput(spec=spec, opening=1))
    assert step.seq > first.seq and step.decision.kind == "wait_external"
    with pytest.raises(WantReplacedError):
        await activities.first_step(p.WantInput(spec=spec, opening=0))
    assert [e.type for e in bel.events.query(want_id=spec.want_id)].count("WantCreated") == 1
