"""The plan rule (``domain.plans``) on plain data: what wanting partitions would do, with no database."""

from datetime import UTC, datetime, timedelta

import pytest

from databuild.domain.estimates import Confidence, durations_of
from databuild.domain.plans import Action, Node, PlannedRun, Root, plan
from databuild.models import PartitionStatus

pytestmark = pytest.mark.unit

NOW = datetime(2024, 3, 1, 8, 0, tzinfo=UTC)
DAYS = [f"2024-01-0{d}" for d in range(1, 4)]


def chain(**status: PartitionStatus) -> dict[str, Node]:
    """report/x reads three days of users/d, each reading raw/d (nothing declared); ``status`` by ref, with
    '/' written '__'."""
    nodes = {
        "report/x": Node(
            ref="report/x",
            job_label="report",
            outputs=["report/x", "report_top/x"],
            inputs=[f"users/{d}" for d in DAYS],
        )
    }
    for d in DAYS:
        nodes[f"users/{d}"] = Node(
            ref=f"users/{d}", job_label="users", outputs=[f"users/{d}"], inputs=[f"raw/{d}"]
        )
        nodes[f"raw/{d}"] = Node(ref=f"raw/{d}", job_label="raw", outputs=[f"raw/{d}"], inputs=[])
    for key, value in status.items():
        ref = key.replace("__", "/")
        nodes[ref] = nodes[ref].model_copy(update={"status": value})
    return nodes


TIMED = {
    "raw": durations_of([10.0] * 10),
    "users": durations_of([20.0] * 8 + [40.0] * 2),
    "report": durations_of([30.0] * 10),
}


def test_a_missing_tree_is_built_inputs_first_one_run_per_target() -> None:
    found = plan([Root(ref="report/x")], chain(), TIMED, NOW)
    assert [p.ref for p in found.partitions] == [
        "raw/2024-01-01",
        "users/2024-01-01",
        "raw/2024-01-02",
        "users/2024-01-02",
        "raw/2024-01-03",
        "users/2024-01-03",
        "report/x",
    ]
    assert found.count(Action.build) == 7 and found.wanted == 1 and not found.blocked
    # The sibling output goes in its job's one run; every other target is its own run.
    assert found.runs[-1] == PlannedRun(
        job_label="report", outputs=["report/x", "report_top/x"], partitions=1
    )
    assert [r.job_label for r in found.runs] == ["raw"] * 3 + ["users"] * 3 + ["report"]
    # Live after the slowest path: raw, then users, then the report (p50 10+20+30, p90 10+40+30).
    assert (found.eta_p50, found.eta_p90) == (NOW + timedelta(seconds=60), NOW + timedelta(seconds=80))
    assert found.work_p50 == timedelta(seconds=3 * 10 + 3 * 20 + 30)
    assert found.work_p90 == timedelta(seconds=3 * 10 + 3 * 40 + 30)
    assert found.confidence is Confidence.high and found.untimed == [] and found.discovered_at_run_time == []


def test_live_partitions_are_used_as_they_are_and_their_inputs_not_followed() -> None:
    nodes = chain(**{"users__2024-01-01": PartitionStatus.live})
    found = plan([Root(ref="report/x")], nodes, TIMED, NOW)
    by_ref = {p.ref: p.action for p in found.partitions}
    assert by_ref["users/2024-01-01"] is Action.live and "raw/2024-01-01" not in by_ref
    assert found.count(Action.build) == 5 and len(found.runs) == 5


def test_a_partition_being_built_is_waited_for_what_is_left_of_its_run() -> None:
    nodes = chain(**{"users__2024-01-02": PartitionStatus.building})
    nodes["users/2024-01-02"] = nodes["users/2024-01-02"].model_copy(
        update={"running_since": NOW - timedelta(seconds=15)}
    )
    found = plan([Root(ref="report/x")], nodes, TIMED, NOW)
    assert {p.ref: p.action for p in found.partitions}["users/2024-01-02"] is Action.building
    assert "raw/2024-01-02" not in {p.ref for p in found.partitions}
    assert all("users/2024-01-02" not in r.outputs for r in found.runs)  # no run of ours builds it
    # The others still take raw then users (10 + 20 at p50); the building one has 5 s of its 20 left.
    assert found.eta_p50 == NOW + timedelta(seconds=30 + 30)


