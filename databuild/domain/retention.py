"""Which instance locations garbage collection may delete: a pure rule over what the storage holds and
what the BEL says about it."""

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from databuild.durations import format_duration
from databuild.models import AttemptOutput, Instance, InstanceStatus, JobRun

Kept = Literal[
    "live",
    "pinned",
    "may be read",
    "being written",
    "within retention",
    "in a table snapshot",
    "unknown to the BEL",
]


@dataclass(frozen=True)
class Verdict:
    kept: Kept | None  # None: delete it
    reason: str

    @property
    def delete(self) -> bool:
        return self.kept is None


def instance_verdict(
    ref: str,
    modified: datetime | None,
    instance: Instance | None,
    written_by: tuple[AttemptOutput, JobRun | None] | None,
    *,
    now: datetime,
    keep: timedelta,
    oldest_open_run: datetime | None,
    in_snapshot: bool = False,
) -> Verdict:
    """May the location of ``ref``'s instance go?

    ``instance``: the BEL's instance of that id, if it was ever published. ``written_by``: the attempt
    that planned it, and that attempt's job run. ``modified``: the newest file in the location.
    ``oldest_open_run``: when the oldest job run that has not ended was created (it may be reading any
    instance that was live since). ``in_snapshot``: a retained snapshot of its table reads its files (only
    a published instance is ever in a table)."""
    if instance is not None:
        if instance.ref != ref:
            return Verdict(
                "unknown to the BEL", f"the BEL knows this instance as one of {instance.ref}: left alone"
            )
        if instance.status is InstanceStatus.live:
            return Verdict("live", "live")
        if instance.pinned:
            return Verdict("pinned", "pinned")
        retired = instance.retired_at or instance.created_at
        if oldest_open_run is not None and retired >= oldest_open_run:
            return Verdict(
                "may be read", f"{instance.status.value}, and a job run open since it was live may read it"
            )
        aged = _by_age(f"{instance.status.value}", now - retired, keep)
        if aged.delete and in_snapshot:
            return Verdict(
                "in a table snapshot", "a retained snapshot of its table reads it; kept until it expires"
            )
        return aged
    if written_by is None:
        return Verdict(
            "unknown to the BEL", "not an instance this BEL knows (another graph's storage root?): left alone"
        )
    output, run = written_by
    if output.ref != ref:
        return Verdict("unknown to the BEL", f"the BEL planned this instance for {output.ref}: left alone")
    if run is None or not run.state.is_final:
        return Verdict(
            "being written", f"being written by attempt {output.attempt} of job run {output.job_run_id}"
        )
    left = f"left by attempt {output.attempt} of job run {output.job_run_id} ({run.state.value}), never published"
    return _by_age(left, now - (modified or now), keep)  # no time listed: kept until one is


def write_verdict(
    attempt: int,
    modified: datetime | None,
    run: JobRun | None,
    inside: Sequence[Instance],
    *,
    now: datetime,
    keep: timedelta,
    oldest_open_run: datetime | None,
    in_snapshots: frozenset[str] = frozenset(),
) -> tuple[Verdict, dict[str, Verdict]]:
    """May the folder of an attempt's partitioned write go? If not, the verdict of each instance the BEL
    published from it, by id (its partitions' folders may go one by one).

    ``run``: the BEL's job run of that attempt; ``inside``: the instances published from the folder;
    ``modified``: the newest file in it. Only an attempt this BEL started is its own, as with submissions."""
    if run is None or attempt > run.attempts:
        return Verdict(
            "unknown to the BEL",
            "not an attempt this BEL started (another graph's storage root?): left alone",
        ), {}
    if not run.state.is_final:
        return Verdict("being written", f"job run {run.job_run_id} has not ended"), {}
    if not inside:
        left = f"left by attempt {attempt} of job run {run.job_run_id} ({run.state.value}), never published"
        return _by_age(left, now - (modified or now), keep), {}
    each = {
        i.instance_id: instance_verdict(
            i.ref,
            modified,
            i,
            None,
            now=now,
            keep=keep,
            oldest_open_run=oldest_open_run,
            in_snapshot=i.instance_id in in_snapshots,
        )
        for i in inside
    }
    kept = [verdict for verdict in each.values() if not verdict.delete]
    if not kept:
        return Verdict(
            None, f"none of its {len(each)} partitions is needed: {next(iter(each.values())).reason}"
        ), {}
    return Verdict(kept[0].kept, f"{len(kept)} of its {len(each)} partitions are kept"), each


