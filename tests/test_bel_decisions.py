"""The decision step of the BEL (``bel.aggregates.decisions``) on SQLite: the state ``decisions.decide`` reads,
loaded under the locks of the want and its job's outputs."""

from datetime import UTC, datetime

import pytest
from sqlalchemy import event

from databuild.backfill import BackfillRequest
from databuild.bel import BuildEventLog
from databuild.bel.aggregates.decisions import DEFAULT_LEASE, Step
from databuild.models import InstanceRef, WantSource, WantSpec
from tests.bel_sqlite import decide, graph, spec

pytestmark = pytest.mark.unit


def test_execute_then_delegate_then_live(bel: BuildEventLog) -> None:
    first = decide(bel, spec("a/1"))
    assert first.kind == "execute" and first.outputs == ["a/1", "b/1"]
    assert not bel.pools.lease_expired(first.job_run_id)  # a queued run gets its build lease
    second = decide(bel, spec("b/1"))
    assert second.kind == "delegate" and second.job_run_id == first.job_run_id
    bel.job_runs.start(first.job_run_id, 1, "w")
    bel.job_runs.succeed(first.job_run_id, [], [InstanceRef(ref=o, instance_id=o) for o in first.outputs])
    third = decide(bel, spec("a/1", WantSource.api))
    assert third.kind == "live" and third.instance_id == "a/1"


def test_a_failed_output_blocks_and_an_external_ref_waits(bel: BuildEventLog) -> None:
    failed = decide(bel, spec("up/1"))
    bel.job_runs.fail(failed.job_run_id, "boom")
    blocked = decide(bel, spec("up/1", WantSource.api))
    assert blocked.kind == "blocked" and blocked.blocked_refs == ["up/1"]
    assert decide(bel, spec("ext/1")).kind == "wait_external"


def paused_backfill_want(bel: BuildEventLog) -> tuple[str, WantSpec]:
    """A backfill of up/1 alone, paused: its id and its want."""
    at = datetime(2024, 1, 1, tzinfo=UTC)
    request = BackfillRequest(pattern="up/{n}", start=at, end=at)
    want = WantSpec(ref="up/1", data_timestamp=at, source=WantSource.backfill)
    bel.backfills.record(request, 1, [want])
    bel.backfills.pause(request.backfill_id, True)
    return request.backfill_id, want


def test_a_want_of_a_paused_backfill_is_paused(bel: BuildEventLog) -> None:
    backfill_id, want = paused_backfill_want(bel)
    assert bel.decisions.decide(want.want_id, 1, graph.resolve("up/1")).kind == "paused"
    bel.backfills.pause(backfill_id, False)
    assert bel.decisions.decide(want.want_id, 2, graph.resolve("up/1")).kind == "execute"


def test_in_a_group_a_paused_backfill_holds_only_its_own_wants(bel: BuildEventLog) -> None:
    """While a backfill is paused the steps of a group read alone (``DecisionCommands._decide_group``)."""
    _, held = paused_backfill_want(bel)
    free = spec("up/2")
    bel.wants.register(free)
    steps = [Step(w.want_id, 1, graph.resolve(w.ref), DEFAULT_LEASE, None) for w in (held, free, held)]
    assert [v.kind for _, v in bel.decisions._decide_group(steps)] == ["paused", "execute", "paused"]


def test_a_decision_is_one_transaction_of_few_statements(bel: BuildEventLog) -> None:
    """What one decision sends the database (``bench_bel`` prints it for both backends): the state read
    in few statements, and the projections' upserts each one statement, not a read and a write."""
    sent: list[str] = []

    def count(conn: object, cursor: object, statement: str, *_: object) -> None:
        sent.append(statement.split()[0].upper())

    begun: list[object] = []  # SQLite's BEGIN is the dialect's own step, sent past the cursor events
    want = spec("a/7")
    bel.wants.register(want)
    for engine in {bel.writer, bel.reader}:
        event.listen(engine, "before_cursor_execute", count)
        event.listen(engine, "begin", begun.append)
    assert (
        bel.decisions.decide(want.want_id, 1, graph.resolve(want.ref)).kind == "execute"
    )  # a run of two outputs
    assert len(begun) == 1
    assert len(sent) <= 10, sent
