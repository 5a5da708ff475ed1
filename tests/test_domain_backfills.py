"""The rules of the backfill commands (``domain.backfills``) on plain data: no database."""

from datetime import UTC, datetime

import pytest

from databuild.backfill import BackfillRequest, cancel_reason
from databuild.domain import backfills as rules
from databuild.domain import events as ev
from databuild.models import WantSource, WantSpec, WantState

pytestmark = pytest.mark.unit

REQUEST = BackfillRequest(
    pattern="a/{d}", start=datetime(2024, 1, 1, tzinfo=UTC), end=datetime(2024, 1, 3, tzinfo=UTC)
)
SPECS = [
    WantSpec(
        ref=f"a/2024-01-0{n}", data_timestamp=datetime(2024, 1, n, tzinfo=UTC), source=WantSource.backfill
    )
    for n in (1, 2, 3)
]
IDS = [spec.want_id for spec in SPECS]


def test_the_first_registration_records_the_backfill_and_its_wants() -> None:
    registration = rules.register(REQUEST, 3, SPECS, canceled=None, wants={}, members=set())
    assert [e.type for e in registration.events] == [
        "BackfillRegistered",
        "WantCreated",
        "WantCreated",
        "WantCreated",
        "BackfillWantsAdded",
    ]
    added = registration.events[-1]
    assert isinstance(added, ev.BackfillWantsAdded) and added.want_ids == IDS
    assert registration.to_start == SPECS


def test_registering_again_adds_only_what_is_new_and_starts_the_open_wants() -> None:
    wants = {IDS[0]: WantState.successful, IDS[1]: WantState.building}
    registration = rules.register(REQUEST, 3, SPECS, canceled=False, wants=wants, members={IDS[0], IDS[1]})
    assert [e.type for e in registration.events] == ["WantCreated", "BackfillWantsAdded"]
    assert registration.to_start == SPECS[1:]
    same = rules.register(REQUEST, 3, SPECS[:1] * 2, canceled=False, wants={}, members=set(IDS))
    assert [e.type for e in same.events] == ["WantCreated"]  # a repeated spec is created once


def test_a_cancelled_backfill_cancels_the_wants_registered_after_the_cancel() -> None:
    wants = {IDS[0]: WantState.failed}
    registration = rules.register(REQUEST, 3, SPECS, canceled=True, wants=wants, members={IDS[0]})
    assert registration.to_start == []
    cancels = [e for e in registration.events if isinstance(e, ev.WantFinished)]
    assert [(e.want_id, e.state, e.reason) for e in cancels] == [
        (w, WantState.canceled, cancel_reason(REQUEST.backfill_id)) for w in IDS[1:]
    ]


def test_cancel_pause_and_resume_happen_once_and_retry_always() -> None:
    assert [e.type for e in rules.cancel("b", canceled=False)] == ["BackfillCanceled"]
    assert rules.cancel("b", canceled=True) == []
    assert [e.type for e in rules.pause("b", paused=False, pausing=True)] == ["BackfillPaused"]
    assert rules.pause("b", paused=True, pausing=True) == []
    assert [e.type for e in rules.pause("b", paused=True, pausing=False)] == ["BackfillResumed"]
    assert rules.pause("b", paused=False, pausing=False) == []
    assert [e.type for e in rules.retry("b")] == ["BackfillRetried"]
