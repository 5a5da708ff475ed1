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

from databuild.domain.estimates import Confidence, Durations, Step, estimate
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


class Action(StrEnum):
    build = "build"  # missing or tainted: a run builds it
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
    return {
        PartitionStatus.live: Action.live,
        PartitionStatus.building: Action.building,
        PartitionStatus.failed: Action.fail_locked,
        PartitionStatus.skipped: Action.skipped,
    }.get(node.status, Action.build)


def inputs_to_follow(node: Node) -> list[str]:
    """The inputs whose state matters to a plan: those of a partition it would build."""
    return list(node.inputs or []) if action_of(node) is Action.build else []


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
    steps: dict[str, Step | None] = {}

    def step(ref: str) -> Step | None:
        """What is left of ``ref`` (None: nothing, it is live or announced), for the estimate."""
        if ref not in steps:
            node = nodes[ref]
            action = action_of(node)
            if action in (Action.live, Action.available, Action.fail_locked, Action.skipped):
                steps[ref] = None  # fail-locked and skipped are blocked, named in the plan, not timed
            elif action is Action.awaited:
                steps[ref] = Step(ref=ref, job_label=None)
            else:
                inputs = [s for i in inputs_to_follow(node) if (s := step(i)) is not None]
                steps[ref] = Step(
                    ref=ref, job_label=node.job_label, running_since=node.running_since, inputs=inputs
                )
        return steps[ref]

    eta50: datetime | None = None
    eta90: datetime | None = None
    confidence = Confidence.high
    misses = []
    for root in roots:
        found = step(root.ref)
        extra = [s for r in root.requires if (s := step(r)) is not None]
        if found is not None and extra:
            found = found.model_copy(update={"inputs": [*found.inputs, *extra]})
        if found is None:
            continue
        times = estimate(found, durations, now)
        eta50 = max(eta50 or times.eta_p50, times.eta_p50)
        eta90 = max(eta90 or times.eta_p90, times.eta_p90)
        confidence = min(confidence, times.confidence, key=_CONFIDENCE.index)
        if root.deadline is not None and times.at_risk(root.deadline):
            misses.append(SlaMiss(ref=root.ref, deadline=root.deadline, eta_p90=times.eta_p90))
    if any(action_of(nodes[ref]) in (Action.fail_locked, Action.skipped) for ref in order):
        confidence = Confidence.none
    runs = _runs(nodes[ref] for ref in order if action_of(nodes[ref]) is Action.build)
    timed = [
        durations[r.job_label] for r in runs if r.job_label in durations and durations[r.job_label].samples
    ]
    return Plan(
        wanted=len(roots),
        partitions=[
            PlannedPartition(
                ref=ref,
                job_label=nodes[ref].job_label,
                status=nodes[ref].status,
                action=action_of(nodes[ref]),
            )
            for ref in order
        ],
        runs=runs,
        eta_p50=eta50,
        eta_p90=eta90,
        work_p50=sum((d.p50 for d in timed), timedelta(0)),
        work_p90=sum((d.p90 for d in timed), timedelta(0)),
        confidence=confidence,
        untimed=sorted({r.job_label for r in runs} - {label for label, d in durations.items() if d.samples}),
        sla_misses=misses,
        discovered_at_run_time=[
            ref for ref in order if action_of(nodes[ref]) is Action.build and nodes[ref].inputs is None
        ],
    )


_CONFIDENCE = [Confidence.none, Confidence.low, Confidence.high]


def _reached(roots: Sequence[Root], nodes: dict[str, Node]) -> list[str]:
    """Every ref the roots reach, each after the inputs it would wait for (depth first, in the roots'
    order), once."""
    order: dict[str, None] = {}
    visiting: set[str] = set()

    def visit(ref: str) -> None:
        if ref in order or ref in visiting:
            return
        visiting.add(ref)
        for each in inputs_to_follow(nodes[ref]):
            visit(each)
        visiting.discard(ref)
        order[ref] = None

    for root in roots:
        for required in root.requires:
            visit(required)
        visit(root.ref)
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
