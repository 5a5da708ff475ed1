"""Fan-out: when a job run ends, signal every want subscribed to its outputs. Pages through the
subscriptions and heartbeats its cursor, so a retry resumes where the last attempt stopped."""

import asyncio

from temporalio import activity
from temporalio.client import Client

from databuild import protocol as p
from databuild.bel import BuildEventLog
from databuild.models import InstanceRef, JobRunState
from databuild.temporal import SignalFor, notify_subscribers


class FanOutActivities:
    def __init__(self, bel: BuildEventLog, client: Client, page_size: int = 200) -> None:
        self.bel = bel
        self.client = client
        self.page_size = page_size

    @activity.defn(name=p.ACT_FAN_OUT)
    async def fan_out(self, input: p.FanOutInput) -> int:
        run = await asyncio.to_thread(self.bel.job_run, input.job_run_id)
        details = activity.info().heartbeat_details
        cursor = int(details[0]) if details else 0
        return await notify_subscribers(
            self.client,
            self.bel,
            run.outputs,
            signal_for_run(run.job_run_id, run.state, run.writes, run.missing, run.reason),
            after_id=cursor,
            page_size=self.page_size,
            on_page=activity.heartbeat,
        )


def signal_for_run(
    job_run_id: str, state: JobRunState, writes: list[InstanceRef], missing: list[str], reason: str | None
) -> SignalFor:
    instances = {w.ref: w.instance_id for w in writes}

    def signal(ref: str, _want_id: str) -> tuple[str, object] | None:
        if state is JobRunState.succeeded and instances.get(ref):
            notice = p.PartitionAvailable(ref=ref, instance_id=instances[ref], job_run_id=job_run_id)
            return p.SIGNAL_PARTITION_AVAILABLE, notice
        if state is JobRunState.dep_miss:
            return p.SIGNAL_DEP_MISS, p.DepMissNotice(job_run_id=job_run_id, missing=missing)
        if state is JobRunState.failed:
            notice_failed = p.PartitionFailedNotice(ref=ref, job_run_id=job_run_id, reason=reason or "failed")
            return p.SIGNAL_PARTITION_FAILED, notice_failed
        return None

    return signal
