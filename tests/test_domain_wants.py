"""The rules of ``domain.wants`` on plain data: no database."""

from datetime import UTC, datetime

import pytest

from databuild.domain import events as ev
from databuild.domain import wants
from databuild.domain.wants import WantStart
from databuild.errors import ConcurrentChangeError, WantReplacedError
from databuild.models import Partition, PartitionStatus, WantSource, WantSpec, WantState

pytestmark = pytest.mark.unit

AT = datetime(2024, 1, 1, tzinfo=UTC)
PARENT = WantSpec(ref="down/1", data_timestamp=AT, source=WantSource.cli)


def part(ref: str, status: PartitionStatus, generation: int = 0) -> Partition:
    return Partition(
        ref=ref,
        status=status,
        instance_id=f"{ref}-i" if status is PartitionStatus.live else None,
        built_by=None,
        building_job_run_id=None,
        external=False,
        updated_at=AT,
        generation=generation,
    )


def deps(
    missing: list[str],
    partitions: dict[str, Partition | None] | None = None,
    known: dict[str, wants.WantRow] | None = None,
    state: WantState = WantState.building,
    following: str | None = "jr-1",
    opening: int = 0,
    run_opening: int | None = None,
) -> wants.Dependencies:
    return wants.Dependencies(
        want_id=PARENT.want_id,
        job_run_id="jr-1",
        state=state,
        following=following,
        missing=missing,
        generations=dict.fromkeys(missing, 0),
        partitions=partitions or {},
        derivatives=[PARENT.derive(ref, PARENT.want_id) for ref in missing],
        known=known or {},
        opening=opening,
        run_opening=run_opening,
    )


def test_created_records_a_want_once() -> None:
    assert [e.type for e in wants.created(PARENT, known=False)] == ["WantCreated"]
    assert wants.created(PARENT, known=True) == []


def test_cancel_ends_an_open_want_and_leaves_an_ended_one() -> None:
    (event,) = wants.cancel("w", WantState.building, "stop")
    assert isinstance(event, ev.WantFinished)
    assert (event.type, event.state, event.reason) == ("WantCanceled", WantState.canceled, "stop")
    assert wants.cancel("w", WantState.successful, "stop") == []


def test_await_requirements_only_from_new() -> None:
    assert [e.type for e in wants.await_requirements("w", WantState.new, ["ext/1"])] == [
        "WantAwaitingRequirements"
    ]
    assert wants.await_requirements("w", WantState.building, ["ext/1"]) == []


def test_sla_flags_are_raised_once_and_not_on_an_ended_want() -> None:
    assert [e.type for e in wants.sla_missed("w", False, AT)] == ["WantSlaMissed"]
    assert wants.sla_missed("w", True, AT) == []
    assert [e.type for e in wants.sla_at_risk("w", WantState.building, False, AT, AT, None)] == [
        "WantSlaAtRisk"
    ]
    assert wants.sla_at_risk("w", WantState.building, True, AT, AT, None) == []
    assert wants.sla_at_risk("w", WantState.failed, False, AT, AT, None) == []


def test_missing_inputs_get_derivatives_and_the_want_waits_upstream() -> None:
    d = deps(["up/1", "up/2"])
    awaited = wants.await_dependencies(d)
    assert [e.type for e in awaited.events] == ["WantCreated", "WantCreated", "WantUpstreamBuilding"]
    upstream = awaited.events[-1]
    assert isinstance(upstream, ev.WantUpstreamBuilding)
    assert upstream.missing == ["up/1", "up/2"] and len(upstream.derivative_want_ids) == 2
    assert awaited.unfinished == [WantStart(spec=spec) for spec in d.derivatives]  # new: opening 0
    assert [w.spec.ref for w in awaited.unfinished] == ["up/1", "up/2"]
    assert awaited.status.live == [] and awaited.status.failed == {}


