"""The backfills aggregate of the BEL (``bel.aggregates.backfills``) on SQLite: registration, pause, cancel,
retry, and progress."""

from datetime import UTC, datetime

import pytest

from databuild.backfill import BackfillRequest, WindowStep
from databuild.bel import BuildEventLog
from databuild.domain.wants import WantStart
from databuild.errors import NotFoundError
from databuild.models import JobRunCause, WantSource, WantSpec, WantState, job_run_workflow_id
from tests.bel_sqlite import graph

pytestmark = pytest.mark.unit

REQUEST = BackfillRequest(
    pattern="up/{n}", start=datetime(2024, 1, 1, tzinfo=UTC), end=datetime(2024, 1, 2, tzinfo=UTC)
)
SPECS = [
    WantSpec(ref=f"up/{n}", data_timestamp=datetime(2024, 1, n, tzinfo=UTC), source=WantSource.backfill)
    for n in (1, 2)
]


def starts(step: WindowStep) -> list[WantStart]:
    """The runs the step starts: each want's, for its opening."""
    return [WantStart.of(want) for want in step.to_start]


def test_registering_is_idempotent_and_counts_its_wants(bel: BuildEventLog) -> None:
    bel.backfills.record(REQUEST, 2, SPECS[:1])
    bel.backfills.record(REQUEST, 2, SPECS)
    assert [e.type for e in bel.events.query(types=["BackfillRegistered", "BackfillWantsAdded"])] == [
        "BackfillRegistered",
        "BackfillWantsAdded",
        "BackfillWantsAdded",
    ]
    progress = bel.backfills.progress(REQUEST.backfill_id)
    assert (progress.partitions, progress.registered) == (2, 2)
    assert progress.by_state == {WantState.new: 2} and not progress.finished and progress.started == 0
    assert [w.ref for w in bel.backfills.reach(REQUEST.backfill_id)] == ["up/1", "up/2"]


def test_the_window_starts_wants_in_order_as_room_frees_and_counts_from_its_low_place(
    bel: BuildEventLog,
) -> None:
    bel.backfills.record(REQUEST, 2, SPECS[:1])  # the second is not registered yet
    step = bel.backfills.advance(REQUEST.backfill_id, window=1)
    assert (starts(step), step.started, step.open, step.low) == ([WantStart(spec=SPECS[0])], 1, 1, 0)
    assert bel.backfills.unstarted(REQUEST.backfill_id) == set()
    assert not step.done and bel.backfills.progress(REQUEST.backfill_id).started == 1
    bel.backfills.record(REQUEST, 2, SPECS, 0)
    assert bel.backfills.unstarted(REQUEST.backfill_id) == {SPECS[1].want_id}
    # A pause tells only the wants a window started (the other has no workflow yet).
    assert [w.ref for w in bel.backfills.reach(REQUEST.backfill_id)] == ["up/1", "up/2"]
    assert [w.ref for w in bel.backfills.reach(REQUEST.backfill_id, started_only=True)] == ["up/1"]
    full = bel.backfills.advance(REQUEST.backfill_id, window=1, low=step.low)
    assert (full.to_start, full.started, full.open) == ([], 1, 1)
    # Held by the window, the second want is no repair's business; the first, started, is.
    later = datetime(2100, 1, 1, tzinfo=UTC)
    assert [w.ref for w in bel.wants.unstarted(later)] == ["up/1"]
    bel.wants.cancel([SPECS[0].want_id], "done with it")
    last = bel.backfills.advance(REQUEST.backfill_id, window=1, low=full.low)
    assert (starts(last), last.started, last.open, last.low) == ([WantStart(spec=SPECS[1])], 2, 1, 1)
    assert last.done and bel.wants.unstarted(later) == bel.wants.query(state=WantState.new)


def test_pause_and_cancel_are_recorded_once(bel: BuildEventLog) -> None:
    bel.backfills.record(REQUEST, 2, SPECS[:1])
    assert bel.backfills.pause(REQUEST.backfill_id, True) and not bel.backfills.pause(
        REQUEST.backfill_id, True
    )
    assert bel.backfills.any_paused() and bel.backfills.progress(REQUEST.backfill_id).paused
    assert bel.backfills.pause(REQUEST.backfill_id, False) and not bel.backfills.any_paused()
    assert bel.backfills.cancel(REQUEST.backfill_id) and not bel.backfills.cancel(REQUEST.backfill_id)
    with pytest.raises(NotFoundError):
        bel.backfills.cancel("nope")
    with pytest.raises(NotFoundError):
        bel.backfills.pause("nope", True)


