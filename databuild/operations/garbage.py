"""Garbage collection of the storage: instance locations nothing needs any more (a partitioned write's
folder as a whole, or its partitions one by one), the folders of submitted attempts, and the logs of job
runs that ended longer than the retention ago. It lists the
storage first and asks the BEL second, so an attempt that starts or publishes meanwhile is seen by the
BEL as writing or live (an attempt records its instance ids before it writes a byte). The rules
themselves are ``databuild.domain.retention``."""

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, Protocol

from pydantic import Field

from databuild.bel.queries import BelQueries
from databuild.domain.retention import (
    Verdict,
    held_by_snapshots,
    instance_verdict,
    log_verdict,
    retained_snapshots,
    submission_verdict,
    write_verdict,
)
from databuild.jobs.storage import LogFolder, Storage, StoredInstance, StoredWrite, SubmissionArea
from databuild.models import AttemptOutput, Instance, JobRun, Model


class Collected(Model):
    kind: Literal["instance", "submission", "log"]
    location: str
    ref: str | None = None
    instance_id: str | None = None
    job_run_id: str | None = None
    reason: str


class GcReport(Model):
    dry_run: bool
    keep: timedelta = Field(
        description="the retention: nothing is deleted sooner after it stopped being used"
    )
    deleted: list[Collected] = Field(description="deleted, or what would be with --dry-run")
    kept: dict[str, int] = Field(description="instance locations kept, counted by why")
    expired_snapshots: int = Field(default=0, description="table snapshots expired (none with --dry-run)")


class SnapshotExpiry(Protocol):
    def expire(self, retained: Mapping[str, set[int]], older_than: datetime) -> int:
        """Expire every snapshot of its tables older than ``older_than`` but the current ones and those of
        ``retained`` (by table); returns how many it expired."""
        ...


@dataclass(frozen=True)
class _Census:
    """What the storage holds, then what the BEL knows of it."""

    now: datetime
    keep: timedelta
    instances: list[StoredInstance]
    writes: list[StoredWrite]
    submissions: list[SubmissionArea]
    old_logs: list[LogFolder]
    planned: dict[str, AttemptOutput]  # instance id -> the attempt that writes (or wrote) it
    written: dict[tuple[str, int], list[str]]  # (job run, attempt) of each write -> its planned instances
    runs: dict[str, JobRun]
    known: dict[str, Instance]
    oldest_open: datetime | None
    retained: dict[str, set[int]]  # the snapshots each table keeps
    in_snapshots: frozenset[str]  # the instances a retained snapshot reads


def collect_garbage(
    storage: Storage,
    bel: BelQueries,
    *,
    keep: timedelta,
    now: datetime | None = None,
    dry_run: bool = False,
    tables: SnapshotExpiry | None = None,
) -> GcReport:
    """Delete instance locations that are not live, not pinned, not being written, past ``keep`` and read
    by no retained table snapshot, the submission folders of ended or superseded attempts of its BEL's
    past ``keep``, and the logs of its BEL's job runs that ended, ``keep`` after their last log was
    written. What its BEL does not know is another graph's under the same root: left alone. ``tables``
    expires the table snapshots the BEL's retention no longer keeps, first."""
    census = _take_census(storage, bel, keep=keep, now=now or datetime.now(UTC))
    expired = 0
    if tables is not None and not dry_run:
        expired = tables.expire(census.retained, census.now - keep)
    deleted: list[Collected] = []
    kept = _collect_instances(census, storage, deleted, dry_run=dry_run)
    kept += _collect_writes(census, storage, deleted, dry_run=dry_run)
    _collect_submissions(census, storage, deleted, dry_run=dry_run)
    _collect_logs(census, storage, deleted, dry_run=dry_run)
    return GcReport(dry_run=dry_run, keep=keep, deleted=deleted, kept=dict(kept), expired_snapshots=expired)


def _take_census(storage: Storage, bel: BelQueries, *, keep: timedelta, now: datetime) -> _Census:
    listed = list(storage.files(folders=True))
    stored = storage.instances(listed)
    writes = storage.partitioned_writes(listed)
    submissions = storage.submission_areas()
    # Only logs old enough to go are looked up in the BEL: most are within the retention.
    old_logs = [f for f in storage.log_folders() if f.modified is not None and now - f.modified >= keep]
    ids = [i.instance_id for i in stored]
    # The BEL is asked in an order that makes every race safe without a snapshot: a run read as
    # ended has published in the same commit (so its instances are found next), and a job run open
    # when an instance stopped being live is still open when asked last.
    planned = bel.job_runs.attempt_outputs(ids)
    run_ids = (
        {o.job_run_id for o in planned.values()}
        | {w.job_run_id for w in writes}
        | {a.job_run_id for a in submissions}
        | {f.job_run_id for f in old_logs}
    )
    runs = {r.job_run_id: r for r in bel.job_runs.by_id(sorted(run_ids))}
    written: dict[tuple[str, int], list[str]] = {}
    for output in bel.job_runs.attempt_outputs_of_runs(sorted({w.job_run_id for w in writes})):
        written.setdefault((output.job_run_id, output.attempt), []).append(output.instance_id)
    known = {
        i.instance_id: i
        for i in bel.partitions.instances_by_id([*ids, *(i for each in written.values() for i in each)])
    }
    oldest_open = bel.job_runs.oldest_open()
    holdings = bel.tables.holdings("iceberg")
    # A pinned instance keeps its snapshot, live or not.
    verdicts = {
        h.instance_id: Verdict("pinned", "pinned")
        if (instance := known[h.instance_id]).pinned
        else instance_verdict(
            instance.ref, None, instance, None, now=now, keep=keep, oldest_open_run=oldest_open
        )
        for h in holdings
        if h.instance_id in known
    }
    retained = retained_snapshots(holdings, verdicts, now=now, keep=keep)
    return _Census(
        now,
        keep,
        stored,
        writes,
        submissions,
        old_logs,
        planned,
        written,
        runs,
        known,
        oldest_open,
        retained,
        held_by_snapshots(holdings, retained),
    )


