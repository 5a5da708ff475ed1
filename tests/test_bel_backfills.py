"""The backfills aggregate of the BEL (``bel.backfills``) on SQLite: registration, pause, cancel,
retry, and progress."""

from datetime import UTC, datetime

import pytest

from databuild.backfill import BackfillRequest
from databuild.bel import BuildEventLog
from databuild.errors import NotFoundError
from databuild.models import WantSource, WantSpec, WantState
from tests.bel_sqlite import bel

pytestmark = pytest.mark.unit
__all__ = ["bel"]

REQUEST = BackfillRequest(
    pattern="up/{n}", start=datetime(2024, 1, 1, tzinfo=UTC), end=datetime(2024, 1, 2, tzinfo=UTC)
)
SPECS = [
    WantSpec(ref=f"up/{n}", data_timestamp=datetime(2024, 1, n, tzinfo=UTC), source=WantSource.backfill)
    for n in (1, 2)
]


def test_registering_is_idempotent_and_counts_its_wants(bel: BuildEventLog) -> None:
    assert bel.record_backfill(REQUEST, 2, SPECS[:1]) == SPECS[:1]
    assert bel.record_backfill(REQUEST, 2, SPECS) == SPECS
    assert [e.type for e in bel.events(types=["BackfillRegistered", "BackfillWantsAdded"])] == [
        "BackfillRegistered",
        "BackfillWantsAdded",
        "BackfillWantsAdded",
    ]
    progress = bel.backfill_progress(REQUEST.backfill_id)
    assert (progress.partitions, progress.registered) == (2, 2)
    assert progress.by_state == {WantState.new: 2} and not progress.finished
    assert [w.ref for w in bel.backfill_reach(REQUEST.backfill_id)] == ["up/1", "up/2"]


def test_pause_and_cancel_are_recorded_once(bel: BuildEventLog) -> None:
    bel.record_backfill(REQUEST, 2, SPECS[:1])
    assert bel.pause_backfill(REQUEST.backfill_id, True) and not bel.pause_backfill(REQUEST.backfill_id, True)
    assert bel.any_backfill_paused() and bel.backfill_progress(REQUEST.backfill_id).paused
    assert bel.pause_backfill(REQUEST.backfill_id, False) and not bel.any_backfill_paused()
    assert bel.cancel_backfill(REQUEST.backfill_id) and not bel.cancel_backfill(REQUEST.backfill_id)
    with pytest.raises(NotFoundError):
        bel.cancel_backfill("nope")
    with pytest.raises(NotFoundError):
        bel.pause_backfill("nope", True)


def test_a_cancelled_backfill_cancels_what_it_registers_and_a_retry_reopens(bel: BuildEventLog) -> None:
    bel.record_backfill(REQUEST, 2, SPECS[:1])
    bel.cancel_backfill(REQUEST.backfill_id)
    cancelled, _ = bel.cancel_wants([SPECS[0].want_id], "its backfill was cancelled")
    assert len(cancelled) == 1
    assert bel.record_backfill(REQUEST, 2, SPECS) == []
    assert {w.state for w in bel.wants()} == {WantState.canceled}
    (progress,) = bel.finished_backfills_of(SPECS[1].want_id)
    assert progress.finished and progress.canceled
    retried = bel.retry_backfill(REQUEST.backfill_id)
    assert sorted(w.ref for w in retried) == ["up/1", "up/2"]
    assert len(bel.reopen_wants([w.want_id for w in retried])) == 2
    assert not bel.backfill_progress(REQUEST.backfill_id).canceled
    with pytest.raises(NotFoundError):
        bel.retry_backfill("nope")
