"""A fresh want's rules on plain data (``databuild.domain.freshness`` through ``decisions.decide``, and
``wants.await_dependencies`` for its fresh derivatives): no database, no Temporal. The same rules run in
the BEL (tests/test_fresh.py) and on the real stack (tests/test_fresh_stack.py)."""

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from databuild.client.specs import build_spec
from databuild.domain import decisions as d
from databuild.domain import events as ev
from databuild.domain import wants as wants_rules
from databuild.domain.freshness import Freshness, accepted, rebuilds, stale_inputs
from databuild.domain.plans import Action, Node, Root, plan
from databuild.domain.staleness import StaleKind, StaleReason
from databuild.domain.wants import WantStart
from databuild.errors import InvalidWantError
from databuild.graph import Graph, JobTarget
from databuild.models import Partition, PartitionStatus, WantSource, WantSpec, WantState

pytestmark = pytest.mark.unit

AT = datetime(2024, 1, 1, tzinfo=UTC)
GRAPH = Graph("freshness")


@GRAPH.job("a/{n}", "b/{n}")
def ab(ctx: object, n: str) -> None:  # pragma: no cover - never run here
    pass


def target() -> JobTarget:
    found = GRAPH.resolve("a/1").target
    assert found is not None
    return found


def live(ref: str, run: str = "jr-old", instance: str | None = None) -> Partition:
    return Partition(
        ref=ref,
        status=PartitionStatus.live,
        instance_id=instance or f"{ref}-uuid",
        built_by=run,
        building_job_run_id=None,
        external=False,
        updated_at=AT,
    )


CODE = StaleReason(kind=StaleKind.code_changed, built_version="1", current_version="2")
SUPERSEDED = StaleReason(
    kind=StaleKind.input_superseded, input_ref="raw/1", input_instance_id="r-1", live_instance_id="r-2"
)
STALE_INPUT = StaleReason(kind=StaleKind.input_stale, input_ref="users/1", input_instance_id="u-1")


def state(
    *parts: Partition,
    fresh: Freshness | None,
    runs: frozenset[str] = frozenset(),
    following: str | None = None,
) -> d.DecisionState:
    by_ref: dict[str, Partition | None] = {p.ref: p for p in parts}
    known = {p.building_job_run_id for p in parts if p.building_job_run_id} | ({following} - {None})
    t = target()
    return d.DecisionState(
        want=d.WantStep(
            want_id="w-1", ref="a/1", state=WantState.new, decision_seq=0, job_run_id=following, runs=runs
        ),
        target=t,
        partitions={out: by_ref.get(out) for out in t.outputs},
        runs={
            r: d.RunPlan(job_run_id=r, job_label=t.job.label, outputs=t.outputs, params=t.params)
            for r in sorted(known)  # type: ignore[type-var]
        },
        fresh=fresh,
    )


def test_a_want_that_is_not_fresh_accepts_a_stale_live_partition() -> None:
    decided = d.decide(state(live("a/1"), live("b/1"), fresh=None), 1, "jr-new")
    assert isinstance(decided.verdict, d.Live)
    assert decided.verdict.instance_id == "a/1-uuid"


def test_a_fresh_want_accepts_a_partition_that_is_not_stale() -> None:
    fresh = Freshness(instance_id="a/1-uuid")
    decided = d.decide(state(live("a/1"), live("b/1"), fresh=fresh), 1, "jr-new")
    assert isinstance(decided.verdict, d.Live)
    finished = [e for e in decided.events if isinstance(e, ev.WantFinished)]
    assert finished[0].state is WantState.successful and finished[0].reason is None
    assert "JobRunSkipped" in [e.type for e in decided.events]  # historical delegation, as usual


