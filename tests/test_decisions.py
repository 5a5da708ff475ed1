"""The decision rules on their own: no database, no Temporal. Table-driven cases for every branch of a
want's decision and of a run's outcome, and properties (hypothesis) over random interleavings of many
wants deciding and runs ending: never two active builds of one ref, a decision never both executes
and delegates. The same rules run inside the BEL, where tests/test_bel.py checks them on SQLite and
PostgreSQL under real concurrency."""

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from databuild.domain import decisions as d
from databuild.domain import endings
from databuild.domain import events as ev
from databuild.errors import InvalidTransitionError
from databuild.graph import Graph, JobTarget
from databuild.models import InstanceRef, JobRunCause, Partition, PartitionStatus, WantState

pytestmark = pytest.mark.unit

AT = datetime(2024, 1, 1, tzinfo=UTC)
GRAPH = Graph("decisions")


@GRAPH.job("a/{n}", "b/{n}", "c/{n}")
def abc(ctx: object, n: str) -> None:  # pragma: no cover - never run here
    pass


def target(n: int = 1) -> JobTarget:
    found = GRAPH.resolve(f"a/{n}").target
    assert found is not None
    return found


def part(
    ref: str,
    status: PartitionStatus,
    *,
    building: str | None = None,
    instance: str | None = None,
    built_by: str | None = None,
) -> Partition:
    return Partition(
        ref=ref,
        status=status,
        instance_id=instance,
        built_by=built_by,
        building_job_run_id=building,
        external=False,
        updated_at=AT,
    )


def live(ref: str, run: str = "jr-old") -> Partition:
    return part(ref, PartitionStatus.live, instance=f"{ref}-uuid", built_by=run)


def plan(job_run_id: str) -> d.RunPlan:
    t = target()
    return d.RunPlan(job_run_id=job_run_id, job_label=t.job.label, outputs=t.outputs, params=t.params)


def state(
    *parts: Partition,
    want_state: WantState = WantState.new,
    seq: int = 0,
    opening: int = 0,
    following: str | None = None,
    relation: str | None = None,
    runs: frozenset[str] = frozenset(),
    fail_locks: dict[str, d.FailLock] | None = None,
    external: bool = False,
    reason: str | None = None,
    declared: dict[str, Partition | None] | None = None,
) -> d.DecisionState:
    by_ref: dict[str, Partition | None] = {p.ref: p for p in parts}
    known = {p.building_job_run_id for p in parts if p.building_job_run_id} | ({following} - {None})
    return d.DecisionState(
        want=d.WantStep(
            want_id="w-1",
            ref="a/1",
            state=want_state,
            decision_seq=seq,
            opening=opening,
            job_run_id=following,
            reason=reason,
            relation=relation,
            runs=runs,
        ),
        target=None if external else target(),
        partitions=by_ref,
        runs={r: plan(r) for r in known if r is not None},
        fail_locks=fail_locks or {},
        declared=declared or {},
    )


def types(decided: d.Decided) -> list[str]:
    return [e.type for e in decided.events]


