"""Which events the commands about a want append: creating it, waiting for its inputs,
flagging its SLA, cancelling it. Its decision steps are ``decisions``; how it ends, ``endings``.

Each rule takes what its command read inside its transaction (a want's state, its inputs' partitions)
and returns the events to append, so it is tested without a database (tests/test_domain_wants.py)."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from databuild.domain import events as ev
from databuild.domain.decisions import DependenciesStatus
from databuild.domain.endings import reopen, replaced
from databuild.errors import ConcurrentChangeError, WantReplacedError
from databuild.models import Model, Partition, PartitionStatus, Want, WantSpec, WantState


class WantStart(Model):
    """A want whose workflow run is to start, and the opening of it that run serves: 0 for a want no retry
    has reopened (a run started for an older opening than the want's carries on as the newer one)."""

    spec: WantSpec
    opening: int = 0

    @classmethod
    def of(cls, want: Want) -> "WantStart":
        """The run of a recorded want, for its opening now."""
        return cls(spec=want.spec, opening=want.opening)


@dataclass(frozen=True)
class WantRow:
    """A want as the rules read it."""

    state: WantState
    reason: str | None = None
    decision_seq: int = 0
    opening: int = 0


def created(spec: WantSpec, known: bool) -> list[ev.Event]:
    """Record the want unless it is ``known`` (registering is idempotent)."""
    if known:
        return []
    return [ev.WantCreated(want_id=spec.want_id, spec=spec, workflow_id=spec.workflow_id)]


def canceled(want_id: str, reason: str) -> ev.WantFinished:
    return ev.WantFinished(
        type=ev.FINISH_EVENT_TYPE[WantState.canceled],
        want_id=want_id,
        state=WantState.canceled,
        reason=reason,
    )


def cancel(want_id: str, current: WantState, reason: str) -> list[ev.Event]:
    """End the want `canceled`, unless it has ended."""
    return [] if current.is_final else [canceled(want_id, reason)]


def await_requirements(want_id: str, current: WantState, refs: Sequence[str]) -> list[ev.Event]:
    """A new want waits for the external partitions it requires; a want past that step is left alone."""
    if current is not WantState.new:
        return []
    return [ev.WantAwaitingRequirements(want_id=want_id, refs=list(refs))]


def sla_missed(want_id: str, flagged: bool, deadline: datetime) -> list[ev.Event]:
    return [] if flagged else [ev.WantSlaMissed(want_id=want_id, deadline=deadline)]


def sla_at_risk(
    want_id: str, state: WantState, flagged: bool, deadline: datetime, eta: datetime, slowest_step: str | None
) -> list[ev.Event]:
    """Raise the at-risk flag of a want that has not ended, once."""
    if flagged or state.is_final:
        return []
    return [ev.WantSlaAtRisk(want_id=want_id, deadline=deadline, eta=eta, slowest_step=slowest_step)]


@dataclass(frozen=True)
class Dependencies:
    """What ``await_dependencies`` reads: the want, the inputs it misses with the taint count each had
    when its derivative want was named, their partitions now, and those derivatives (``known``: the
    ones recorded already, by want id)."""

    want_id: str
    job_run_id: str | None  # the dep-miss run that found the inputs missing (None: declared inputs)
    state: WantState
    following: str | None  # the run the want follows now
    missing: Sequence[str]
    generations: Mapping[str, int]
    partitions: Mapping[str, Partition | None]
    derivatives: Sequence[WantSpec]
    known: Mapping[str, WantRow]
    opening: int = 0  # the want's, now
    run_opening: int | None = None  # the one the asking workflow run serves (``endings.replaced``)


@dataclass(frozen=True)
class Awaited:
    events: list[ev.Event]
    status: DependenciesStatus
    unfinished: list[WantStart]  # derivative wants that have not ended, to start
    reopened: list[WantStart] = field(default_factory=list)  # of those, the ones reopened here


def _available(deps: Dependencies) -> list[str]:
    """The inputs the want need not wait for: live ones; of a fresh want, those whose fresh derivative
    ended successful too (a stale live input is what it waits to have rebuilt)."""
    fresh = {d.ref: d.want_id for d in deps.derivatives if d.fresh}

    def available(ref: str) -> bool:
        partition = deps.partitions.get(ref)
        if partition is None or partition.status is not PartitionStatus.live:
            return False
        row = deps.known.get(fresh[ref]) if ref in fresh else None
        return ref not in fresh or (row is not None and row.state is WantState.successful)

    return [ref for ref in deps.missing if available(ref)]


def await_dependencies(deps: Dependencies) -> Awaited:
    """The want waits for its missing inputs (``WantUpstreamBuilding``, once per run that missed them),
    with a derivative want for each input not live. Reports which inputs are live and which derivatives
    ended without their partition. An input tainted since its derivative was named raises
    ConcurrentChangeError: the derivative's id includes the taint count, so it is named anew; a run that a
    retry replaced, WantReplacedError."""
    if replaced(deps.opening, deps.run_opening):
        raise WantReplacedError(deps.want_id, deps.run_opening or 0, deps.opening)
    if deps.state.is_final:  # cancelled meanwhile (with its backfill, say): it starts nothing more
        why = f"want {deps.want_id} has ended ({deps.state.value})"
        return Awaited([], DependenciesStatus(live=[], failed=dict.fromkeys(deps.missing, why)), [])
    for ref in deps.missing:
        partition = deps.partitions.get(ref)
        if (partition.generation if partition is not None else 0) != deps.generations[ref]:
            raise ConcurrentChangeError(f"{ref} was tainted while its want was being derived")
    live = _available(deps)
    events: list[ev.Event] = []
    rows = dict(deps.known)
    for spec in deps.derivatives:
        # An input that went live since the dep-miss needs no new derivative (a fresh one judges it).
        if (spec.fresh or spec.ref not in live) and spec.want_id not in rows:
            events += created(spec, known=False)
            rows[spec.want_id] = WantRow(WantState.new)
    recorded = [d for d in deps.derivatives if d.want_id in rows]
    if deps.state is not WantState.upstream_building or deps.following != deps.job_run_id:
        events.append(
            ev.WantUpstreamBuilding(
                want_id=deps.want_id,
                job_run_id=deps.job_run_id,
                missing=list(deps.missing),
                derivative_want_ids=[d.want_id for d in recorded],
            )
        )
    failed = {}
    reopened = []
    for d in recorded:
        row = rows[d.want_id]
        if row.state is WantState.canceled and d.ref not in live:
            # Cancelled with a backfill whose cancel this want's need came too late to hold back: nothing
            # is wrong with the input, so this want opens it again, as a retry would (its next step).
            events += reopen(d.want_id, row.state, row.decision_seq)
            rows[d.want_id] = WantRow(WantState.new, opening=row.opening + 1)
            reopened.append(WantStart(spec=d, opening=row.opening + 1))
        elif row.state.is_final and d.ref not in live and row.state is not WantState.successful:
            failed[d.ref] = f"derivative want {d.want_id} {row.state.value}: {row.reason or ''}".strip()
    # Every recorded derivative that has not ended is started (again: starting is idempotent), also one
    # of an input live by now: recorded by an attempt whose start failed, it would otherwise stay `new`
    # with no workflow.
    unfinished = [
        WantStart(spec=d, opening=rows[d.want_id].opening)
        for d in recorded
        if not rows[d.want_id].state.is_final
    ]
    return Awaited(events, DependenciesStatus(live=live, failed=failed), unfinished, reopened)
