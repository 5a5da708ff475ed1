"""The staleness rule (databuild.domain.staleness), without a database: each reason alone, the
transitive case, what never counts, and a chain longer than Python's stack."""

import pytest

from databuild.domain.staleness import Built, Read, StaleReason, staleness
from databuild.models import InstanceStatus

pytestmark = pytest.mark.unit

LIVE, SUPERSEDED, TAINTED = InstanceStatus.live, InstanceStatus.superseded, InstanceStatus.tainted


def built(instance_id: str, *reads: Read, job: str | None = "j", version: str | None = "1") -> Built:
    ref = instance_id.split("@")[0]
    return Built(instance_id, ref, job, f"jr-{instance_id}", version, reads)


def live(instance_id: str) -> Read:
    return Read(instance_id.split("@")[0], instance_id, LIVE, instance_id)


def kinds(found: dict[str, list[StaleReason]]) -> dict[str, list[str]]:
    return {i: [str(r.kind) for r in reasons] for i, reasons in found.items()}


def test_a_changed_version_makes_its_instances_and_their_readers_stale_and_nothing_else() -> None:
    graph = {
        "raw/1@a": built("raw/1@a", job=None, version=None),  # external
        "day/1@a": built("day/1@a", live("raw/1@a"), job="day"),
        "sum/1@a": built("sum/1@a", live("day/1@a"), job="sum"),
        "other/1@a": built("other/1@a", live("raw/1@a"), job="other"),
    }
    unchanged = {"day": "1", "sum": "1", "other": "1"}
    assert staleness(graph, unchanged, graph) == {}
    found = staleness(graph, {**unchanged, "day": "2"}, graph)
    assert kinds(found) == {"day/1@a": ["code_changed"], "sum/1@a": ["input_stale"]}
    (reason,) = found["day/1@a"]
    assert (reason.built_version, reason.current_version) == ("1", "2")
    assert str(found["sum/1@a"][0]) == "read day/1 day/1@a, which is stale"


def test_an_unknown_version_or_a_job_gone_from_the_graph_is_never_stale_by_code() -> None:
    graph = {"a/1@x": built("a/1@x", version=None), "b/1@x": built("b/1@x", job="gone")}
    assert staleness(graph, {"j": "2"}, graph) == {}


def test_a_superseded_or_tainted_input_and_what_does_not_count() -> None:
    graph = {
        "s/1@a": built("s/1@a", Read("in/1", "in/1@old", SUPERSEDED, "in/1@new")),
        "t/1@a": built("t/1@a", Read("in/2", "in/2@old", TAINTED, None)),
        # tainted, then rebuilt: the taint is the reason, not the rebuild
        "u/1@a": built("u/1@a", Read("in/3", "in/3@old", TAINTED, "in/3@new")),
        # retired with nothing live after it: there is no newer data it could have read
        "r/1@a": built("r/1@a", Read("in/4", "in/4@old", SUPERSEDED, None)),
    }
    found = staleness(graph, {"j": "1"}, graph)
    assert kinds(found) == {
        "s/1@a": ["input_superseded"],
        "t/1@a": ["input_tainted"],
        "u/1@a": ["input_tainted"],
    }
    assert found["s/1@a"][0].live_instance_id == "in/1@new"
    assert found["t/1@a"][0].live_instance_id is None


def test_every_reason_is_given_and_only_the_targets_are_answered() -> None:
    graph = {
        "up/1@a": built("up/1@a", Read("in/1", "in/1@old", SUPERSEDED, "in/1@new")),
        "down/1@a": built("down/1@a", live("up/1@a"), Read("in/2", "in/2@x", TAINTED, None), version="0"),
    }
    found = staleness(graph, {"j": "1"}, ["down/1@a"])
    assert kinds(found) == {"down/1@a": ["code_changed", "input_tainted", "input_stale"]}


def test_a_chain_longer_than_the_stack_and_a_cycle_are_answered() -> None:
    n = 5000
    chain = {"c/0@a": built("c/0@a", Read("in/0", "in/0@old", SUPERSEDED, "in/0@new"))}
    chain |= {f"c/{i}@a": built(f"c/{i}@a", live(f"c/{i - 1}@a")) for i in range(1, n)}
    found = staleness(chain, {"j": "1"}, [f"c/{n - 1}@a"])
    assert kinds(found) == {f"c/{n - 1}@a": ["input_stale"]}
    loop = {"x/1@a": built("x/1@a", live("y/1@a")), "y/1@a": built("y/1@a", live("x/1@a"))}
    assert staleness(loop, {"j": "1"}, loop) == {}
