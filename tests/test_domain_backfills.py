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


def test_the_first_registration_records_the_backfill_and_its_wants_at_their_places() -> None:
    events = rules.register(REQUEST, 3, SPECS, first_seq=0, canceled=None, wants={}, members=set())
    assert [e.type for e in events] == [
        "BackfillRegistered",
        "WantCreated",
        "WantCreated",
        "WantCreated",
        "BackfillWantsAdded",
    ]
    registered, added = events[0], events[-1]
    assert isinstance(registered, ev.BackfillRegistered) and registered.windowed
    assert isinstance(added, ev.BackfillWantsAdded) and added.want_ids == IDS and added.seqs == [0, 1, 2]


def test_registering_again_adds_only_what_is_new() -> None:
    wants = {IDS[0]: WantState.successful, IDS[1]: WantState.building}
    events = rules.register(
        REQUEST, 3, SPECS[1:], first_seq=1, canceled=False, wants=wants, members={IDS[0], IDS[1]}
    )
    assert [e.type for e in events] == ["WantCreated", "BackfillWantsAdded"]
    added = events[-1]
    assert isinstance(added, ev.BackfillWantsAdded) and (added.want_ids, added.seqs) == ([IDS[2]], [2])
    same = rules.register(REQUEST, 3, SPECS[:1] * 2, first_seq=0, canceled=False, wants={}, members=set(IDS))
    assert [e.type for e in same] == ["WantCreated"]  # a repeated spec is created once


def test_a_cancelled_backfill_cancels_the_wants_registered_after_the_cancel() -> None:
    wants = {IDS[0]: WantState.failed}
    events = rules.register(REQUEST, 3, SPECS, first_seq=0, canceled=True, wants=wants, members={IDS[0]})
    cancels = [e for e in events if isinstance(e, ev.WantFinished)]
    assert [(e.want_id, e.state, e.reason) for e in cancels] == [
        (w, WantState.canceled, cancel_reason(REQUEST.backfill_id)) for w in IDS[1:]
    ]


def following(*states: WantState, first: int = 0) -> list[tuple[int, str, WantState]]:
    return [(first + i, f"w{first + i}", state) for i, state in enumerate(states)]


def test_the_window_starts_the_next_wants_while_fewer_than_its_size_are_open() -> None:
    new = WantState.new
    step = rules.advance(
        started=0, open_wants=0, window=2, paused=False, canceled=False, following=following(new, new, new)
    )
    assert (step.to_start, step.started) == (["w0", "w1"], 2)
    one_open = rules.advance(
        started=2, open_wants=1, window=2, paused=False, canceled=False, following=following(new, first=2)
    )
    assert (one_open.to_start, one_open.started) == (["w2"], 3)
    full = rules.advance(
        started=3, open_wants=2, window=2, paused=False, canceled=False, following=following(new, first=3)
    )
    assert (full.to_start, full.started) == ([], 3)


def test_a_step_is_recorded_once_its_wants_started_unless_the_window_moved_meanwhile() -> None:
    (moved,) = rules.moved("b", current=0, read=0, to=2)
    assert isinstance(moved, ev.BackfillAdvanced) and moved.started == 2
    assert rules.moved("b", current=2, read=0, to=2) == []  # recorded already (a retried attempt)
    assert rules.moved("b", current=0, read=5, to=7) == []  # a retry rewound it: the next step reads again
    assert rules.moved("b", current=3, read=3, to=3) == []  # nothing started
    # A cancel and a retry came between its plan and its record, rewinding it to where it read.
    assert rules.moved("b", current=0, read=0, to=2, rewound=True) == []


def test_the_window_passes_over_wants_that_ended_and_stops_at_a_place_not_registered() -> None:
    done, new = WantState.successful, WantState.new
    ended = [(0, "w0", done), (1, "w1", WantState.canceled), (2, "w2", new), (4, "w4", new)]
    step = rules.advance(started=0, open_wants=0, window=5, paused=False, canceled=False, following=ended)
    assert (step.to_start, step.started) == (["w2"], 3)  # place 3 is not registered yet


def test_a_paused_or_cancelled_window_starts_nothing() -> None:
    for paused, canceled in ((True, False), (False, True)):
        step = rules.advance(
            started=0,
            open_wants=0,
            window=5,
            paused=paused,
            canceled=canceled,
            following=following(WantState.new),
        )
        assert (step.to_start, step.started) == ([], 0)


def test_cancel_pause_and_resume_happen_once_and_retry_always() -> None:
    assert [e.type for e in rules.cancel("b", canceled=False)] == ["BackfillCanceled"]
    assert rules.cancel("b", canceled=True) == []
    assert [e.type for e in rules.pause("b", paused=False, pausing=True)] == ["BackfillPaused"]
    assert rules.pause("b", paused=True, pausing=True) == []
    assert [e.type for e in rules.pause("b", paused=True, pausing=False)] == ["BackfillResumed"]
    assert rules.pause("b", paused=False, pausing=False) == []
    (windowed,) = rules.retry("b", windowed=True)
    (legacy,) = rules.retry("b", windowed=False)
    assert isinstance(windowed, ev.BackfillRetried) and windowed.rewind
    assert isinstance(legacy, ev.BackfillRetried) and not legacy.rewind


def test_a_cancel_ends_in_bulk_only_the_unstarted_wants_that_never_decided() -> None:
    # A step is recorded once its wants are started: one at a place not recorded started may have a
    # workflow that decided (a run queued for it), which the cancel's reach ends and tells instead.
    states = {IDS[0]: WantState.new, IDS[1]: WantState.building, IDS[2]: WantState.successful}
    (ended,) = rules.cancel_unstarted("b", states)
    assert isinstance(ended, ev.WantFinished)
    assert (ended.want_id, ended.state, ended.reason) == (IDS[0], WantState.canceled, cancel_reason("b"))
