"""The rules of ``domain.wants`` on plain data: no database."""

from datetime import UTC, datetime

import pytest

from databuild.domain import events as ev
from databuild.domain import wants
from databuild.errors import ConcurrentChangeError
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
    awaited = wants.await_dependencies(deps(["up/1", "up/2"]))
    assert [e.type for e in awaited.events] == ["WantCreated", "WantCreated", "WantUpstreamBuilding"]
    upstream = awaited.events[-1]
    assert isinstance(upstream, ev.WantUpstreamBuilding)
    assert upstream.missing == ["up/1", "up/2"] and len(upstream.derivative_want_ids) == 2
    assert [d.ref for d in awaited.unfinished] == ["up/1", "up/2"]
    assert awaited.status.live == [] and awaited.status.failed == {}


def test_an_input_live_meanwhile_gets_no_derivative() -> None:
    awaited = wants.await_dependencies(deps(["up/1", "up/2"], {"up/1": part("up/1", PartitionStatus.live)}))
    assert [e.type for e in awaited.events] == ["WantCreated", "WantUpstreamBuilding"]
    assert awaited.status.live == ["up/1"]
    assert [d.ref for d in awaited.unfinished] == ["up/2"]


def test_derivatives_that_ended_without_their_partition_are_reported() -> None:
    d = deps(["up/1", "up/2", "up/3"])
    ids = [spec.want_id for spec in d.derivatives]
    known = {
        ids[0]: wants.WantRow(WantState.failed, "broken"),
        ids[1]: wants.WantRow(WantState.successful),
        ids[2]: wants.WantRow(WantState.building),
    }
    awaited = wants.await_dependencies(deps(["up/1", "up/2", "up/3"], known=known))
    assert [e.type for e in awaited.events] == ["WantUpstreamBuilding"]  # all recorded already
    assert awaited.status.failed == {"up/1": f"derivative want {ids[0]} failed: broken"}
    assert [s.ref for s in awaited.unfinished] == ["up/3"]


def test_a_derivative_cancelled_with_a_backfill_is_reopened_not_taken_for_a_failed_input() -> None:
    d = deps(["up/1"])
    (derivative,) = d.derivatives
    known = {derivative.want_id: wants.WantRow(WantState.canceled, "its backfill was cancelled", 3)}
    awaited = wants.await_dependencies(deps(["up/1"], known=known))
    assert awaited.status.failed == {}
    retried = [e for e in awaited.events if e.type == "WantRetried"]
    assert [(e.want_id, e.decision_seq) for e in retried] == [(derivative.want_id, 4)]  # its next step
    assert awaited.reopened == awaited.unfinished == [derivative]  # started again, after its run settles


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