def test_a_cancelled_backfill_cancels_what_it_registers_and_a_retry_reopens(bel: BuildEventLog) -> None:
    bel.backfills.record(REQUEST, 2, SPECS[:1])
    bel.backfills.cancel(REQUEST.backfill_id)
    cancelled, _ = bel.wants.cancel([SPECS[0].want_id], "its backfill was cancelled")
    assert len(cancelled) == 1
    bel.backfills.record(REQUEST, 2, SPECS)
    assert {w.state for w in bel.wants.query()} == {WantState.canceled}
    stopped = bel.backfills.advance(REQUEST.backfill_id, window=10)
    assert stopped.canceled and stopped.done and (stopped.to_start, stopped.started) == ([], 0)
    (progress,) = bel.backfills.finished_of(SPECS[1].want_id)
    assert progress.finished and progress.canceled
    retried = bel.backfills.retry(REQUEST.backfill_id)
    assert sorted(w.ref for w in retried) == ["up/1", "up/2"]
    assert len(bel.wants.reopen([w.want_id for w in retried])) == 2
    assert not bel.backfills.progress(REQUEST.backfill_id).canceled
    # Its window starts from the start of its range again, and starts the reopened wants in order, each
    # for its next opening (a run of the one the cancel ended is replaced).
    again = bel.backfills.advance(REQUEST.backfill_id, window=10)
    assert [w.ref for w in again.to_start] == ["up/1", "up/2"]
    assert (starts(again), again.started, again.done) == (
        [WantStart(spec=w, opening=1) for w in SPECS],
        2,
        True,
    )
    with pytest.raises(NotFoundError):
        bel.backfills.retry("nope")


def test_a_cancel_ends_the_wants_its_window_never_started_in_bulk(bel: BuildEventLog) -> None:
    bel.backfills.record(REQUEST, 2, SPECS)
    bel.backfills.advance(REQUEST.backfill_id, window=1)  # the first is started, the second is not
    assert bel.backfills.cancel_unstarted(REQUEST.backfill_id) == 0  # not cancelled: nothing ends
    bel.backfills.cancel(REQUEST.backfill_id)
    assert bel.backfills.cancel_unstarted(REQUEST.backfill_id) == 1
    assert {w.ref: w.state for w in bel.wants.query()} == {"up/1": WantState.new, "up/2": WantState.canceled}
    # The started one, with its workflow, is the reach's (cancel_wants), and is cancelled so.
    assert [w.ref for w in bel.backfills.reach(REQUEST.backfill_id)] == ["up/1"]
    assert bel.backfills.cancel_unstarted(REQUEST.backfill_id) == 0


def test_a_cancel_while_its_window_starts_wants_leaves_one_that_decided_to_the_reach(
    bel: BuildEventLog,
) -> None:
    # The window records a step once its wants are started: a cancel meanwhile finds them at places not
    # recorded started. The first's workflow decided (queued a run) before the cancel; ended in bulk, its
    # run would start after the cancel returned, and its workflow would go on following it.
    bel.backfills.record(REQUEST, 2, SPECS)
    step = bel.backfills.plan_window_step(REQUEST.backfill_id, window=2)
    assert starts(step) == [WantStart(spec=w) for w in SPECS]
    run = bel.decisions.decide(SPECS[0].want_id, 1, graph.resolve("up/1"))
    assert run.kind == "execute"
    bel.backfills.cancel(REQUEST.backfill_id)
    assert bel.backfills.cancel_unstarted(REQUEST.backfill_id) == 1  # up/2: it never decided
    assert [w.ref for w in bel.backfills.reach(REQUEST.backfill_id)] == ["up/1"]
    cancelled, ended = bel.wants.cancel([SPECS[0].want_id], "its backfill was cancelled")
    assert [w.ref for w in cancelled] == ["up/1"]
    assert ended == [job_run_workflow_id("up", run.job_run_id)]  # its run ends before it could start
    assert bel.job_runs.get(run.job_run_id).cause is JobRunCause.abandoned
    bel.backfills.record_window_step(step)
    assert {w.state for w in bel.wants.query()} == {WantState.canceled}


def test_a_step_planned_before_a_cancel_and_a_retry_is_not_recorded_after_them(bel: BuildEventLog) -> None:
    # The window plans a step and starts its wants; the backfill is cancelled (its unstarted wants end,
    # their new workflows find them ended and close) and retried (reopened, the window rewound to the
    # place the step read) before the step records. Recorded, the window would stand past open wants
    # that have no workflow, and never start them.
    bel.backfills.record(REQUEST, 2, SPECS)
    step = bel.backfills.plan_window_step(REQUEST.backfill_id, window=2)
    assert (step.read, step.started, step.rewinds) == (0, 2, 0)
    bel.backfills.cancel(REQUEST.backfill_id)
    assert bel.backfills.cancel_unstarted(REQUEST.backfill_id) == 2
    bel.wants.reopen([w.want_id for w in bel.backfills.retry(REQUEST.backfill_id)])
    assert bel.backfills.record_window_step(step) is False
    again = bel.backfills.plan_window_step(REQUEST.backfill_id, window=2)
    assert starts(again) == [WantStart(spec=w, opening=1) for w in SPECS] and again.rewinds == 1
    assert bel.backfills.record_window_step(again) is True
    assert bel.backfills.progress(REQUEST.backfill_id).started == 2