# Every branch of a want's decision -------------------------------------------------------------------
CASES: list[tuple[str, d.DecisionState, str, list[str]]] = [
    (
        "nothing built: execute",
        state(),
        "execute",
        ["JobRunQueued", *["PartitionBuilding"] * 3, "WantBuilding"],
    ),
    (
        "an output is building: delegate the whole job",
        state(part("b/1", PartitionStatus.missing, building="jr-b")),
        "delegate",
        ["Delegation"] * 3 + ["WantBuilding"],
    ),
    (
        "all outputs live: historical delegation, job skipped",
        state(live("a/1"), live("b/1"), live("c/1")),
        "live",
        ["Delegation"] * 3 + ["JobRunSkipped", "WantSucceeded"],
    ),
    (
        "own live, a sibling missing: its own delegation only, nothing skipped",
        state(live("a/1"), part("b/1", PartitionStatus.missing)),
        "live",
        ["Delegation", "WantSucceeded"],
    ),
    (
        "own live, a sibling building: its own delegation only",
        state(live("a/1"), part("c/1", PartitionStatus.missing, building="jr-c")),
        "live",
        ["Delegation", "WantSucceeded"],
    ),
    (
        "a retired output: the want fails",
        state(part("c/1", PartitionStatus.skipped)),
        "final",
        ["WantFailed"],
    ),
    (
        "fail-locked, not its failure: blocked",
        state(
            part("a/1", PartitionStatus.failed),
            fail_locks={"a/1": d.FailLock(job_run_id="jr-x", reason="boom")},
        ),
        "blocked",
        ["WantBlocked"],
    ),
    (
        "fail-locked by a run it joined: the want fails",
        state(
            part("a/1", PartitionStatus.failed),
            runs=frozenset({"jr-x"}),
            fail_locks={"a/1": d.FailLock(job_run_id="jr-x", reason="boom")},
        ),
        "final",
        ["WantFailed"],
    ),
    ("external, not announced: wait", state(external=True), "wait_external", ["WantWaitingExternal"]),
    (
        "already final: answered again, nothing recorded",
        state(live("a/1"), want_state=WantState.successful, seq=3),
        "final",
        [],
    ),
    (
        "a step decided before (retried activity): the same answer, nothing recorded",
        state(
            part("a/1", PartitionStatus.missing, building="jr-mine"),
            want_state=WantState.building,
            seq=2,
            following="jr-mine",
            relation="executed",
        ),
        "execute",
        [],
    ),
    (
        "a redecide while its own run still builds: follow it, nothing recorded",
        state(
            part("a/1", PartitionStatus.missing, building="jr-mine"),
            want_state=WantState.building,
            seq=1,
            following="jr-mine",
            relation="delegated",
        ),
        "delegate",
        [],
    ),
    (
        "a blocked step decided before: blocked again on what is still locked",
        state(
            part("b/1", PartitionStatus.failed),
            want_state=WantState.upstream_building,
            seq=2,
            reason="b/1 is fail-locked",
        ),
        "blocked",
        [],
    ),
]


CASES += [
    (
        "a declared input missing: want it first, no run, nothing recorded",
        state(declared={"in/1": None, "in/2": live("in/2")}),
        "needs_inputs",
        [],
    ),
    (
        "every declared input live: execute",
        state(declared={"in/1": live("in/1")}),
        "execute",
        ["JobRunQueued", *["PartitionBuilding"] * 3, "WantBuilding"],
    ),
    (
        "a declared input missing but an output building: delegate (the run wants its inputs)",
        state(part("b/1", PartitionStatus.missing, building="jr-b"), declared={"in/1": None}),
        "delegate",
        ["Delegation"] * 3 + ["WantBuilding"],
    ),
    (
        "a declared input missing, the outputs live: done",
        state(live("a/1"), live("b/1"), live("c/1"), declared={"in/1": None}),
        "live",
        ["Delegation"] * 3 + ["JobRunSkipped", "WantSucceeded"],
    ),
    (
        "a declared input tainted: want it again",
        state(declared={"in/1": part("in/1", PartitionStatus.tainted)}),
        "needs_inputs",
        [],
    ),
]


def test_declared_inputs_not_live_are_named() -> None:
    decided = d.decide(state(declared={"in/2": None, "in/1": part("in/1", PartitionStatus.failed)}), 1, "jr")
    assert decided.verdict == d.NeedsInputs(missing=["in/1", "in/2"])


@pytest.mark.parametrize(("why", "given", "kind", "recorded"), CASES, ids=[c[0] for c in CASES])
def test_decision(why: str, given: d.DecisionState, kind: str, recorded: list[str]) -> None:
    decided = d.decide(given, 2, "jr-new")
    assert decided.verdict.kind == kind, why
    assert types(decided) == recorded, why


@pytest.mark.parametrize(
    "given",
    [
        state(opening=2),
        state(live("a/1"), live("b/1"), live("c/1"), opening=2),
        state(part("b/1", PartitionStatus.missing, building="jr-b"), opening=2),
        state(live("a/1"), want_state=WantState.failed, seq=3, opening=2, reason="boom"),  # ended again
    ],
    ids=["execute", "live", "delegate", "final"],
)
def test_a_run_a_retry_replaced_decides_nothing(given: d.DecisionState) -> None:
    """A run that serves an older opening than the want's is told the want's opening and records nothing,
    whatever it would have decided; a run of the want's opening (or no run's step) decides as usual."""
    assert given.want.opening == 2
    replaced = d.decide(given, 4, "jr-new", opening=1)
    assert replaced.verdict == d.Replaced(opening=2) and replaced.events == []
    usual = d.decide(replace(given, want=replace(given.want, opening=0)), 4, "jr-new")
    for opening in (2, None):
        same = d.decide(given, 4, "jr-new", opening=opening)
        assert same.verdict == usual.verdict and same.events == usual.events
        assert same.verdict.kind != "replaced"


