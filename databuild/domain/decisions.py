"""The rules of delegation and of a build's lifecycle, as pure functions.

Each takes the typed state a command read inside its transaction and returns the events to append
(and, for a want's decision, the verdict the want follows). The BEL store loads that state, calls the
rule and appends the events; nothing here touches a database, a clock or Temporal, so every rule is
tested on its own (tests/test_decisions.py).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import ConfigDict

from databuild.domain import checks as check_rules
from databuild.domain import endings, freshness
from databuild.domain import events as ev
from databuild.domain.freshness import Freshness
from databuild.errors import ConcurrentChangeError, InvalidInputError, InvalidTransitionError
from databuild.graph import JobTarget
from databuild.models import (
    CheckResult,
    InstanceFacts,
    InstanceRef,
    JobRunCause,
    JobRunState,
    Model,
    Partition,
    PartitionStatus,
    WantState,
    job_run_workflow_id,
)


# Verdicts: what a want does after a decision. --------------------------------------------------------
class _Verdict(Model):
    # Histories of running workflows carry the one flat Decision model verdicts replaced: each verdict
    # reads its own fields from such a payload and ignores the others.
    model_config = ConfigDict(frozen=True, extra="ignore")


class Live(_Verdict):
    """Done: the want's partition is live (fulfilled now, or by the build that made it)."""

    kind: Literal["live"] = "live"
    instance_id: str
    job_run_id: str | None = None


class RunPlan(_Verdict):
    """A job run the want follows."""

    job_run_id: str
    job_label: str
    outputs: list[str]
    params: dict[str, str]
    members: int = 1  # partitions it builds (more than one in a batch)


class Execute(RunPlan):
    """A new job run was queued for the want: it starts the run."""

    kind: Literal["execute"] = "execute"


class Delegate(RunPlan):
    """Another active run builds the partition (or a queued batch run took it): the want waits for it."""

    kind: Literal["delegate"] = "delegate"
    batch_full: bool = False  # the partition was the last a queued batch run had room for


class WaitExternal(_Verdict):
    """The ref is external and not announced yet."""

    kind: Literal["wait_external"] = "wait_external"


class Blocked(_Verdict):
    """An output is fail-locked: the want waits for `databuild resolve`."""

    kind: Literal["blocked"] = "blocked"
    blocked_refs: list[str]
    reason: str


class NeedsInputs(_Verdict):
    """Inputs the job declares are not live: the want starts derivative wants for them, waits, and
    decides again (no job run, so no dep-miss round trip)."""

    kind: Literal["needs_inputs"] = "needs_inputs"
    missing: list[str]


class Paused(_Verdict):
    """A backfill that needs the want is paused (every open want that needs it is paused with it): it
    decides nothing new until it is resumed."""

    kind: Literal["paused"] = "paused"


class Final(_Verdict):
    """The want has ended (now, or before)."""

    kind: Literal["final"] = "final"
    final_state: WantState
    reason: str | None = None
    instance_id: str | None = None


class Replaced(_Verdict):
    """The deciding run serves an opening of the want that a retry has since replaced: it decides
    nothing, and a run that still goes on carries on as the want's ``opening``."""

    kind: Literal["replaced"] = "replaced"
    opening: int


Verdict = Live | Execute | Delegate | WaitExternal | Blocked | NeedsInputs | Paused | Final | Replaced


class DependenciesStatus(Model):
    """Of a dep-missed want's missing inputs: those live, and those whose derivative want ended without
    them (ref -> why)."""

    live: list[str]
    failed: dict[str, str]


# What a decision reads. ------------------------------------------------------------------------------
@dataclass(frozen=True)
class FailLock:
    """The failure that fail-locked a ref."""

    job_run_id: str | None  # None: a check re-run on its live instance failed
    reason: str


@dataclass(frozen=True)
class WantStep:
    """A want as its decision needs it."""

    want_id: str
    ref: str
    state: WantState
    decision_seq: int
    opening: int = 0  # 0, and one more with each retry that reopened it (``endings``)
    job_run_id: str | None = None  # the run it follows or last followed
    reason: str | None = None
    relation: str | None = None  # to ``job_run_id``: executed or delegated
    runs: frozenset[str] = frozenset()  # every job run it executed, joined or skipped