def _collect_instances(
    census: _Census, storage: Storage, deleted: list[Collected], *, dry_run: bool
) -> Counter[str]:
    """Delete the instance locations that may go; the rest counted by why they stay."""
    kept: Counter[str] = Counter()
    for found in census.instances:
        output = census.planned.get(found.instance_id)
        verdict = instance_verdict(
            found.ref,
            found.modified,
            census.known.get(found.instance_id),
            None if output is None else (output, census.runs.get(output.job_run_id)),
            now=census.now,
            keep=census.keep,
            oldest_open_run=census.oldest_open,
            in_snapshot=found.instance_id in census.in_snapshots,
        )
        if verdict.kept is not None:
            kept[verdict.kept] += 1
            continue
        key = storage.instance_key(found.ref, found.instance_id)
        collected = Collected(
            kind="instance",
            location=storage.uri_of(key),
            ref=found.ref,
            instance_id=found.instance_id,
            job_run_id=output.job_run_id if output else None,
            reason=verdict.reason,
        )
        _delete(storage, key, collected, deleted, dry_run=dry_run)
    return kept


def _collect_writes(
    census: _Census, storage: Storage, deleted: list[Collected], *, dry_run: bool
) -> Counter[str]:
    """Delete the partitioned writes' folders that may go, or the partitions in them that may; the
    partitions kept counted by why (a folder nothing was published from counts as one)."""
    kept: Counter[str] = Counter()
    for write in census.writes:
        # The instances published from this folder, each with its own folder in it.
        folders = {
            instance.instance_id: key
            for i in census.written.get((write.job_run_id, write.attempt), [])
            if (instance := census.known.get(i)) is not None
            and (key := storage.key_of(instance)) is not None
            and key.startswith(f"{write.key}/")
        }
        inside = [census.known[i] for i in folders]
        verdict, each = write_verdict(
            write.attempt,
            write.modified,
            census.runs.get(write.job_run_id),
            inside,
            now=census.now,
            keep=census.keep,
            oldest_open_run=census.oldest_open,
            in_snapshots=census.in_snapshots,
        )
        if verdict.kept is None:
            collected = Collected(
                kind="instance",
                location=storage.uri_of(write.key),
                job_run_id=write.job_run_id,
                reason=verdict.reason,
            )
            _delete(storage, write.key, collected, deleted, dry_run=dry_run)
        elif not each:
            kept[verdict.kept] += 1
        for instance_id, partition in each.items():  # a kept folder's partitions, one by one
            if partition.kept is not None:
                kept[partition.kept] += 1
                continue
            collected = Collected(
                kind="instance",
                location=storage.uri_of(folders[instance_id]),
                ref=census.known[instance_id].ref,
                instance_id=instance_id,
                job_run_id=write.job_run_id,
                reason=partition.reason,
            )
            _delete(storage, folders[instance_id], collected, deleted, dry_run=dry_run)
    return kept


def _delete(
    storage: Storage, key: str, collected: Collected, deleted: list[Collected], *, dry_run: bool
) -> None:
    """Report ``collected``, and delete what is at ``key`` unless this is a dry run."""
    deleted.append(collected)
    if not dry_run:
        storage.delete(key)


def _collect_submissions(
    census: _Census, storage: Storage, deleted: list[Collected], *, dry_run: bool
) -> None:
    for area in census.submissions:
        run = census.runs.get(area.job_run_id)
        verdict = submission_verdict(area.attempt, area.modified, run, now=census.now, keep=census.keep)
        _collect_folder("submission", area.key, area.job_run_id, verdict, storage, deleted, dry_run=dry_run)


def _collect_logs(census: _Census, storage: Storage, deleted: list[Collected], *, dry_run: bool) -> None:
    for folder in census.old_logs:
        verdict = log_verdict(
            folder.modified, census.runs.get(folder.job_run_id), now=census.now, keep=census.keep
        )
        _collect_folder("log", folder.key, folder.job_run_id, verdict, storage, deleted, dry_run=dry_run)


def _collect_folder(
    kind: Literal["submission", "log"],
    key: str,
    job_run_id: str,
    verdict: Verdict,
    storage: Storage,
    deleted: list[Collected],
    *,
    dry_run: bool,
) -> None:
    """A run's folder (a submission's files, an attempt's logs), recorded and deleted if its verdict says so."""
    if verdict.delete:
        collected = Collected(
            kind=kind, location=storage.uri_of(key), job_run_id=job_run_id, reason=verdict.reason
        )
        _delete(storage, key, collected, deleted, dry_run=dry_run)