def test_execute_claims_every_output_for_the_new_run() -> None:
    decided = d.decide(state(), 1, "jr-new")
    assert isinstance(decided.verdict, d.Execute)
    assert decided.verdict.job_run_id == "jr-new" and decided.verdict.outputs == ["a/1", "b/1", "c/1"]
    claimed = [e.ref for e in decided.events if isinstance(e, ev.PartitionBuilding)]
    assert claimed == ["a/1", "b/1", "c/1"]


def test_historical_delegation_points_at_the_builds_that_made_each_output() -> None:
    decided = d.decide(state(live("a/1", "jr-1"), live("b/1", "jr-2"), live("c/1", "jr-2")), 1, "jr-new")
    assert isinstance(decided.verdict, d.Live) and decided.verdict.job_run_id == "jr-1"
    assert [(e.ref, e.delegated_to) for e in decided.events if isinstance(e, ev.Delegation)] == [
        ("a/1", "jr-1"),
        ("b/1", "jr-2"),
        ("c/1", "jr-2"),
    ]


def test_fail_lock_reason_names_the_run_and_the_fix() -> None:
    given = state(
        part("a/1", PartitionStatus.failed), fail_locks={"a/1": d.FailLock(job_run_id="jr-x", reason="boom")}
    )
    verdict = d.decide(given, 1, "jr-new").verdict
    assert isinstance(verdict, d.Blocked)
    assert verdict.reason == "a/1 is fail-locked (job run jr-x: boom); clear it with `databuild resolve a/1`"


# A run's outcome -------------------------------------------------------------------------------------
RUN = d.OpenRun(job_run_id="jr-1", locked_outputs=["a/1", "b/1"])


@pytest.mark.parametrize(
    ("cause", "state_after", "partition_event"),
    [
        (JobRunCause.error, "failed", "PartitionFailed"),
        (JobRunCause.cancelled, "cancelled", "PartitionFailed"),
        (JobRunCause.abandoned, "cancelled", "PartitionReleased"),
        (JobRunCause.lost, "cancelled", "PartitionReleased"),
    ],
)
def test_a_run_that_ends_without_output(cause: JobRunCause, state_after: str, partition_event: str) -> None:
    events = d.ended_without_output(RUN, "why", cause)
    assert [e.type for e in events] == ["JobRunFailed", partition_event, partition_event]
    assert isinstance(events[0], ev.JobRunFailed) and events[0].cause.state.value == state_after


def test_success_publishes_each_instance_and_dep_miss_releases() -> None:
    writes = [InstanceRef(ref="a/1", instance_id="i-a"), InstanceRef(ref="b/1", instance_id="i-b")]
    assert [e.type for e in d.succeeded(RUN, [], writes)] == [
        "JobRunSucceeded",
        "PartitionLive",
        "PartitionLive",
    ]
    missed = d.dep_missed(RUN, ["x/1", "x/1", "w/1"], [])
    assert [e.type for e in missed] == ["JobRunDepMiss", "PartitionReleased", "PartitionReleased"]
    assert isinstance(missed[0], ev.JobRunDepMiss) and missed[0].missing == ["w/1", "x/1"]


def test_legacy_failure_events_read_with_their_cause() -> None:
    def read(data: dict[str, object]) -> JobRunCause:
        return ev.JobRunFailed.model_validate({"type": "JobRunFailed", "job_run_id": "jr-1", **data}).cause

    assert read({"reason": "boom"}) is JobRunCause.error
    assert read({"reason": "x", "lost": True}) is JobRunCause.lost
    assert read({"reason": ev.ABANDONED_REASON, "lost": False}) is JobRunCause.abandoned
    assert read({"reason": ev.CANCELLED_REASON}) is JobRunCause.cancelled