@dataclass(frozen=True)
class DecisionState:
    """What one decision of a want reads, in its transaction."""

    want: WantStep
    target: JobTarget | None  # None: the ref is external
    partitions: Mapping[str, Partition | None]  # each output of the target (or the ref alone)
    runs: Mapping[str, RunPlan] = field(default_factory=dict)  # runs building an output, and the want's
    fail_locks: Mapping[str, FailLock] = field(default_factory=dict)  # of the fail-locked outputs
    declared: Mapping[str, Partition | None] = field(default_factory=dict)  # the job's declared inputs
    batch: RunPlan | None = None  # a queued run of the batch job that the partition may join
    paused: bool = False  # a paused backfill reaches the want (``databuild.domain.reach``)
    fresh: Freshness | None = None  # of a fresh want whose partition is live (``databuild.domain.freshness``)

    @property
    def outputs(self) -> list[str]:
        return self.target.outputs if self.target is not None else [self.want.ref]

    def status(self, ref: str) -> PartitionStatus:
        row = self.partitions.get(ref)
        return row.status if row is not None else PartitionStatus.missing

    def with_status(self, status: PartitionStatus) -> list[str]:
        return [out for out in self.outputs if self.status(out) is status]


@dataclass(frozen=True)
class Decided:
    verdict: Verdict
    events: list[ev.Event] = field(default_factory=list)


# A want's decision, after its inputs are known. -------------------------------------------------------
def decide(state: DecisionState, seq: int, new_job_run_id: str, opening: int | None = None) -> Decided:
    """Decide step ``seq`` of a want, for a run that serves its ``opening``: done (historical delegation),
    wait for an active run (active delegation), fail or wait on a fail-lock, wait for an external
    announcement, want the job's declared inputs first, or queue a new job run (``new_job_run_id``); while
    a paused backfill reaches it, nothing new. A step already decided is answered again, with nothing to
    record; a run that a retry replaced is told so, with nothing recorded."""
    want = state.want
    if endings.replaced(want.opening, opening):
        return Decided(Replaced(opening=want.opening))
    if want.state.is_final:
        own = state.partitions.get(want.ref)
        return Decided(Final(final_state=want.state, reason=want.reason, instance_id=_instance(own)))
    if want.decision_seq >= seq:
        return Decided(_decided_before(state))
    own = state.partitions.get(want.ref)
    live = own if own is not None and own.status is PartitionStatus.live and own.instance_id else None
    if live is not None and not freshness.rebuilds(state.fresh, live, want.runs):
        return _accept(state, live, new_job_run_id)
    if state.paused and not _follows_its_run(state):
        return Decided(Paused())  # a run it follows still goes on: it keeps following that
    retired = state.with_status(PartitionStatus.skipped)
    if retired:
        reason = f"{', '.join(retired)} retired with `databuild skip`; it is never built again"
        return _fail(want.want_id, reason)
    target = state.target
    if target is None:
        return Decided(WaitExternal(), [ev.WantWaitingExternal(want_id=want.want_id, decision_seq=seq)])
    active = next((p.building_job_run_id for p in _rows(state) if p.building_job_run_id), None)
    if active is not None and active == want.job_run_id:
        return Decided(_decided_before(state))  # still following its own run
    if active is not None:
        return _delegate(state, active, seq)
    locked = state.with_status(PartitionStatus.failed)
    if locked and any(state.fail_locks[r].job_run_id in want.runs for r in locked if r in state.fail_locks):
        # The want ran or joined the build that failed: it ends failed, however late it heard.
        return _fail(want.want_id, fail_lock_reason(locked, state.fail_locks))
    if locked:
        reason = fail_lock_reason(locked, state.fail_locks)
        blocked = ev.WantBlocked(want_id=want.want_id, refs=locked, reason=reason, decision_seq=seq)
        return Decided(Blocked(blocked_refs=locked, reason=reason), [blocked])
    missing = [
        ref for ref, row in state.declared.items() if row is None or row.status is not PartitionStatus.live
    ]
    if live is not None:  # a fresh want rebuilds its stale partition: its stale inputs first
        missing += freshness.stale_inputs(state.fresh, live)
    if missing:
        return Decided(NeedsInputs(missing=sorted(set(missing))))
    if state.batch is not None:
        return _join(state, target, state.batch, seq)
    return _execute(state, target, new_job_run_id, seq)


