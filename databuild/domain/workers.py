"""Which worker runs which version of each job, as pure rules.

Staleness by code is judged with the version of the worker that decides. Two workers serving one task
queue with different versions of a job (a deploy half done) each find the other's build stale: a fresh
want rebuilds it, the other worker's next fresh want rebuilds it back, and it is never fresh. So the
versions of the workers that serve a queue now are shown, and a fresh rebuild they disagree on is refused
until one version runs everywhere."""

from collections.abc import Sequence
from datetime import datetime

from pydantic import Field

from databuild.errors import ConfigurationError
from databuild.models import Model


class WorkerVersions(Model):
    """A worker process as it started: the task queue it serves and the version of each job it runs."""

    identity: str = Field(description="its Temporal identity (host:process)")
    task_queue: str
    graph: str
    versions: dict[str, str] = Field(description="job label -> the version of its code this worker runs")
    started_at: datetime
    last_seen: datetime | None = Field(
        default=None, description="when it last asked Temporal for work (None: it serves no more)"
    )


class Environment(Model):
    """An environment: its task queue, the workers serving it now, and the jobs whose versions differ."""

    name: str
    task_queue: str
    workers: list[WorkerVersions]
    differing: dict[str, dict[str, list[str]]] = Field(
        description="job label -> version -> the workers running it, for jobs whose versions differ"
    )


def differing(workers: Sequence[WorkerVersions]) -> dict[str, dict[str, list[str]]]:
    """The jobs whose version is not the same on every one of ``workers``, with who runs which."""
    by_job: dict[str, dict[str, list[str]]] = {}
    for worker in workers:
        for label, version in worker.versions.items():
            by_job.setdefault(label, {}).setdefault(version, []).append(worker.identity)
    return {label: versions for label, versions in sorted(by_job.items()) if len(versions) > 1}


def refuse_unconverging(job_label: str, ref: str, workers: Sequence[WorkerVersions]) -> None:
    """Raise ConfigurationError when the workers serving now disagree on ``job_label``'s version: a
    fresh rebuild of ``ref`` would be stale again for the other half of them, for ever."""
    found = differing(workers).get(job_label)
    if not found:
        return
    who = "; ".join(
        f"{', '.join(ids)} run{'s' if len(ids) == 1 else ''} {v}" for v, ids in sorted(found.items())
    )
    raise ConfigurationError(
        f"a fresh rebuild of {ref} cannot converge: the workers disagree on the version of job "
        f"{job_label!r} ({who}), so each finds the other's build stale; deploy one version to every "
        "worker (`databuild envs` shows them), then want it fresh again"
    )
