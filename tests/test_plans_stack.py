"""A plan against the build that follows it, on the real stack: the same partitions and the same job runs,
and not a thing recorded by the plan itself; then a plan on top of what was built, timed by it."""

import asyncio
from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient

from databuild.bel import BuildEventLog
from databuild.domain.estimates import Confidence
from databuild.domain.plans import Action, Plan
from databuild.models import JobRunState, WantState
from databuild.testing import projection_rows
from databuild.web.app import create_app
from databuild.web.context import web_context

DECLARED = "examples.demo:graph"
DAY = "daily_users/2024-01-07"


def everything(bel: BuildEventLog) -> tuple[int, dict[str, list[tuple[str, ...]]]]:
    """The log's last index and every row of every projection."""
    return bel.events.last_idx(), projection_rows(bel)


async def test_a_plan_is_what_the_build_then_does_and_records_nothing(make_stack) -> None:
    stack = await make_stack(graph=DECLARED)
    before = await asyncio.to_thread(everything, stack.bel)
    planned = await stack.db.plan(DAY)
    assert await asyncio.to_thread(everything, stack.bel) == before

    want = await asyncio.wait_for(stack.db.wait(await stack.db.want(DAY)), timeout=300)
    assert want.state is WantState.successful, want.reason
    runs = stack.bel.job_runs.query(limit=100)
    assert all(r.state is JobRunState.succeeded for r in runs)  # declared inputs: no dep-miss attempt
    built = sorted((r.job_label, tuple(r.outputs)) for r in runs)
    assert built == sorted((r.job_label, tuple(r.outputs)) for r in planned.runs)
    assert sorted(p.ref for p in planned.partitions if p.action is Action.build) == sorted(
        ref for r in runs for ref in r.outputs
    )

    # On top of that day: it is used as it is (its own input no concern), the other six days and the rollup are
    # to build, timed now by the runs just recorded (one each: low confidence; the rollup never ran).
    due = datetime(2024, 1, 7, tzinfo=UTC) + timedelta(days=30_000)
    built_state = await asyncio.to_thread(everything, stack.bel)
    app = create_app(web_context(stack.settings, stack.bel, client=stack.db))
    with TestClient(app, base_url="http://127.0.0.1:8000", client=("127.0.0.1", 1)) as api:
        answer = api.post("/api/wants/plan", json={"ref": "daily_summary/2024-01-07", "sla": "30000d"})
        assert answer.status_code == 200, answer.text
        refused = api.post("/api/wants/plan", json={"ref": "nowhere/x"})
        assert refused.status_code == 400 and "no job in graph" in refused.text, refused.text
        # Plans at once are bounded: with both places held, the next is refused, and heard again after.
        ctx = app.state.context
        async with ctx.planning(), ctx.planning():
            busy = api.post(
                "/api/backfills/plan",
                json={"pattern": "raw_events/{date}", "start": "2024-01-01", "end": "2024-01-02"},
            )
            assert busy.status_code == 429 and "computing 2 plans already" in busy.text, busy.text
        again = api.post(
            "/api/backfills/plan",
            json={"pattern": "raw_events/{date}", "start": "2024-01-01", "end": "2024-01-02"},
        )
        assert again.status_code == 200, again.text
    rollup = Plan.model_validate(answer.json())
    actions = {p.ref: p.action for p in rollup.partitions}
    assert (
        actions[DAY] is Action.live and "raw_events/2024-01-07" not in actions
    )  # a live input's not followed
    assert rollup.count(Action.build) == 13 and len(rollup.runs) == 13
    assert rollup.untimed == ["weekly_rollup"] and rollup.confidence is Confidence.none
    assert rollup.eta_p90 is not None and rollup.eta_p90 < due and rollup.sla_misses == []
    assert rollup.work_p50 > timedelta(0)
    assert await asyncio.to_thread(everything, stack.bel) == built_state