@pytest.mark.parametrize("reason", [CODE, SUPERSEDED], ids=["own code", "input superseded"])
def test_stale_by_its_own_code_or_a_newer_input_is_built_at_once(reason: StaleReason) -> None:
    fresh = Freshness(instance_id="a/1-uuid", reasons=(reason,))
    decided = d.decide(state(live("a/1"), live("b/1"), fresh=fresh), 1, "jr-new")
    assert isinstance(decided.verdict, d.Execute)
    assert decided.verdict.job_run_id == "jr-new" and decided.verdict.outputs == ["a/1", "b/1"]
    types = [e.type for e in decided.events]
    assert types == ["JobRunQueued", "PartitionBuilding", "PartitionBuilding", "WantBuilding"]


def test_stale_inputs_are_wanted_fresh_first_then_it_builds() -> None:
    fresh = Freshness(instance_id="a/1-uuid", reasons=(STALE_INPUT, SUPERSEDED))
    first = d.decide(state(live("a/1"), live("b/1"), fresh=fresh), 1, "jr-new")
    assert first.verdict == d.NeedsInputs(missing=["users/1"]) and first.events == []
    # Once it waited for them (a derivative for each), it builds, whatever they did: never a second wait.
    waited = replace(fresh, awaited=frozenset({"users/1"}))
    second = d.decide(state(live("a/1"), live("b/1"), fresh=waited), 2, "jr-new")
    assert isinstance(second.verdict, d.Execute)


def test_a_fresh_want_rebuilds_once_and_says_why_it_accepts_its_own_stale_build() -> None:
    fresh = Freshness(instance_id="a/1-new", reasons=(SUPERSEDED,))
    own = live("a/1", run="jr-mine", instance="a/1-new")
    decided = d.decide(state(own, live("b/1"), fresh=fresh, runs=frozenset({"jr-mine"})), 3, "jr-new")
    assert isinstance(decided.verdict, d.Live) and decided.verdict.instance_id == "a/1-new"
    (finished,) = [e for e in decided.events if isinstance(e, ev.WantFinished)]
    assert finished.reason is not None
    assert (
        "stale again" in finished.reason
        and "jr-mine" in finished.reason
        and "rebuilds once" in finished.reason
    )


def test_two_fresh_wants_build_once_the_second_delegates_to_the_active_run() -> None:
    fresh = Freshness(instance_id="a/1-uuid", reasons=(CODE,))
    a, b = (live(ref).model_copy(update={"building_job_run_id": "jr-first"}) for ref in ("a/1", "b/1"))
    decided = d.decide(state(a, b, fresh=fresh), 1, "x")
    assert isinstance(decided.verdict, d.Delegate) and decided.verdict.job_run_id == "jr-first"
    assert "JobRunQueued" not in [e.type for e in decided.events]


def test_an_instance_rebuilt_since_it_was_judged_is_accepted() -> None:
    fresh = Freshness(instance_id="a/1-judged", reasons=(CODE,))
    own = live("a/1", instance="a/1-newer")
    assert not rebuilds(fresh, own, frozenset())
    assert isinstance(d.decide(state(own, live("b/1"), fresh=fresh), 1, "x").verdict, d.Live)


def test_the_helpers() -> None:
    fresh = Freshness(instance_id="a/1-uuid", reasons=(STALE_INPUT, CODE), awaited=frozenset())
    own = live("a/1")
    assert rebuilds(fresh, own, frozenset()) and not rebuilds(fresh, own, frozenset({"jr-old"}))
    assert accepted(fresh, own, frozenset()) is None
    assert stale_inputs(fresh, own) == ["users/1"]
    assert stale_inputs(None, own) == [] and not rebuilds(None, own, frozenset())


def spec(ref: str, *, fresh: bool = False) -> WantSpec:
    return WantSpec(ref=ref, data_timestamp=AT, source=WantSource.cli, fresh=fresh)


