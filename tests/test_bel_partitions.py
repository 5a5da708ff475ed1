"""The partitions aggregate of the BEL (``bel.aggregates.partitions``) on SQLite: publish, taint (with its
cascade), resolve, skip, pin, and the lineage reads."""

import pytest

from databuild.bel import BuildEventLog
from databuild.errors import InvalidTransitionError, NotFoundError
from databuild.models import InstanceRef, InstanceStatus, PartitionStatus
from tests.bel_sqlite import build, decide, spec

pytestmark = pytest.mark.unit


def test_publishing_is_idempotent_per_instance(bel: BuildEventLog) -> None:
    partition, changed = bel.partitions.publish_external("ext/1", "i1", source="upstream", location="s3://1")
    assert changed and partition.status is PartitionStatus.live and partition.external
    assert bel.partitions.publish_external("ext/1", "i1") == (partition, False)
    replaced, changed = bel.partitions.publish_external("ext/1", "i2")
    assert changed and replaced.instance_id == "i2"
    assert bel.partitions.instance("i1").status is InstanceStatus.superseded
    assert [i.instance_id for i in bel.partitions.instances("ext/1")] == ["i1", "i2"]
    history, total = bel.partitions.instance_history("ext/1", limit=1)
    assert total == 2 and [i.instance_id for i in history] == ["i2"]


def test_taint_marks_the_downstream_stale_and_a_cascade_taints_the_current(bel: BuildEventLog) -> None:
    up = build(bel, "up/1")
    mid = build(bel, "mid/1", reads=[up])
    down = build(bel, "down/1", reads=[mid])
    impact = bel.partitions.taint_impact("up/1")
    assert [(d.ref, d.depth, d.current) for d in impact.downstream] == [
        ("mid/1", 1, True),
        ("down/1", 2, True),
    ]
    assert bel.partitions.downstream_closure(up.instance_id) == [(mid, 1), (down, 2)]
    assert bel.partitions.consumers_of(up.instance_id)[1] == 1
    with pytest.raises(InvalidTransitionError, match="look at the impact again"):
        bel.partitions.taint("up/1", instance_id="other")
    result = bel.partitions.taint("up/1", reason="bad", cascade=True, instance_id=up.instance_id)
    assert [t.ref for t in result.tainted] == ["up/1", "mid/1", "down/1"] and result.not_tainted == []
    assert {p.ref: p.status for p in bel.partitions.query()} == dict.fromkeys(
        ("up/1", "mid/1", "down/1"), PartitionStatus.tainted
    )
    assert bel.partitions.generations(["up/1", "x/1"]) == {"up/1": 1, "x/1": 0}
    with pytest.raises(InvalidTransitionError, match="only a live partition"):
        bel.partitions.taint("up/1")
    with pytest.raises(NotFoundError):
        bel.partitions.taint_impact("nope/1")


def test_resolve_clears_a_fail_lock_and_skip_retires(bel: BuildEventLog) -> None:
    verdict = decide(bel, spec("a/1"))
    bel.job_runs.fail(verdict.job_run_id, "boom")
    assert {p.status for p in bel.partitions.by_ref(["a/1", "b/1"])} == {PartitionStatus.failed}
    resolved = bel.partitions.resolve("a/1")  # its sibling was fail-locked by the same run
    assert sorted(p.ref for p in resolved) == ["a/1", "b/1"]
    with pytest.raises(InvalidTransitionError):
        bel.partitions.resolve("a/1")
    with pytest.raises(NotFoundError):
        bel.partitions.resolve("nope/1")
    assert bel.partitions.skip("ext/5").status is PartitionStatus.skipped
    with pytest.raises(InvalidTransitionError, match="retired"):
        bel.partitions.publish_external("ext/5")
    counts = bel.partitions.counts(["a/*", "ext/*"])
    assert counts["ext/*"] == {PartitionStatus.skipped: 1}


def test_pinning_is_idempotent(bel: BuildEventLog) -> None:
    written = build(bel, "up/1")
    assert bel.partitions.pin_instance(written.instance_id, reason="keep").pinned
    bel.partitions.pin_instance(written.instance_id)
    assert not bel.partitions.pin_instance(written.instance_id, pinned=False).pinned
    assert [e.type for e in bel.events.query(types=["InstancePinned", "InstanceUnpinned"])] == [
        "InstancePinned",
        "InstanceUnpinned",
    ]
    assert bel.partitions.find("up/1") == bel.partitions.get("up/1")
    assert bel.partitions.query(status=PartitionStatus.live, ref_prefix="up/") == [bel.partitions.get("up/1")]
    assert bel.partitions.instances_by_id([written.instance_id])[0].ref == "up/1"
    assert InstanceRef(ref="up/1", instance_id=written.instance_id) == written