def test_an_input_live_meanwhile_gets_no_derivative() -> None:
    d = deps(["up/1", "up/2"], {"up/1": part("up/1", PartitionStatus.live)})
    awaited = wants.await_dependencies(d)
    assert [e.type for e in awaited.events] == ["WantCreated", "WantUpstreamBuilding"]
    assert awaited.status.live == ["up/1"]
    assert awaited.unfinished == [WantStart(spec=d.derivatives[1])]


def test_derivatives_that_ended_without_their_partition_are_reported() -> None:
    d = deps(["up/1", "up/2", "up/3"])
    ids = [spec.want_id for spec in d.derivatives]
    known = {
        ids[0]: wants.WantRow(WantState.failed, "broken"),
        ids[1]: wants.WantRow(WantState.successful),
        ids[2]: wants.WantRow(WantState.building, opening=2),  # reopened twice: started for its opening
    }
    awaited = wants.await_dependencies(deps(["up/1", "up/2", "up/3"], known=known))
    assert [e.type for e in awaited.events] == ["WantUpstreamBuilding"]  # all recorded already
    assert awaited.status.failed == {"up/1": f"derivative want {ids[0]} failed: broken"}
    assert awaited.unfinished == [WantStart(spec=d.derivatives[2], opening=2)]


def test_a_derivative_cancelled_with_a_backfill_is_reopened_not_taken_for_a_failed_input() -> None:
    d = deps(["up/1"])
    (derivative,) = d.derivatives
    known = {derivative.want_id: wants.WantRow(WantState.canceled, "its backfill was cancelled", 3, 1)}
    awaited = wants.await_dependencies(deps(["up/1"], known=known))
    assert awaited.status.failed == {}
    retried = [e for e in awaited.events if e.type == "WantRetried"]
    assert [(e.want_id, e.decision_seq) for e in retried] == [(derivative.want_id, 4)]  # its next step
    # Started again (after its run settles) for its next opening: the run it had is replaced.
    assert awaited.reopened == awaited.unfinished == [WantStart(spec=derivative, opening=2)]


def test_waiting_again_for_the_same_run_appends_nothing_new() -> None:
    d = deps(["up/1"], state=WantState.upstream_building)
    known = {d.derivatives[0].want_id: wants.WantRow(WantState.building)}
    again = wants.await_dependencies(deps(["up/1"], known=known, state=WantState.upstream_building))
    assert again.events == []
    other = wants.await_dependencies(
        deps(["up/1"], known=known, state=WantState.upstream_building, following="jr-0")
    )
    assert [e.type for e in other.events] == ["WantUpstreamBuilding"]


def test_an_ended_want_starts_nothing() -> None:
    awaited = wants.await_dependencies(deps(["up/1"], state=WantState.canceled))
    assert awaited.events == [] and awaited.unfinished == []
    assert awaited.status.failed == {"up/1": f"want {PARENT.want_id} has ended (canceled)"}


def test_an_input_tainted_since_its_derivative_was_named_is_a_concurrent_change() -> None:
    with pytest.raises(ConcurrentChangeError, match="up/1 was tainted"):
        wants.await_dependencies(
            deps(["up/1"], {"up/1": part("up/1", PartitionStatus.tainted, generation=1)})
        )


@pytest.mark.parametrize(("opening", "run_opening"), [(0, 0), (1, 1), (1, None)])
def test_a_run_of_the_wants_opening_awaits_its_inputs(opening: int, run_opening: int | None) -> None:
    awaited = wants.await_dependencies(deps(["up/1"], opening=opening, run_opening=run_opening))
    assert [e.type for e in awaited.events] == ["WantCreated", "WantUpstreamBuilding"]


@pytest.mark.parametrize("state", [WantState.new, WantState.building, WantState.failed])
def test_a_run_a_retry_replaced_awaits_nothing(state: WantState) -> None:
    """A run that serves an older opening than the want's (open again, or ended again since) is refused:
    nothing to record, no derivative to start."""
    with pytest.raises(WantReplacedError, match="serves opening 0, the want is at 1") as raised:
        wants.await_dependencies(deps(["up/1"], state=state, opening=1, run_opening=0))
    assert raised.value.opening == 1 and raised.value.details() == (1,)