def test_a_fail_locked_or_unannounced_input_blocks_and_names_itself() -> None:
    nodes = chain(**{"raw__2024-01-03": PartitionStatus.failed})
    nodes["feed/x"] = Node(ref="feed/x", job_label=None, outputs=["feed/x"])
    nodes["dim/x"] = Node(ref="dim/x", job_label=None, outputs=["dim/x"], status=PartitionStatus.live)
    found = plan([Root(ref="report/x", requires=["feed/x", "dim/x"])], nodes, TIMED, NOW)
    actions = {p.ref: p.action for p in found.partitions}
    assert actions["raw/2024-01-03"] is Action.fail_locked and actions["feed/x"] is Action.awaited
    assert actions["dim/x"] is Action.available
    assert found.blocked == ["feed/x", "raw/2024-01-03"]
    assert found.confidence is Confidence.none


def test_a_batched_job_takes_its_targets_in_runs_of_its_batch_size() -> None:
    nodes = {
        f"raw/2024-01-0{d}": Node(
            ref=f"raw/2024-01-0{d}", job_label="raw", outputs=[f"raw/2024-01-0{d}"], batch=3
        )
        for d in range(1, 8)
    }
    roots = [Root(ref=ref) for ref in nodes]
    found = plan(roots, nodes, {}, NOW)
    assert [(r.job_label, r.partitions) for r in found.runs] == [("raw", 3), ("raw", 3), ("raw", 1)]
    assert found.runs[0].outputs == ["raw/2024-01-01", "raw/2024-01-02", "raw/2024-01-03"]
    # Never timed: counted as no time, said so; their inputs are found when they run (none declared).
    assert found.untimed == ["raw"] and found.confidence is Confidence.none
    assert found.work_p50 == timedelta(0) and found.discovered_at_run_time == list(nodes)


def test_a_deadline_the_p90_estimate_passes_is_a_miss() -> None:
    late = Root(ref="report/x", deadline=NOW + timedelta(seconds=70))  # p90 is 80 s away
    found = plan([late], chain(), TIMED, NOW)
    assert [(m.ref, m.eta_p90) for m in found.sla_misses] == [("report/x", NOW + timedelta(seconds=80))]
    assert (
        plan(
            [late.model_copy(update={"deadline": NOW + timedelta(seconds=81)})], chain(), TIMED, NOW
        ).sla_misses
        == []
    )


def test_every_partition_live_is_nothing_to_do() -> None:
    nodes = {"raw/a": Node(ref="raw/a", job_label="raw", outputs=["raw/a"], status=PartitionStatus.live)}
    found = plan([Root(ref="raw/a", deadline=NOW - timedelta(days=1))], nodes, TIMED, NOW)
    assert found.runs == [] and found.eta_p50 is None and found.sla_misses == []
    assert [p.action for p in found.partitions] == [Action.live]


def test_a_tainted_partition_is_built_again() -> None:
    nodes = chain(
        **{
            "report__x": PartitionStatus.tainted,
            **dict.fromkeys([f"users__{d}" for d in DAYS], PartitionStatus.live),
        }
    )
    found = plan([Root(ref="report/x")], nodes, TIMED, NOW)
    assert [(r.job_label, r.outputs) for r in found.runs] == [("report", ["report/x", "report_top/x"])]


def test_a_chain_of_any_length_is_planned_and_a_declaration_that_loops_back_ends() -> None:
    # A cumulative job reads its own previous day: 5,000 days back to the first that is live.
    days = 5_000
    nodes = {
        f"total/{d}": Node(ref=f"total/{d}", job_label="total", inputs=[f"total/{d - 1}"])
        for d in range(1, days)
    }
    nodes["total/0"] = Node(ref="total/0", job_label="total", status=PartitionStatus.live)
    found = plan([Root(ref=f"total/{days - 1}")], nodes, {"total": durations_of([1.0] * 5)}, NOW)
    assert found.count(Action.build) == days - 1 and found.partitions[0].ref == "total/0"
    assert found.eta_p50 == NOW + timedelta(seconds=days - 1)

    looping = {
        "a/x": Node(ref="a/x", job_label="a", inputs=["b/x"]),
        "b/x": Node(ref="b/x", job_label="b", inputs=["a/x"]),
    }
    assert [p.ref for p in plan([Root(ref="a/x")], looping, {}, NOW).partitions] == ["b/x", "a/x"]
