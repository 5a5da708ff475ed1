"""`databuild check`: re-run a partition's checks on its live instance, on a worker (the checks need its
Spark session and the graph), record the results, and alert when a blocking one fails."""

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from temporalio import activity
from temporalio.client import Client

from activities.alerts import raise_alert
from activities.heartbeats import heartbeating
from databuild.bel import BuildEventLog
from databuild.config import Settings
from databuild.domain import alerts
from databuild.domain import checks as check_rules
from databuild.domain.checks import Recheck
from databuild.errors import ChecksTimedOutError, InvalidInputError
from databuild.graph import Graph
from databuild.jobs.checks import run_checks
from databuild.jobs.storage import Storage
from databuild.temporal import protocol as p

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class CheckActivities:
    def __init__(
        self,
        bel: BuildEventLog,
        graph: Graph,
        storage: Storage,
        session: Callable[[], "SparkSession"],
        client: Client,
        settings: Settings,
    ) -> None:
        self.bel = bel
        self.graph = graph
        self.storage = storage
        self.session = session  # the worker's Spark session (its Connect session when jobs run there)
        self.client = client
        self.settings = settings

    @activity.defn
    @heartbeating
    async def recheck(self, input: p.CheckInput) -> Recheck:
        # The request's identity: its Check workflow run, which a retry of this activity shares.
        info = activity.info()
        recheck_id = info.workflow_run_id or info.activity_id
        recorded = await self.bel.call(self.bel.partitions.recorded_recheck, input.ref, recheck_id)
        # Recorded by an attempt whose answer was lost: that answer, its alert raised again (once by key).
        if recorded is None:
            recheck = await asyncio.to_thread(self._recheck, input.ref, recheck_id, _deadline(info))
        else:
            recheck = recorded
        if recheck.fail_locked:
            job = self.graph.resolve(input.ref).target
            alert = alerts.check_fail_locked(recheck, job.job.label if job else None, datetime.now(UTC))
            await raise_alert(self.client, self.settings, alert)
        return recheck

    def _recheck(self, ref: str, recheck_id: str, deadline: datetime | None) -> Recheck:
        partition = check_rules.checkable(self.bel.partitions.find(ref), ref)
        target = self.graph.resolve(ref).target
        checks = target.job.checks_of(ref) if target is not None else []
        if target is None or not checks:
            owner = f"job {target.job.label!r}" if target is not None else "no job (it is external)"
            raise InvalidInputError(
                f"{ref} has no checks to run: {owner} declares none on its pattern; declare them with "
                "@graph.job(..., checks=[...])"
            )
        assert partition.instance_id is not None
        instance = self.bel.partitions.instance(partition.instance_id)
        pattern = self.graph.pattern_for(ref)
        results = run_checks(
            self.session(),
            checks,
            ref=ref,
            instance_id=instance.instance_id,
            params=(pattern.match(ref) if pattern else None) or {},
            location=self.storage.instance_location(instance),
            facts=instance.facts,
        )
        if deadline is not None and datetime.now(UTC) > deadline:
            # The request timed out while a check hung, and its client was told so: too late to record.
            raise ChecksTimedOutError(
                f"the checks of {ref} ended after their request timed out; not recorded"
            )
        # Refused, recording nothing, if another instance went live while the checks ran.
        after = self.bel.partitions.recheck(ref, instance.instance_id, results, recheck_id)
        return Recheck(ref=ref, instance_id=instance.instance_id, results=results, partition=after)


# Results are recorded only this long before the request's time is up, so that a client told it timed out
# is not contradicted by a record made in its last instant.
RECORDING_MARGIN = timedelta(seconds=1)


def _deadline(info: activity.Info) -> datetime | None:
    """When this attempt's time is up (its own timeout, or the request's for all attempts), less the margin."""
    ends = []
    if info.start_to_close_timeout:
        ends.append(info.started_time + info.start_to_close_timeout)
    if info.schedule_to_close_timeout:
        ends.append(info.scheduled_time + info.schedule_to_close_timeout)
    return min(ends) - RECORDING_MARGIN if ends else None