# Operator actions ------------------------------------------------------------------------------------
def test_resolve_clears_the_siblings_that_failed_with_it() -> None:
    partitions = {
        "a/1": part("a/1", PartitionStatus.failed),
        "b/1": part("b/1", PartitionStatus.failed),
        "c/1": live("c/1"),
    }
    assert [e.ref for e in d.resolve("a/1", partitions)] == ["a/1", "b/1"]
    with pytest.raises(InvalidTransitionError, match="only a failed"):
        d.resolve("c/1", partitions)


def test_skip_refuses_a_building_or_retired_partition() -> None:
    assert [e.type for e in d.skip("a/1", None)] == ["PartitionSkipped"]
    with pytest.raises(InvalidTransitionError, match="being built"):
        d.skip("a/1", part("a/1", PartitionStatus.missing, building="jr-1"))
    with pytest.raises(InvalidTransitionError, match="already retired"):
        d.skip("a/1", part("a/1", PartitionStatus.skipped))


# Properties over random interleavings ----------------------------------------------------------------
class InMemoryLog:
    """An in-memory BEL for the rules: partitions, the runs building them, and wants, updated by the
    events the rules return (the projector's rules, reduced to what decisions read)."""

    def __init__(self) -> None:
        self.partitions: dict[str, Partition] = {}
        self.runs: dict[str, d.RunPlan] = {}
        self.open: set[str] = set()
        self.wants: dict[str, d.WantStep] = {}
        self.next = 0

    def project(self, event: ev.Event) -> None:
        match event:
            case ev.PartitionBuilding(ref=ref, job_run_id=run):
                held = self.partitions.get(ref)
                assert held is None or held.building_job_run_id is None, f"two active builds of {ref}"
                self.partitions[ref] = replace_part(held, ref, building=run)
            case ev.PartitionLive(ref=ref, instance_id=instance, job_run_id=run):
                self.partitions[ref] = part(ref, PartitionStatus.live, instance=instance, built_by=run)
            case ev.PartitionReleased(ref=ref):
                self.partitions[ref] = replace_part(self.partitions.get(ref), ref, building=None)
            case ev.PartitionFailed(ref=ref):
                current = self.partitions.get(ref)
                if current is not None and current.status is PartitionStatus.live:
                    self.partitions[ref] = replace_part(current, ref, building=None)
                else:
                    self.partitions[ref] = part(ref, PartitionStatus.failed)
            case ev.PartitionResolved(ref=ref):
                self.partitions[ref] = part(ref, PartitionStatus.missing)

    def decide(self, want_id: str, n: int) -> d.Decided:
        want = self.wants.setdefault(
            want_id, d.WantStep(want_id=want_id, ref=f"a/{n}", state=WantState.new, decision_seq=0)
        )
        t = target(n)
        parts = {out: self.partitions.get(out) for out in t.outputs}
        building = {p.building_job_run_id for p in parts.values() if p and p.building_job_run_id}
        given = d.DecisionState(
            want=want,
            target=t,
            partitions=parts,
            runs={r: self.runs[r] for r in building},
            fail_locks={
                o: d.FailLock("jr-?", "boom")
                for o, p in parts.items()
                if p and p.status is PartitionStatus.failed
            },
        )
        self.next += 1
        decided = d.decide(given, want.decision_seq + 1, f"jr-{self.next}")
        for event in decided.events:
            self.project(event)
        if isinstance(decided.verdict, d.Execute):
            self.runs[decided.verdict.job_run_id] = decided.verdict
            self.open.add(decided.verdict.job_run_id)
        if decided.events:
            self.wants[want_id] = replace(want, decision_seq=want.decision_seq + 1)
        return decided

    def end(self, index: int, how: Callable[[d.OpenRun], list[ev.Event]]) -> None:
        if not self.open:
            return
        job_run_id = sorted(self.open)[index % len(self.open)]
        self.open.discard(job_run_id)
        locked = [r for r, p in self.partitions.items() if p.building_job_run_id == job_run_id]
        for event in how(d.OpenRun(job_run_id=job_run_id, locked_outputs=locked)):
            self.project(event)


def replace_part(current: Partition | None, ref: str, *, building: str | None) -> Partition:
    base = current or part(ref, PartitionStatus.missing)
    return base.model_copy(update={"building_job_run_id": building})


