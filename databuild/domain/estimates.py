"""When will a want's partition be live? A pure estimate from what is left to build and how long its
jobs took before.

What is left is a tree: the want's own job, after the inputs it still waits for (each the same kind of
tree). Its time is its own job's remaining time plus the slowest input's (a run that is going counts
only what is left of its usual duration). Each job's p50 and p90 come from its succeeded runs. Summing
p90s along a path overstates a little, which suits a warning that must come before the miss. A job
that never succeeded, or an external partition nobody can time, counts as no time at all: the
estimate is then the earliest the partition can be live, which is still a sure sign of risk when even
that passes the deadline, and it names what it could not time."""

from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import Field

from databuild.models import Model

# Fewer succeeded runs than this make a job's figures a low-confidence guide.
CONFIDENT_SAMPLES = 5


class Durations(Model):
    """A job's succeeded runs: how many, and their p50 and p90 durations."""

    samples: int
    p50: timedelta
    p90: timedelta


class Step(Model):
    """What remains of one partition: its job (None: an external partition) and, if a run of it is
    going, since when; ``inputs``: the steps it still waits for."""

    ref: str
    job_label: str | None
    running_since: datetime | None = None
    inputs: list["Step"] = []

    def labels(self) -> set[str]:
        """Every job on the remaining path."""
        own = {self.job_label} if self.job_label else set()
        return own.union(*(i.labels() for i in self.inputs))


class Confidence(StrEnum):
    high = "high"  # every job on the path has CONFIDENT_SAMPLES succeeded runs or more
    low = "low"  # some job has fewer
    none = "none"  # the earliest time only: some job never succeeded, or an external partition is awaited


class Estimate(Model):
    eta_p50: datetime = Field(description="when the partition is live, at the jobs' median durations")
    eta_p90: datetime = Field(description="the same at their p90 durations: the alert's measure")
    confidence: Confidence
    slowest_step: str | None = Field(description="the remaining job that takes longest (p90), and its ref")
    unknown: list[str] = Field(default=[], description="refs on the path nobody can time yet")
    external: list[str] = Field(default=[], description="external partitions the path waits for")

    def at_risk(self, deadline: datetime) -> bool:
        return self.eta_p90 >= deadline  # at ``check_at`` the estimate reaches the deadline

    def check_at(self, deadline: datetime, now: datetime) -> datetime:
        """When the p90 estimate passes ``deadline`` if nothing moves on: the moment to look again."""
        return deadline - (self.eta_p90 - now)


def estimate(step: Step, durations: dict[str, Durations], now: datetime) -> Estimate:
    """The estimate for ``step`` (see the module's rule)."""
    unknown: list[str] = []
    external: list[str] = []
    timed: list[tuple[timedelta, str]] = []

    def remaining(node: Step, p90: bool) -> timedelta:
        after = max((remaining(i, p90) for i in node.inputs), default=timedelta(0))
        if node.job_label is None:
            if p90:
                external.append(node.ref)
            return after
        stats = durations.get(node.job_label)
        if stats is None or stats.samples == 0:
            if p90:
                unknown.append(node.ref)
            return after
        left = time_left(stats, node.running_since, now)[1 if p90 else 0]
        if p90:
            timed.append((left, f"{node.job_label} ({node.ref})"))
        return after + left

    p90 = remaining(step, True)
    p50 = remaining(step, False)
    labels = step.labels()
    few = any(durations[label].samples < CONFIDENT_SAMPLES for label in labels if label in durations)
    confidence = Confidence.none if unknown or external else Confidence.low if few else Confidence.high
    return Estimate(
        eta_p50=now + p50,
        eta_p90=now + p90,
        confidence=confidence,
        slowest_step=max(timed)[1] if timed else None,
        unknown=unknown,
        external=external,
    )


def time_left(stats: Durations, running_since: datetime | None, now: datetime) -> tuple[timedelta, timedelta]:
    """How long a job takes before its partition is live, at p50 and p90: its usual time, or what is left
    of it for a run going since ``running_since`` (none once it has run longer than usual)."""
    gone = timedelta(0) if running_since is None else now - running_since
    return max(stats.p50 - gone, timedelta(0)), max(stats.p90 - gone, timedelta(0))


def percentile(sorted_values: list[float], fraction: float) -> float:
    """The nearest-rank percentile of ascending ``sorted_values`` (not empty)."""
    rank = max(int(-(-fraction * len(sorted_values) // 1)), 1)  # ceil, at least the first
    return sorted_values[min(rank, len(sorted_values)) - 1]


def durations_of(seconds: list[float]) -> Durations:
    ordered = sorted(seconds)
    if not ordered:
        return Durations(samples=0, p50=timedelta(0), p90=timedelta(0))
    return Durations(
        samples=len(ordered),
        p50=timedelta(seconds=percentile(ordered, 0.5)),
        p90=timedelta(seconds=percentile(ordered, 0.9)),
    )
