"""What wanting some partitions would do, decided without recording anything: which partitions would be
built, which are live, being built, fail-locked or awaited; the job runs it would take; how long that
takes at the jobs' recorded durations; and which deadline it would miss.

The rule sees what a loader read (``Node`` per ref: its job, its partition's status, the inputs its job
declares) and is pure. It follows a want as the want workflow would: a live partition is used as it is
(historical delegation), one being built is waited for (active delegation), a fail-locked one blocks
until an operator resolves it, a missing or tainted one is built after its inputs. Inputs a job does not
declare are found only when it runs; the plan names those jobs instead of guessing."""

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import Field

from databuild.domain.estimates import CONFIDENT_SAMPLES, Confidence, Durations, time_left
from databuild.models import Model, PartitionStatus


class Node(Model):
    """One ref as the loader found it."""

    ref: str
    job_label: str | None = Field(description="the job that builds it; None: an external partition")
    outputs: list[str] = Field(default=[], description="every output of the run that builds it")
    status: PartitionStatus = PartitionStatus.missing
    running_since: datetime | None = Field(default=None, description="start of the run building it now")
    inputs: list[str] | None = Field(
        default=None, description="what its job declares it reads; None: found when it runs"
    )
    batch: int | None = Field(default=None, description="the most partitions one run of its job builds")
    stale: list[str] = Field(default=[], description="why its live instance is stale (empty: it is not)")
    stale_inputs: list[str] = Field(default=[], description="inputs it read that are themselves stale")
    fresh: bool = Field(default=False, description="wanted fresh: a stale live instance is rebuilt")


class Action(StrEnum):
    build = "build"  # missing or tainted (or, wanted fresh, stale): a run builds it
    live = "live"  # used as it is
    building = "building"  # another run is building it: waited for
    fail_locked = "fail_locked"  # a failed build holds it until `databuild resolve`
    skipped = "skipped"  # retired with `databuild skip`: never built again
    awaited = "awaited"  # external, not announced yet
    available = "available"  # external, announced


def action_of(node: Node) -> Action:
    """What a want does about ``node``'s partition."""
    if node.job_label is None:
        return Action.available if node.status is PartitionStatus.live else Action.awaited
    if node.status is PartitionStatus.live and node.fresh and node.stale:
        return Action.build  # a fresh want rebuilds a stale partition (``domain.freshness``)
    return {
        PartitionStatus.live: Action.live,
        PartitionStatus.building: Action.building,
        PartitionStatus.failed: Action.fail_locked,
        PartitionStatus.skipped: Action.skipped,
    }.get(node.status, Action.build)


def inputs_to_follow(node: Node) -> list[str]:
    """The inputs whose state matters to a plan: those of a partition it would build (of a stale one
    rebuilt, also the stale inputs it read: a fresh want rebuilds those first)."""
    if action_of(node) is not Action.build:
        return []
    return list(dict.fromkeys([*(node.inputs or []), *node.stale_inputs]))


class Root(Model):
    """A partition wanted, with its SLA deadline if it has one."""

    ref: str
    deadline: datetime | None = None
    requires: list[str] = Field(default=[], description="external partitions its job run waits for")


class PlannedPartition(Model):
    ref: str
    job_label: str | None
    status: PartitionStatus = Field(description="its state in the BEL now")
    action: Action
    stale: list[str] = Field(default=[], description="live and stale: why (rebuilt only when wanted fresh)")


class PlannedRun(Model):
    """One job run the plan would take: a batch of ``partitions`` targets, each with its sibling outputs."""

    job_label: str
    outputs: list[str]
    partitions: int = Field(description="how many of the job's targets it builds (more than 1: a batch)")


class SlaMiss(Model):
    ref: str
    deadline: datetime
    eta_p90: datetime


class Plan(Model):
    """What the wants would do. Times are estimates from the jobs' recorded durations (``eta`` with
    enough workers for every run that can go at once; ``work`` the runs' time added up)."""

    wanted: int = Field(description="how many partitions were wanted")
    partitions: list[PlannedPartition] = Field(description="every partition the wants reach, inputs first")
    runs: list[PlannedRun]
    eta_p50: datetime | None = Field(
        description="when the last wanted partition is live, at median durations"
    )
    eta_p90: datetime | None
    work_p50: timedelta = Field(description="the runs' median durations added up")
    work_p90: timedelta
    confidence: Confidence
    untimed: list[str] = Field(default=[], description="jobs to run that never succeeded: counted as no time")
    sla_misses: list[SlaMiss] = Field(default=[], description="wanted partitions that would miss their SLA")
    discovered_at_run_time: list[str] = Field(
        default=[],
        description="partitions to build whose jobs declare no inputs: theirs are found when they run",
    )

    def count(self, action: Action) -> int:
        return sum(1 for p in self.partitions if p.action is action)

    @property
    def blocked(self) -> list[str]:
        """What a want would wait on without end: fail-locked partitions, and external ones not announced."""
        return [p.ref for p in self.partitions if p.action in (Action.fail_locked, Action.awaited)]