def _accept(state: DecisionState, own: Partition, skipped_run_id: str) -> Decided:
    """Historical delegation: the want is fulfilled by the live instance (a fresh want's reason says why
    it accepts one that is stale)."""
    assert own.instance_id is not None
    reason = freshness.accepted(state.fresh, own, state.want.runs)
    events = _historical(state, skipped_run_id)
    events.append(_finished(state.want.want_id, WantState.successful, reason, own.instance_id))
    return Decided(Live(instance_id=own.instance_id, job_run_id=own.built_by), events)


def _follows_its_run(state: DecisionState) -> bool:
    """The want follows a run that still builds one of its outputs."""
    run = state.want.job_run_id
    return run is not None and any(p.building_job_run_id == run for p in _rows(state))


def _rows(state: DecisionState) -> list[Partition]:
    return [row for out in state.outputs if (row := state.partitions.get(out)) is not None]


def _instance(row: Partition | None) -> str | None:
    return row.instance_id if row is not None else None


def _finished(
    want_id: str, state: WantState, reason: str | None = None, instance_id: str | None = None
) -> ev.WantFinished:
    return ev.WantFinished(
        type=ev.FINISH_EVENT_TYPE[state], want_id=want_id, state=state, reason=reason, instance_id=instance_id
    )


def _fail(want_id: str, reason: str) -> Decided:
    final = Final(final_state=WantState.failed, reason=reason)
    return Decided(final, [_finished(want_id, WantState.failed, reason=reason)])


def _decided_before(state: DecisionState) -> Verdict:
    """The answer already given for this step (its activity was retried after the commit)."""
    want = state.want
    if want.job_run_id is None:  # it waited without a run: on an announcement, or on a fail-lock
        if state.target is None:
            return WaitExternal()
        return Blocked(blocked_refs=state.with_status(PartitionStatus.failed), reason=want.reason or "")
    plan = state.runs[want.job_run_id]
    if want.relation == "executed":
        return Execute(**plan.model_dump(exclude={"kind"}))
    return Delegate(**plan.model_dump(exclude={"kind"}))


def _historical(state: DecisionState, skipped_run_id: str) -> list[ev.Event]:
    """Historical delegation: the want's partition is live. When every output of its job is live, the
    job is skipped (a Delegation per output to the run that built it, and JobRunSkipped); when some
    sibling output is not, nothing was skipped: the want is fulfilled by its own partition's build alone
    (one Delegation), and the siblings are built when someone wants them."""
    target = state.target
    if target is None:
        return []
    every_output_live = all(state.status(out) is PartitionStatus.live for out in target.outputs)
    refs = target.outputs if every_output_live else [state.want.ref]
    events: list[ev.Event] = [
        ev.Delegation(
            want_id=state.want.want_id,
            ref=row.ref,
            delegated_to=row.built_by,
            kind="historical",
            message="delegated to historical build: partition already available",
        )
        for ref in refs
        if (row := state.partitions.get(ref)) is not None and row.built_by
    ]
    if every_output_live:
        events.append(ev.JobRunSkipped(**_declared(target, skipped_run_id, state.want.want_id)))
    return events


def _delegate(state: DecisionState, active: str, seq: int) -> Decided:
    want_id = state.want.want_id
    events: list[ev.Event] = [
        ev.Delegation(
            want_id=want_id, ref=out, delegated_to=active, kind="active", message="delegated to active build"
        )
        for out in state.outputs
    ]
    events.append(ev.WantBuilding(want_id=want_id, job_run_id=active, relation="delegated", decision_seq=seq))
    return Decided(Delegate(**state.runs[active].model_dump(exclude={"kind"})), events)


