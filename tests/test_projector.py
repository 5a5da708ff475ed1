"""The projector's handler table covers the event union exactly."""

import typing
from datetime import UTC, datetime

import pytest
from sqlalchemy import Connection, create_engine

from databuild.bel import projector
from databuild.domain import events as ev
from databuild.models import Model

pytestmark = pytest.mark.unit


def event_types() -> list[type]:
    union = typing.get_args(ev.Event)[0]  # Annotated[Union[...], discriminator]
    return list(typing.get_args(union))


def test_every_event_type_has_exactly_one_handler() -> None:
    types = event_types()
    assert len(types) == len(set(types)) > 20
    assert set(projector.HANDLERS) == set(types), {
        "without a handler": sorted(t.__name__ for t in set(types) - set(projector.HANDLERS)),
        "handled but not an event": sorted(t.__name__ for t in set(projector.HANDLERS) - set(types)),
    }
    # Each handler projects one type: a shared handler would hide a type-specific rule.
    assert len(set(projector.HANDLERS.values())) == len(projector.HANDLERS)


def test_a_second_handler_for_an_event_type_is_refused() -> None:
    def again(conn: Connection, event: ev.WantCreated, at: datetime) -> None: ...

    with pytest.raises(RuntimeError, match="WantCreated already has a projection"):
        projector.projects(ev.WantCreated)(again)
    assert projector.HANDLERS[ev.WantCreated] is not again


def test_an_event_type_without_a_handler_is_a_clear_error() -> None:
    class Unknown(Model):
        type: typing.Literal["Unknown"] = "Unknown"

    engine = create_engine("sqlite://")
    try:
        with engine.begin() as conn, pytest.raises(TypeError, match="no projection for event Unknown"):
            projector.apply(conn, Unknown(), datetime.now(UTC))  # type: ignore[arg-type]
    finally:
        engine.dispose()


def test_merged_keeps_each_commands_order_and_puts_types_together() -> None:
    def queued(run: str) -> ev.JobRunQueued:
        return ev.JobRunQueued(
            job_run_id=run, job_label="j", outputs=[run], params={}, want_id="w" + run, workflow_id="wf"
        )

    def building(run: str) -> ev.PartitionBuilding:
        return ev.PartitionBuilding(ref=run, job_run_id=run)

    def external(want: str) -> ev.WantWaitingExternal:
        return ev.WantWaitingExternal(want_id=want, decision_seq=1)

    first = [queued("1"), building("1"), building("1b")]
    waits = [external("w")]
    second = [queued("2"), building("2")]
    order = projector.merged([first, [], waits, second])
    assert order == [queued("1"), queued("2"), building("1"), building("1b"), building("2"), external("w")]
    for command in (first, waits, second):  # each command's own order is kept
        assert [e for e in order if e in command] == command