def plan(
    roots: Sequence[Root], nodes: dict[str, Node], durations: dict[str, Durations], now: datetime
) -> Plan:
    """The plan for ``roots`` over what the loader found (``nodes``: every ref the roots reach through
    the inputs of what would be built, their ``requires`` included)."""
    order = _reached(roots, nodes)
    left = _time_left(order, nodes, durations, now)
    etas = [(root, _after([root.ref, *root.requires], left)) for root in roots]
    ends = [at for _, at in etas if at is not None]
    runs = _runs(nodes[ref] for ref in order if action_of(nodes[ref]) is Action.build)
    timed = {label: d for label, d in durations.items() if d.samples}
    waited = {nodes[ref].job_label for ref in order if action_of(nodes[ref]) is Action.building}
    labels = {run.job_label for run in runs} | {label for label in waited if label}
    untimed = sorted(label for label in labels if label not in timed)
    return Plan(
        wanted=len(roots),
        partitions=[
            PlannedPartition(
                ref=ref,
                job_label=nodes[ref].job_label,
                status=nodes[ref].status,
                action=action_of(nodes[ref]),
                stale=nodes[ref].stale,
            )
            for ref in order
        ],
        runs=runs,
        eta_p50=now + max(p50 for p50, _ in ends) if ends else None,
        eta_p90=now + max(p90 for _, p90 in ends) if ends else None,
        work_p50=sum((timed[r.job_label].p50 for r in runs if r.job_label in timed), timedelta(0)),
        work_p90=sum((timed[r.job_label].p90 for r in runs if r.job_label in timed), timedelta(0)),
        confidence=_confidence(order, nodes, labels, timed),
        untimed=untimed,
        sla_misses=[
            SlaMiss(ref=root.ref, deadline=root.deadline, eta_p90=now + at[1])
            for root, at in etas
            if root.deadline is not None and at is not None and now + at[1] >= root.deadline
        ],
        discovered_at_run_time=[
            ref for ref in order if action_of(nodes[ref]) is Action.build and nodes[ref].inputs is None
        ],
    )


Left = tuple[timedelta, timedelta]  # what is left until a partition is live, at p50 and at p90


def _time_left(
    order: Sequence[str], nodes: dict[str, Node], durations: dict[str, Durations], now: datetime
) -> dict[str, Left | None]:
    """For each ref (``order``: inputs first), how long until it is live, as ``domain.estimates`` counts
    it: its own job's usual time (what is left of it for a run that is going) after its slowest input's.
    None: nothing to wait for (live, announced), or something no time can be given to (blocked); a job
    never timed counts as no time. A pass in order, not a recursion: chains of any length are planned."""
    left: dict[str, Left | None] = {}
    for ref in order:
        node = nodes[ref]
        action = action_of(node)
        if action in (Action.live, Action.available, Action.fail_locked, Action.skipped):
            left[ref] = None
            continue
        after = _after(inputs_to_follow(node), left) or (timedelta(0), timedelta(0))
        stats = durations.get(node.job_label or "")
        if action is Action.awaited or stats is None or not stats.samples:
            left[ref] = after
            continue
        own = time_left(stats, node.running_since, now)
        left[ref] = (after[0] + own[0], after[1] + own[1])
    return left


def _after(refs: Iterable[str], left: dict[str, Left | None]) -> Left | None:
    """The latest of ``refs`` (None if none has anything left)."""
    found = [at for r in refs if (at := left.get(r)) is not None]
    if not found:
        return None
    return max(at[0] for at in found), max(at[1] for at in found)


def _confidence(
    order: Sequence[str], nodes: dict[str, Node], labels: set[str], timed: dict[str, Durations]
) -> Confidence:
    """``high`` when every job the plan runs or waits for has enough succeeded runs; ``none`` when one
    never succeeded, or something on the way is blocked or awaited; ``low`` otherwise."""
    blocked = (Action.fail_locked, Action.skipped, Action.awaited)
    if any(action_of(nodes[ref]) in blocked for ref in order) or any(label not in timed for label in labels):
        return Confidence.none
    few = any(timed[label].samples < CONFIDENT_SAMPLES for label in labels)
    return Confidence.low if few else Confidence.high


def _reached(roots: Sequence[Root], nodes: dict[str, Node]) -> list[str]:
    """Every ref the roots reach, each after the inputs it would wait for (depth first, in the roots'
    order), once. With a stack of its own: chains of any length."""
    order: dict[str, None] = {}
    expanding: set[str] = set()  # on the current path: a declaration that loops back is not followed again
    for start in (ref for root in roots for ref in (*root.requires, root.ref)):
        stack = [(start, False)]
        while stack:
            ref, expanded = stack.pop()
            if expanded:
                expanding.discard(ref)
                order[ref] = None
            elif ref not in order and ref not in expanding:
                expanding.add(ref)
                stack.append((ref, True))
                stack.extend((i, False) for i in reversed(inputs_to_follow(nodes[ref])))
    return list(order)


def _runs(building: Iterable[Node]) -> list[PlannedRun]:
    """The runs that build ``building``: one per target (its sibling outputs together), a batched job's
    targets in runs of up to its batch size, in the order they are reached."""
    targets: dict[str, dict[tuple[str, ...], None]] = {}
    batch: dict[str, int] = {}
    for node in building:
        label = node.job_label or ""
        targets.setdefault(label, {})[tuple(node.outputs or [node.ref])] = None
        batch[label] = node.batch or 1
    runs = []
    for label, found in targets.items():
        listed = list(found)
        size = batch[label]
        for start in range(0, len(listed), size):
            chunk = listed[start : start + size]
            runs.append(
                PlannedRun(
                    job_label=label,
                    outputs=[ref for outputs in chunk for ref in outputs],
                    partitions=len(chunk),
                )
            )
    return runs
