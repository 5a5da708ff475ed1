"""Storage housekeeping. Attempts leave folders on the shared storage when their worker is killed
(staging and submission folders) or their job fails (the submission folder and its log, kept on purpose
for a while); a publish whose BEL commit never happened (killed, or refused) leaves the partitions it
replaced in its trash folder, the live instance among them. The sweep asks the BEL what is still in
use, removes the rest, and puts such a live instance back."""

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from pydantic import Field

from databuild.bel.queries import BelQueries
from databuild.models import InstanceStatus, Model
from databuild.storage import Storage

# A publish's trash folder is discarded within seconds of its commit; one this old was never committed.
PUBLISH_GRACE = timedelta(hours=1)


class Removed(Model):
    path: str
    kind: Literal["staging", "submission", "trash"]
    job_run_id: str | None
    reason: str


class Restored(Model):
    ref: str
    instance_id: str


class SweepReport(Model):
    dry_run: bool
    removed: list[Removed]
    restored: list[Restored] = Field(description="live instances an uncommitted publish had moved aside")
    kept: int = Field(description="folders still in use, or kept for inspection until keep_failed passes")


def sweep(
    storage: Storage,
    bel: BelQueries,
    *,
    keep_failed: timedelta,
    now: datetime | None = None,
    dry_run: bool = False,
) -> SweepReport:
    """Remove the staging folders of ended job runs and superseded attempts, their submission folders
    once older than ``keep_failed``, and the trash of uncommitted publishes (restoring a live partition
    found there)."""
    now = now or datetime.now(UTC)
    removed: list[Removed] = []
    restored: list[Restored] = []
    kept = 0

    areas = list(storage.attempt_areas())
    runs = {run.job_run_id: run for run in bel.job_runs_by_id(sorted({a.job_run_id for a in areas}))}
    for area in areas:
        age = _age(area.path, now)
        run = runs.get(area.job_run_id)
        if age is None:  # gone meanwhile (a concurrent sweep, or the attempt itself)
            continue
        if run is None:
            reason = "no such job run in the BEL"
        elif run.state.is_final:
            reason = f"job run {run.state.value}"
        elif area.attempt < run.attempts:
            reason = f"attempt {area.attempt} was superseded by attempt {run.attempts}"
        else:
            kept += 1
            continue
        if (area.kind == "submission" or run is None) and age < keep_failed:
            kept += 1  # a failed attempt's request, progress and log, for whoever investigates
            continue
        removed.append(
            Removed(path=str(area.path), kind=area.kind, job_run_id=area.job_run_id, reason=reason)
        )
        if not dry_run:
            shutil.rmtree(area.path, ignore_errors=True)

    for publish in storage.publishes():
        age = _age(publish, now)
        if age is None:
            continue
        if age < PUBLISH_GRACE:
            kept += 1  # a publish still committing, or a sweep restoring from it
            continue
        retired = storage.retired(publish)
        ids = [r.instance_id for r in retired if r.instance_id]
        live = {i.instance_id: i.ref for i in bel.instances_by_id(ids) if i.status is InstanceStatus.live}
        building = {p.ref for p in bel.partitions_by_ref(list(live.values())) if p.building_job_run_id}
        held = False
        for partition in retired:
            ref = live.get(partition.instance_id or "")
            if ref is None:
                continue  # superseded or tainted since: nothing reads it any more
            # Whatever the ref holds now was never committed; unless a build is publishing it right
            # now, the live instance goes back in its place.
            if ref not in building and (dry_run or storage.restore(partition, ref)):
                restored.append(Restored(ref=ref, instance_id=partition.instance_id or ""))
            else:
                held = True  # never remove a live instance's data: a later sweep decides again
        if held:
            kept += 1
            continue
        removed.append(
            Removed(
                path=str(publish),
                kind="trash",
                job_run_id=None,
                reason="left by a publish that was never committed",
            )
        )
        if not dry_run:
            shutil.rmtree(publish, ignore_errors=True)
    return SweepReport(dry_run=dry_run, removed=removed, restored=restored, kept=kept)


def _age(path: Path, now: datetime) -> timedelta | None:
    try:
        return now - datetime.fromtimestamp(path.stat().st_mtime, UTC)
    except FileNotFoundError:
        return None