def outcome(kind: str, run: d.OpenRun) -> list[ev.Event]:
    if kind == "succeed":
        writes = [InstanceRef(ref=r, instance_id=f"{r}@{run.job_run_id}") for r in run.locked_outputs]
        return d.succeeded(run, [], writes)
    if kind == "dep_miss":
        return d.dep_missed(run, ["x/1"], [])
    return d.ended_without_output(run, "why", JobRunCause(kind))


steps = st.lists(
    st.one_of(
        st.tuples(st.just("decide"), st.integers(0, 7), st.integers(1, 3)),
        st.tuples(
            st.sampled_from(["succeed", "dep_miss", "error", "cancelled", "abandoned", "lost"]),
            st.integers(0, 7),
            st.just(0),
        ),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_never_two_active_builds_and_never_execute_and_delegate_at_once(
    plan_: list[tuple[str, int, int]],
) -> None:
    model = InMemoryLog()
    for kind, a, b in plan_:
        if kind != "decide":
            model.end(a, lambda run, kind=kind: outcome(kind, run))
            continue
        decided = model.decide(f"w-{a}-{b}", b)
        recorded = types(decided)
        delegated = [e for e in decided.events if isinstance(e, ev.Delegation) and e.kind == "active"]
        assert not ("JobRunQueued" in recorded and delegated), "a decision both executed and delegated"
        if isinstance(decided.verdict, d.Execute) and decided.events:
            assert recorded.count("PartitionBuilding") == 3
        if isinstance(decided.verdict, d.Delegate) and decided.events:
            assert decided.verdict.job_run_id in model.open
        if isinstance(decided.verdict, d.Live):
            assert model.partitions[f"a/{b}"].status is PartitionStatus.live
        # The invariant itself: each ref is held by at most one open run, and only by an open one.
        for ref, held in model.partitions.items():
            assert held.building_job_run_id is None or held.building_job_run_id in model.open, ref


# How a want ends and opens again (databuild.domain.endings). -----------------------------------------
@pytest.mark.parametrize(
    ("current", "opening", "run_opening", "finished"),
    [
        (WantState.building, 0, 0, "recorded"),  # the run of a want no retry reopened
        (WantState.building, 2, 2, "recorded"),  # the run a retry started
        # Its decision step is behind the BEL's decision_seq (its workflow task timed out after its
        # decision committed, and the run never heard of it): still its own run, as only a reopen replaces
        # one. A finish carries no step for this reason.
        pytest.param(WantState.building, 1, 1, "recorded", id="a-decision-the-run-never-heard-of"),
        (WantState.failed, 1, 1, "already"),  # a retried finish: a repeat
        # An outside authority (the repair of a want whose workflow ended unheard, an operator's cancel)
        # is never stale, at any opening.
        (WantState.building, 0, None, "recorded"),
        (WantState.new, 3, None, "recorded"),
        (WantState.failed, 3, None, "already"),
        # A run at an older opening: the want was reopened since, and the old run's finish is history ...
        (WantState.new, 1, 0, "stale"),
        (WantState.building, 3, 1, "stale"),
        # ... whether the want is open again or has ended again since: still not the old run's to tell.
        (WantState.failed, 1, 0, "stale"),
        (WantState.successful, 2, 1, "stale"),
        (WantState.canceled, 2, 0, "stale"),
    ],
)
def test_a_finish_records_once_and_never_from_a_run_a_retry_replaced(
    current: WantState, opening: int, run_opening: int | None, finished: str
) -> None:
    assert endings.replaced(opening, run_opening) == (finished == "stale")
    ending = endings.finish("w-1", current, opening, WantState.failed, reason="boom", run_opening=run_opening)
    assert ending.finished == finished
    expected = [ev.WantFinished(type="WantFailed", want_id="w-1", state=WantState.failed, reason="boom")]
    assert ending.events == (expected if finished == "recorded" else [])


def test_only_a_final_state_finishes_a_want() -> None:
    with pytest.raises(InvalidTransitionError, match="building is not a final want state"):
        endings.finish("w-1", WantState.new, 0, WantState.building)


@pytest.mark.parametrize("current", list(WantState))
def test_a_retry_reopens_only_failed_or_canceled_wants_as_their_next_step(current: WantState) -> None:
    events = endings.reopen("w-1", current, 6)
    if current in (WantState.failed, WantState.canceled):
        assert events == [ev.WantRetried(want_id="w-1", was=current, decision_seq=7)]
    else:
        assert events == []