def _execute(state: DecisionState, target: JobTarget, job_run_id: str, seq: int) -> Decided:
    want_id = state.want.want_id
    events: list[ev.Event] = [
        ev.JobRunQueued(**_declared(target, job_run_id, want_id), batch=target.job.batch)
    ]
    events += [ev.PartitionBuilding(ref=out, job_run_id=job_run_id) for out in target.outputs]
    events.append(
        ev.WantBuilding(want_id=want_id, job_run_id=job_run_id, relation="executed", decision_seq=seq)
    )
    plan = Execute(
        job_run_id=job_run_id, job_label=target.job.label, outputs=target.outputs, params=target.params
    )
    return Decided(plan, events)


def _join(state: DecisionState, target: JobTarget, run: RunPlan, seq: int) -> Decided:
    """Batching: the partition joins a queued run of its job, which then builds it with the others."""
    want_id = state.want.want_id
    events: list[ev.Event] = [
        ev.JobRunJoined(
            job_run_id=run.job_run_id, want_id=want_id, params=target.params, outputs=target.outputs
        )
    ]
    events += [ev.PartitionBuilding(ref=out, job_run_id=run.job_run_id) for out in target.outputs]
    events.append(
        ev.WantBuilding(want_id=want_id, job_run_id=run.job_run_id, relation="batched", decision_seq=seq)
    )
    plan = Delegate(
        **run.model_dump(exclude={"kind", "outputs"}),
        outputs=[*run.outputs, *target.outputs],
        batch_full=run.members + 1 >= (target.job.batch or 0),
    )
    return Decided(plan, events)


def _declared(target: JobTarget, job_run_id: str, want_id: str) -> dict[str, object]:
    return {
        "job_run_id": job_run_id,
        "job_label": target.job.label,
        "outputs": target.outputs,
        "params": target.params,
        "want_id": want_id,
        "workflow_id": job_run_workflow_id(target.job.label, job_run_id),
    }


def fail_lock_reason(refs: Sequence[str], fail_locks: Mapping[str, FailLock]) -> str:
    parts = []
    for ref in refs:
        lock = fail_locks.get(ref)
        by = f"job run {lock.job_run_id}" if lock and lock.job_run_id else "a check"
        cause = f" ({by}: {lock.reason})" if lock else ""
        parts.append(f"{ref} is fail-locked{cause}")
    return "; ".join(parts) + f"; clear it with `databuild resolve {refs[0]}`"


# A job run's outcome. --------------------------------------------------------------------------------
@dataclass(frozen=True)
class OpenRun:
    """A job run that has not ended, and the outputs whose build lock it still holds."""

    job_run_id: str
    locked_outputs: list[str]


def succeeded(
    run: OpenRun,
    reads: list[InstanceRef],
    writes: list[InstanceRef],
    locations: Mapping[str, str] | None = None,
    inputs_of: dict[str, list[str]] | None = None,
    facts: Mapping[str, InstanceFacts] | None = None,
    checks: Mapping[str, Sequence[CheckResult]] | None = None,
    job_version: str | None = None,
) -> list[ev.Event]:
    """Publishing is this commit: each written instance becomes its partition's live instance, at its
    location (by ref), with the facts the job recorded of it and the results of its checks (``checks``,
    by ref: none of them blocking failures), built by ``job_version`` of its job. ``inputs_of``: of a
    batch, which reads each output was built from."""
    if blocking := check_rules.blocking_failures(checks or {}):
        raise InvalidInputError(
            f"job run {run.job_run_id} cannot publish: {check_rules.failure_reason(blocking)}"
        )
    events: list[ev.Event] = [
        ev.JobRunSucceeded(job_run_id=run.job_run_id, reads=reads, writes=writes, inputs_of=inputs_of)
    ]
    for out in writes:
        if out.instance_id is None:
            raise InvalidInputError(f"job run {run.job_run_id} wrote {out.ref} without an instance id")
        location = (locations or {}).get(out.ref)
        events.append(
            ev.PartitionLive(
                ref=out.ref,
                instance_id=out.instance_id,
                job_run_id=run.job_run_id,
                location=location,
                facts=(facts or {}).get(out.ref),
                job_version=job_version,
            )
        )
    return events + check_rules.checked(run.job_run_id, writes, checks or {})