def test_fresh_changes_the_want_id_only_when_set() -> None:
    usual = spec("a/1")
    assert usual.want_id == WantSpec(ref="a/1", data_timestamp=AT).want_id
    assert spec("a/1", fresh=True).want_id != usual.want_id
    # fresh_of names what it was asked against: after a rebuild it is a new want.
    one = WantSpec(ref="a/1", data_timestamp=AT, fresh=True, fresh_of="i-1:x")
    other = WantSpec(ref="a/1", data_timestamp=AT, fresh=True, fresh_of="i-2:x")
    assert one.want_id != other.want_id
    assert WantSpec(ref="a/1", data_timestamp=AT, fresh_of="ignored").want_id == usual.want_id
    derived = one.derive("users/1", one.want_id)
    assert derived.fresh and derived.fresh_of == one.want_id
    assert not usual.derive("users/1", usual.want_id).fresh


def deps(parent: WantSpec, known: dict[str, wants_rules.WantRow]) -> wants_rules.Dependencies:
    derivative = parent.derive("users/1", parent.want_id)
    return wants_rules.Dependencies(
        want_id=parent.want_id,
        job_run_id=None,
        state=WantState.new,
        following=None,
        missing=["users/1"],
        generations={"users/1": 0},
        partitions={"users/1": live("users/1")},
        derivatives=[derivative],
        known=known,
    )


def test_a_fresh_derivative_is_started_for_a_live_input_and_waited_for() -> None:
    parent = spec("a/1", fresh=True)
    awaited = wants_rules.await_dependencies(deps(parent, {}))
    assert [e.type for e in awaited.events] == ["WantCreated", "WantUpstreamBuilding"]
    derivative = parent.derive("users/1", parent.want_id)
    assert awaited.status.live == [] and awaited.unfinished == [WantStart(spec=derivative)]
    assert derivative.fresh  # a fresh want's inputs are wanted fresh
    # Once it ended successful, the input counts as live.
    done = wants_rules.await_dependencies(
        deps(parent, {derivative.want_id: wants_rules.WantRow(WantState.successful)})
    )
    assert done.status.live == ["users/1"] and done.unfinished == []


def test_a_usual_want_counts_a_live_input_live_and_derives_nothing() -> None:
    awaited = wants_rules.await_dependencies(deps(spec("a/1"), {}))
    assert awaited.status.live == ["users/1"] and awaited.unfinished == []
    assert [e.type for e in awaited.events] == ["WantUpstreamBuilding"]


def test_a_plan_shows_a_stale_partition_live_and_with_fresh_built_with_its_stale_inputs() -> None:
    def nodes(fresh: bool) -> dict[str, Node]:
        return {
            "report/1": Node(
                ref="report/1",
                job_label="report",
                status=PartitionStatus.live,
                inputs=["users/1"],
                stale=["read users/1 u-1, which is stale"],
                stale_inputs=["users/1"],
                fresh=fresh,
            ),
            "users/1": Node(
                ref="users/1",
                job_label="users",
                status=PartitionStatus.live,
                inputs=["raw/1"],
                stale=["job version changed 1 -> 2"],
                fresh=fresh,
            ),
            "raw/1": Node(ref="raw/1", job_label="raw", status=PartitionStatus.live, inputs=[], fresh=fresh),
        }

    usual = plan([Root(ref="report/1")], nodes(False), {}, AT)
    assert [(p.ref, p.action) for p in usual.partitions] == [("report/1", Action.live)]
    assert usual.partitions[0].stale and usual.runs == []
    fresh = plan([Root(ref="report/1")], nodes(True), {}, AT)
    assert [(p.ref, p.action) for p in fresh.partitions] == [
        ("raw/1", Action.live),
        ("users/1", Action.build),
        ("report/1", Action.build),
    ]
    assert [r.job_label for r in fresh.runs] == ["users", "report"]


def test_a_fresh_want_for_an_external_partition_is_refused_naming_why() -> None:
    g = Graph("outside")
    g.external("ext/{n}")
    with pytest.raises(InvalidWantError, match=r"ext/1 is external .* want it without --fresh"):
        build_spec(g, "ext/1", fresh=True)
    assert not build_spec(g, "ext/1").fresh
