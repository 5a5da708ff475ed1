"""Which waiting job runs may start: pools bound the runs going at once, cluster-wide, and
interactive and scheduled work comes before backfills. Pure rules over what the BEL read under the
pools' locks; the store appends the admissions they return."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from databuild.domain import events as ev
from databuild.errors import GraphDefinitionError
from databuild.graph import Job
from databuild.models import JobRunState, WantSource

URGENT = 0  # interactive and scheduled wants, and whatever they need
BACKGROUND = 1  # backfills, and whatever they need


def want_priority(source: WantSource, root_source: WantSource | None) -> int:
    """A backfill's want, or a derivative of one, yields to everything else."""
    if source is WantSource.backfill or (
        source is WantSource.derivative and root_source is WantSource.backfill
    ):
        return BACKGROUND
    return URGENT


def job_pool(label: str) -> str:
    """The pool behind a job's own ``max_running``."""
    return f"job:{label}"


def pools_of(job: Job, named: Mapping[str, int]) -> dict[str, int]:
    """The pools (name -> slots) a run of ``job`` takes a slot of: its own bound, and its named pool."""
    pools = {} if job.max_running is None else {job_pool(job.label): job.max_running}
    if job.pool is not None:
        if job.pool not in named:
            known = ", ".join(f"{name}={slots}" for name, slots in sorted(named.items())) or "none"
            raise GraphDefinitionError(
                f"job {job.label!r} takes slots of pool {job.pool!r}, which DATABUILD_POOLS does not define "
                f"(defined: {known}); add it, e.g. DATABUILD_POOLS='{job.pool}=4'"
            )
        pools[job.pool] = named[job.pool]
    return pools


@dataclass(frozen=True)
class Waiting:
    """A queued run that asked to start: the slots it needs, how urgent its wants are, since when, and
    the latest moment it can start and still meet the earliest SLA of the wants waiting on it (None:
    none of them has an SLA)."""

    job_run_id: str
    pools: Mapping[str, int]
    priority: int
    queued_at: datetime
    latest_start: datetime | None = None


def latest_start(deadline: datetime | None, usual: timedelta) -> datetime | None:
    """The SLA's slack as a moment: a run that usually takes ``usual`` (its job's p90, the SLA
    estimate's measure) must start by then to meet ``deadline``."""
    return None if deadline is None else deadline - usual


def admit(waiting: Sequence[Waiting], running: Mapping[str, int]) -> list[str]:
    """The waiting runs to start now, in order: the most urgent first; among equals, the least SLA slack
    first (the earliest latest start; runs with no SLA after those with one), then the longest waiting;
    each as long as every pool it needs has a free slot (``running``: slots taken per pool). A run that
    does not fit does not hold back a later one that does."""
    taken = dict(running)
    admitted = []
    for run in sorted(waiting, key=_turn):
        if all(taken.get(pool, 0) < slots for pool, slots in run.pools.items()):
            admitted.append(run.job_run_id)
            for pool in run.pools:
                taken[pool] = taken.get(pool, 0) + 1
    return admitted


@dataclass(frozen=True)
class Request:
    events: list[ev.Event]
    settled: bool  # the run may start now; otherwise it waits in line until ``admit`` lets it in


def request(
    job_run_id: str, state: JobRunState, admitted: bool, slots: Mapping[str, int], in_line: bool
) -> Request:
    """A queued run asks to start: with no pool to wait for it is admitted at once; otherwise it joins
    the line of each pool in ``slots`` (once: ``in_line`` says it has). A run admitted before, or one
    that has ended (its job then finds nothing to do), may start."""
    if admitted or state is not JobRunState.queued:
        return Request([], settled=True)
    if not slots:
        return Request([ev.JobRunAdmitted(job_run_id=job_run_id)], settled=True)
    waiting: list[ev.Event] = [] if in_line else [ev.JobRunWaiting(job_run_id=job_run_id, pools=dict(slots))]
    return Request(waiting, settled=False)


def _turn(run: Waiting) -> tuple[int, bool, datetime, datetime, str]:
    slack = run.latest_start
    return (run.priority, slack is None, slack or run.queued_at, run.queued_at, run.job_run_id)


def admissions(admitted: Sequence[str]) -> list[ev.Event]:
    return [ev.JobRunAdmitted(job_run_id=run) for run in admitted]
