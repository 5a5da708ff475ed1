"""The rules of batches and pools, on their own: who may start, in what order, and whose inputs are whose
in a batch; bad declarations are refused with a clear error."""

from datetime import UTC, datetime, timedelta

import pytest

from databuild.config import Settings
from databuild.domain.pools import BACKGROUND, URGENT, Waiting, admit, latest_start, pools_of, want_priority
from databuild.errors import GraphDefinitionError
from databuild.graph import Graph
from databuild.models import WantSource

pytestmark = pytest.mark.unit

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def waiting(
    run: str, pools: dict[str, int], priority: int = URGENT, minute: int = 0, start_by: int | None = None
) -> Waiting:
    return Waiting(
        job_run_id=run,
        pools=pools,
        priority=priority,
        queued_at=T0 + timedelta(minutes=minute),
        latest_start=None if start_by is None else T0 + timedelta(minutes=start_by),
    )


def test_the_most_urgent_then_the_oldest_take_the_free_slots() -> None:
    line = [
        waiting("old-backfill", {"etl": 2}, BACKGROUND, minute=0),
        waiting("new-backfill", {"etl": 2}, BACKGROUND, minute=1),
        waiting("interactive", {"etl": 2}, URGENT, minute=2),
    ]
    assert admit(line, {"etl": 1}) == ["interactive"]
    assert admit(line, {}) == ["interactive", "old-backfill"]
    assert admit(line, {"etl": 2}) == []


def test_among_equals_the_least_sla_slack_goes_first_and_no_sla_goes_last() -> None:
    line = [
        waiting("no-sla", {"etl": 1}, BACKGROUND, minute=0),
        waiting("due-late", {"etl": 1}, BACKGROUND, minute=1, start_by=90),
        waiting("due-soon", {"etl": 1}, BACKGROUND, minute=2, start_by=30),
        waiting("interactive", {"etl": 1}, URGENT, minute=3),
    ]
    order = []
    for _ in line:  # one slot: each admission takes it, then the run ends
        (admitted,) = admit([w for w in line if w.job_run_id not in order], {})
        order.append(admitted)
    assert order == ["interactive", "due-soon", "due-late", "no-sla"]  # priority first, then slack


def test_the_latest_start_is_the_deadline_less_the_usual_duration() -> None:
    assert latest_start(T0, timedelta(minutes=10)) == T0 - timedelta(minutes=10)
    assert latest_start(None, timedelta(minutes=10)) is None


def test_a_run_needs_a_slot_of_every_pool_and_one_that_does_not_fit_holds_back_no_other() -> None:
    line = [
        waiting("a", {"etl": 4, "job:a": 1}, minute=0),
        waiting("b", {"etl": 4}, minute=1),
        waiting("a2", {"etl": 4, "job:a": 1}, minute=2),
    ]
    assert admit(line, {"job:a": 1}) == ["b"]  # a's own bound is taken: b goes past it
    assert admit(line, {}) == ["a", "b"]  # a2 waits for a, whatever room etl has


def test_a_backfill_and_its_derivatives_yield() -> None:
    assert want_priority(WantSource.backfill, None) == BACKGROUND
    assert want_priority(WantSource.derivative, WantSource.backfill) == BACKGROUND
    for source in (WantSource.cli, WantSource.api, WantSource.schedule, WantSource.dashboard):
        assert want_priority(source, None) == URGENT
        assert want_priority(WantSource.derivative, source) == URGENT


def test_a_job_takes_its_own_bound_and_its_named_pool() -> None:
    graph = Graph("g")
    graph.job("a/{n}", label="a", max_running=2, pool="spark")(lambda ctx, n: None)
    graph.job("b/{n}", label="b")(lambda ctx, n: None)
    a, b = graph.jobs
    assert pools_of(a, {"spark": 4}) == {"job:a": 2, "spark": 4}
    assert pools_of(b, {"spark": 4}) == {}
    with pytest.raises(
        GraphDefinitionError, match=r"DATABUILD_POOLS does not define.*DATABUILD_POOLS='spark=4'"
    ):
        pools_of(a, {})


def test_bad_batch_and_pool_declarations_are_refused() -> None:
    graph = Graph("g")
    for bad, match in (
        ({"batch": 0}, "batch=0"),
        ({"batch": True}, "batch=True"),
        ({"max_running": -1}, "max_running=-1"),
        ({"pool": "no spaces"}, "pool='no spaces'"),
    ):
        with pytest.raises(GraphDefinitionError, match=match):
            graph.job("x/{n}", **bad)


def test_pools_are_read_as_name_equals_slots() -> None:
    assert Settings(pools="spark=4, io=1").pools == {"spark": 4, "io": 1}
    for bad in ("spark", "spark=0", "=3", "spark=x"):
        with pytest.raises(ValueError, match="name=slots"):
            Settings(pools=bad)


def test_a_batch_attributes_each_input_to_the_partitions_that_declare_it() -> None:
    graph = Graph("g")
    graph.job("out/{d}", batch=3, inputs=lambda d: [f"in/{d}"])(lambda ctx, partitions: None)
    (job,) = graph.jobs
    members = [{"d": "1"}, {"d": "2"}]
    # Declared reads are their partition's; a read nobody declared might be anyone's.
    assert job.inputs_by_output(members, ["in/1", "in/2", "calendar"]) == {
        "out/1": ["calendar", "in/1"],
        "out/2": ["calendar", "in/2"],
    }
    assert job.inputs_by_output(members, ["in/2"]) == {"out/1": [], "out/2": ["in/2"]}
    undeclared = Graph("u")
    undeclared.job("out/{d}", batch=3)(lambda ctx, partitions: None)
    assert undeclared.jobs[0].inputs_by_output(members, ["in/2"]) == {"out/1": ["in/2"], "out/2": ["in/2"]}
