"""The rules of ``domain.partitions`` (taint, publish, pin) on plain data: no database."""

from datetime import UTC, datetime

import pytest

from databuild.domain import events as ev
from databuild.domain import partitions as rules
from databuild.errors import InvalidInputError, InvalidTransitionError, NotFoundError
from databuild.models import (
    ImpactedInstance,
    Instance,
    InstanceRef,
    InstanceStatus,
    Partition,
    PartitionStatus,
    TaintImpact,
)

pytestmark = pytest.mark.unit

AT = datetime(2024, 1, 1, tzinfo=UTC)


def part(
    ref: str, status: PartitionStatus, instance: str | None = None, building: str | None = None
) -> Partition:
    return Partition(
        ref=ref,
        status=status,
        instance_id=instance,
        built_by=None,
        building_job_run_id=building,
        external=False,
        updated_at=AT,
    )


IMPACT = TaintImpact(
    ref="up/1",
    instance_id="u1",
    downstream=[
        ImpactedInstance(ref="mid/1", instance_id="m1", depth=1, current=True),
        ImpactedInstance(ref="down/1", instance_id="d1", depth=2, current=True),
        ImpactedInstance(ref="mid/1", instance_id="m0", depth=1, current=False),
    ],
)
LIVE = part("up/1", PartitionStatus.live, "u1")


def test_only_a_live_partition_no_run_is_building_can_be_tainted() -> None:
    assert rules.taintable(LIVE, "up/1") is LIVE
    with pytest.raises(NotFoundError):
        rules.taintable(None, "up/1")
    with pytest.raises(InvalidTransitionError, match="being built by job run jr-9"):
        rules.taintable(part("up/1", PartitionStatus.live, "u1", building="jr-9"), "up/1")
    with pytest.raises(InvalidTransitionError, match="only a live partition"):
        rules.taintable(part("up/1", PartitionStatus.failed), "up/1")


def test_taint_marks_every_downstream_instance_stale() -> None:
    tainting = rules.taint(LIVE, IMPACT, reason="bad", looked_at=None, cascaded=[], now={})
    (event,) = tainting.events
    assert isinstance(event, ev.PartitionTainted)
    assert (event.ref, event.instance_id, event.reason) == ("up/1", "u1", "bad")
    assert [i.instance_id for i in event.stale] == ["m1", "d1", "m0"]
    assert tainting.tainted == [InstanceRef(ref="up/1", instance_id="u1")] and tainting.not_tainted == []


def test_taint_refuses_when_another_instance_is_live_than_the_one_looked_at() -> None:
    with pytest.raises(InvalidTransitionError, match="is now u1, not u0"):
        rules.taint(LIVE, IMPACT, reason=None, looked_at="u0", cascaded=[], now={})


def test_a_cascade_taints_the_current_downstream_still_live_as_it_was() -> None:
    now = {
        "mid/1": part("mid/1", PartitionStatus.live, "m1"),
        "down/1": part("down/1", PartitionStatus.live, "d2"),  # rebuilt since the impact was read
    }
    tainting = rules.taint(LIVE, IMPACT, reason="bad", looked_at="u1", cascaded=["down/1", "mid/1"], now=now)
    assert [(e.type, getattr(e, "ref", None)) for e in tainting.events] == [
        ("PartitionTainted", "up/1"),
        ("PartitionTainted", "mid/1"),
    ]
    cascaded = tainting.events[1]
    assert isinstance(cascaded, ev.PartitionTainted)
    assert cascaded.cascaded_from == "u1" and cascaded.reason == "built from tainted up/1: bad"
    assert [i.ref for i in tainting.tainted] == ["up/1", "mid/1"]
    assert tainting.not_tainted == [InstanceRef(ref="down/1", instance_id="d1")]


def test_a_cascade_skips_a_partition_being_rebuilt() -> None:
    now = {"mid/1": part("mid/1", PartitionStatus.live, "m1", building="jr-2")}
    tainting = rules.taint(LIVE, IMPACT, reason=None, looked_at=None, cascaded=["mid/1"], now=now)
    assert len(tainting.events) == 1
    assert tainting.not_tainted == [InstanceRef(ref="mid/1", instance_id="m1")]


def publish(
    partition: Partition | None, instance_id: str | None = None, seen_as: str | None = None
) -> list[ev.Event]:
    return rules.publish(
        "ext/1",
        partition,
        instance_id=instance_id,
        seen_as=seen_as,
        new_instance_id="fresh",
        source="upstream",
        location="s3://x",
    )


def test_publish_makes_a_new_or_not_live_ref_live_once() -> None:
    (event,) = publish(None)
    assert isinstance(event, ev.PartitionLive)
    assert (event.instance_id, event.external, event.source, event.location) == (
        "fresh",
        True,
        "upstream",
        "s3://x",
    )
    assert publish(part("ext/1", PartitionStatus.live, "i0")) == []
    assert len(publish(part("ext/1", PartitionStatus.tainted, "i0"))) == 1


def test_publish_with_an_instance_applies_each_instance_once() -> None:
    (event,) = publish(part("ext/1", PartitionStatus.live, "i0"), instance_id="i1")
    assert isinstance(event, ev.PartitionLive) and event.instance_id == "i1"
    assert publish(part("ext/1", PartitionStatus.live, "i1"), instance_id="i1", seen_as="ext/1") == []
    with pytest.raises(InvalidInputError, match="already an instance of ext/2"):
        publish(None, instance_id="i1", seen_as="ext/2")


def test_publish_refuses_a_ref_being_built_or_retired() -> None:
    with pytest.raises(InvalidTransitionError, match="being built"):
        publish(part("ext/1", PartitionStatus.missing, building="jr-1"))
    with pytest.raises(InvalidTransitionError, match="retired"):
        publish(part("ext/1", PartitionStatus.skipped))


def test_pin_changes_only_what_differs() -> None:
    instance = Instance(
        instance_id="i1",
        ref="a/1",
        job_run_id=None,
        external=True,
        status=InstanceStatus.live,
        stale_cause=None,
        reason=None,
        created_at=AT,
    )
    (pinned,) = rules.pin(instance, True, "keep")
    assert isinstance(pinned, ev.InstancePinned) and pinned.reason == "keep"
    assert rules.pin(instance, False, None) == []
    assert [e.type for e in rules.pin(instance.model_copy(update={"pinned": True}), False, None)] == [
        "InstanceUnpinned"
    ]