def _by_age(what: str, age: timedelta, keep: timedelta) -> Verdict:
    if age < keep:
        return Verdict(
            "within retention", f"{what} {format_duration(age)} ago; kept for {format_duration(keep)}"
        )
    return Verdict(None, f"{what} {format_duration(age)} ago, past the retention of {format_duration(keep)}")


def submission_verdict(
    attempt: int, modified: datetime | None, run: JobRun | None, *, now: datetime, keep: timedelta
) -> Verdict:
    """May the submission folder of ``attempt`` of a job run go? ``run``: the BEL's job run of that id;
    ``modified``: the newest file in the folder. Only an attempt this BEL started is its own: the worker
    records the start before it writes the folder, so a folder of a job run the BEL does not know, or of
    an attempt past those it recorded, is another graph's (sharing the storage root), and may be running."""
    if run is None or attempt > run.attempts:
        return Verdict(
            "unknown to the BEL",
            "not an attempt this BEL started (another graph's storage root?): left alone",
        )
    if not run.state.is_final and attempt == run.attempts:
        return Verdict("being written", f"attempt {attempt} of job run {run.job_run_id} is running")
    if modified is not None and now - modified < keep:
        # A failed attempt's request, progress and log, for whoever investigates.
        return Verdict("within retention", f"written {format_duration(now - modified)} ago")
    if run.state.is_final:
        return Verdict(None, f"job run {run.state.value}")
    return Verdict(None, f"attempt {attempt} was superseded by attempt {run.attempts}")


def log_verdict(modified: datetime | None, run: JobRun | None, *, now: datetime, keep: timedelta) -> Verdict:
    """May the logs of a job run go? ``modified``: when the last of them was written; ``run``: the BEL's
    job run of that id. Only once the run has ended, the retention after its last log, so that a failed
    run's log stays readable as long as the data around it. A job run the BEL does not know is another
    graph's (sharing the storage root): left alone, as its instances are."""
    if run is None:
        return Verdict(
            "unknown to the BEL", "not a job run this BEL knows (another graph's storage root?): left alone"
        )
    if not run.state.is_final:
        return Verdict("being written", f"job run {run.job_run_id} has not ended")
    return _by_age(f"logs of a job run {run.state.value}, last written", now - (modified or now), keep)


@dataclass(frozen=True)
class TableHolding:
    """One instance's time in one table's snapshots, as DataBuild committed it."""

    instance_id: str
    table: str
    snapshot_id: int | None  # the commit's snapshot (None: a table with no snapshots, Hive)
    committed_at: datetime
    removed_at: datetime | None  # None: the current snapshot holds it


def retained_snapshots(
    holdings: Sequence[TableHolding], verdicts: Mapping[str, Verdict], *, now: datetime, keep: timedelta
) -> dict[str, set[int]]:
    """The snapshots each table keeps, by table, in step with the BEL's retention: an instance's own
    snapshot while the BEL keeps the instance out of service (pinned, read by an open run, or retired
    within the retention), and every snapshot for the retention after its commit. A live instance older
    than that is read in the table's current snapshot, which is never expired. ``verdicts``: the BEL's
    verdict on each instance, by id."""
    kept_out_of_service = {"pinned", "may be read", "within retention"}
    retained: dict[str, set[int]] = {}
    for holding in holdings:
        if holding.snapshot_id is None:
            continue
        verdict = verdicts.get(holding.instance_id)
        if now - holding.committed_at < keep or (verdict is not None and verdict.kept in kept_out_of_service):
            retained.setdefault(holding.table, set()).add(holding.snapshot_id)
    return retained


def held_by_snapshots(holdings: Sequence[TableHolding], retained: Mapping[str, set[int]]) -> frozenset[str]:
    """The instances whose files a retained snapshot reads: those the current snapshot holds, and each
    committed at or before a retained snapshot's commit and not yet taken out of the table by it."""
    times: dict[str, list[datetime]] = {}
    for holding in holdings:
        if holding.snapshot_id in retained.get(holding.table, ()):
            times.setdefault(holding.table, []).append(holding.committed_at)
    for each in times.values():
        each.sort()
    held = set()
    for holding in holdings:
        if holding.removed_at is None:  # the current snapshot, never expired, holds it
            held.add(holding.instance_id)
            continue
        moments = times.get(holding.table, [])
        first = bisect.bisect_left(moments, holding.committed_at)  # the first retained one at or after it
        if first < len(moments) and (holding.removed_at is None or moments[first] < holding.removed_at):
            held.add(holding.instance_id)
    return frozenset(held)