def dep_missed(
    run: OpenRun,
    missing: Sequence[str],
    reads: list[InstanceRef],
    missing_for: dict[str, list[str]] | None = None,
) -> list[ev.Event]:
    """The job needs inputs that are not live: its outputs are released for the build after them.
    ``missing_for``: of a batch, the missing inputs each output's want waits for."""
    events: list[ev.Event] = [
        ev.JobRunDepMiss(
            job_run_id=run.job_run_id, missing=sorted(set(missing)), reads=reads, missing_for=missing_for
        )
    ]
    events += [ev.PartitionReleased(ref=out, job_run_id=run.job_run_id) for out in run.locked_outputs]
    return events


def ended_without_output(run: OpenRun, reason: str, cause: JobRunCause) -> list[ev.Event]:
    """A run that ended without building: a broken or cancelled build fail-locks its outputs (an
    operator resolves them); one nobody wanted any more (abandoned) or whose worker was lost releases them
    for the next build, since nothing is wrong with them."""
    events: list[ev.Event] = [ev.JobRunFailed(job_run_id=run.job_run_id, reason=reason, cause=cause)]
    for out in run.locked_outputs:
        if cause.releases_outputs:
            events.append(ev.PartitionReleased(ref=out, job_run_id=run.job_run_id))
        else:
            events.append(ev.PartitionFailed(ref=out, job_run_id=run.job_run_id, reason=reason))
    return events


def started(
    job_run_id: str,
    state: JobRunState,
    outputs: Sequence[str],
    attempt: int,
    worker: str,
    instances: Sequence[InstanceRef],
) -> list[ev.Event]:
    """An attempt starts, with the instance each output will be written to; a run that ended is left
    as it is (a retried activity)."""
    if state.is_final:
        return []
    if instances and {i.ref for i in instances} != set(outputs):
        # A batch that took another partition after the caller read it: read it again.
        raise ConcurrentChangeError(
            f"job run {job_run_id} now builds {', '.join(outputs)}; plan its instances again"
        )
    return [
        ev.JobRunStarted(job_run_id=job_run_id, attempt=attempt, worker=worker, instances=list(instances))
    ]


def unwanted(run: OpenRun | None, state: JobRunState, waiting: int) -> list[ev.Event]:
    """A run that has not started and that no open want needs (``waiting``: the open wants on it) ends
    abandoned; any other is left as it is."""
    if run is None or state is not JobRunState.queued or waiting:
        return []
    return ended_without_output(run, ev.ABANDONED_REASON, JobRunCause.abandoned)


# Operator actions. -----------------------------------------------------------------------------------
def resolve(ref: str, partitions: Mapping[str, Partition | None]) -> list[ev.PartitionResolved]:
    """Clear the fail-lock on ``ref`` and on the outputs its failed run fail-locked with it
    (``partitions``: ``ref`` and those siblings)."""
    own = partitions.get(ref)
    status = own.status if own is not None else PartitionStatus.missing
    if status is not PartitionStatus.failed:
        raise InvalidTransitionError(
            f"{ref} is {status.value}; only a failed (fail-locked) partition can be resolved"
        )
    return [
        ev.PartitionResolved(ref=out)
        for out, row in sorted(partitions.items())
        if row is not None and row.status is PartitionStatus.failed
    ]


def skip(ref: str, partition: Partition | None) -> list[ev.Event]:
    """Retire ``ref``: it is never built again, and wants for it fail."""
    if partition is not None and partition.building_job_run_id:
        raise InvalidTransitionError(
            f"{ref} is being built by job run {partition.building_job_run_id}; skip it after that run ends"
        )
    if partition is not None and partition.status is PartitionStatus.skipped:
        raise InvalidTransitionError(f"{ref} is already retired")
    return [ev.PartitionSkipped(ref=ref)]
