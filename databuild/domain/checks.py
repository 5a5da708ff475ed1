"""Which events check results append: when a job wrote the instances (recorded with its outcome), and
when `databuild check` re-runs them on a live instance (a blocking failure retires it and fail-locks its
partition, as a failed build would have)."""

from collections.abc import Mapping, Sequence

from pydantic import Field

from databuild.domain import events as ev
from databuild.errors import InvalidInputError, InvalidTransitionError, NotFoundError
from databuild.models import CheckResult, InstanceRef, Model, Partition, PartitionStatus, TaintImpact


def blocking_failures(results: Mapping[str, Sequence[CheckResult]]) -> list[CheckResult]:
    """The results (of each output, by ref) that keep their instance from going live."""
    return [r for ref in sorted(results) for r in results[ref] if r.blocks]


def failure_reason(failures: Sequence[CheckResult]) -> str:
    """Why a run failed its checks: every blocking failure, each naming its check, ref and message."""
    return "; ".join(f"check {f.name} of {f.ref} failed: {f.message}" for f in failures)


def checked(
    job_run_id: str | None,
    instances: Sequence[InstanceRef],
    results: Mapping[str, Sequence[CheckResult]],
    *,
    recheck_id: str | None = None,
) -> list[ev.Event]:
    """An ``InstanceChecked`` per instance whose output has checks (``results`` by ref), written by
    ``job_run_id`` or re-run by the request ``recheck_id``."""
    events: list[ev.Event] = []
    for instance in instances:
        found = list(results.get(instance.ref, ()))
        if not found:
            continue
        if instance.instance_id is None:
            raise InvalidInputError(f"check results of {instance.ref} name no instance")
        if any(r.ref != instance.ref for r in found):
            raise InvalidInputError(f"check results given for {instance.ref} are of another ref")
        events.append(
            ev.InstanceChecked(
                ref=instance.ref,
                instance_id=instance.instance_id,
                job_run_id=job_run_id,
                results=found,
                recheck_id=recheck_id,
            )
        )
    return events


def checkable(partition: Partition | None, ref: str) -> Partition:
    """The partition, if its checks can be re-run: it has a live instance that no run is replacing."""
    if partition is None:
        raise NotFoundError(f"no partition {ref!r} in the build event log")
    if partition.status is not PartitionStatus.live or partition.instance_id is None:
        raise InvalidTransitionError(
            f"{ref} is {partition.status.value}; checks re-run on a live instance only"
        )
    if partition.building_job_run_id:
        raise InvalidTransitionError(
            f"{ref} is being rebuilt by job run {partition.building_job_run_id}; check it after that run ends"
        )
    return partition


def rechecked(
    partition: Partition | None,
    instance_id: str,
    results: Sequence[CheckResult],
    impact: TaintImpact,
    recheck_id: str | None = None,
) -> list[ev.Event]:
    """Results of re-running a partition's checks on ``instance_id``, the live instance they ran on. A
    blocking failure takes it out of service at once: tainted (so what was built from it shows stale,
    ``impact``) and the partition fail-locked, so no want rebuilds it until an operator resolves it."""
    live = checkable(partition, impact.ref)
    if live.instance_id != instance_id or impact.instance_id != instance_id:
        raise InvalidTransitionError(
            f"the live instance of {impact.ref} is now {live.instance_id}, not {instance_id} that was checked; "
            "run `databuild check` again"
        )
    checked_now = [InstanceRef(ref=impact.ref, instance_id=instance_id)]
    events = checked(None, checked_now, {impact.ref: results}, recheck_id=recheck_id)
    failures = [r for r in results if r.blocks]
    if failures:
        reason = failure_reason(failures)
        stale = [InstanceRef(ref=d.ref, instance_id=d.instance_id) for d in impact.downstream]
        events += [
            ev.PartitionTainted(ref=impact.ref, instance_id=instance_id, reason=reason, stale=stale),
            ev.PartitionFailed(ref=impact.ref, job_run_id=None, reason=reason),
        ]
    return events


class Recheck(Model):
    """What `databuild check` found: the results of re-running a partition's checks on its live instance,
    recorded; a blocking failure took the instance out of service and fail-locked the partition."""

    ref: str
    instance_id: str = Field(description="the instance checked")
    results: list[CheckResult]
    partition: Partition = Field(description="the partition after the results were recorded")

    @property
    def fail_locked(self) -> bool:
        return any(r.blocks for r in self.results)
