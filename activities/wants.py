"""BEL activities of the want workflow."""

import asyncio

from temporalio import activity
from temporalio.client import Client

from databuild import protocol as p
from databuild.bel import BuildEventLog
from databuild.config import Settings
from databuild.graph import Graph
from databuild.temporal import start_want


class WantActivities:
    def __init__(self, bel: BuildEventLog, graph: Graph, client: Client, settings: Settings) -> None:
        self.bel = bel
        self.graph = graph
        self.client = client
        self.settings = settings

    @activity.defn(name=p.ACT_REGISTER_WANT)
    async def register_want(self, input: p.WantInput) -> None:
        await asyncio.to_thread(self.bel.register_want, input.spec)

    @activity.defn(name=p.ACT_DECIDE)
    async def decide(self, input: p.DecideInput) -> p.Decision:
        want = await asyncio.to_thread(self.bel.want, input.want_id)
        resolution = self.graph.resolve(want.ref)
        decision = await asyncio.to_thread(self.bel.decide, input.want_id, input.seq, resolution)
        if decision.kind is p.DecisionKind.execute:
            decision = decision.model_copy(
                update={
                    "policy": p.JobPolicy(
                        heartbeat_timeout=self.settings.job_heartbeat_timeout,
                        start_to_close_timeout=self.settings.job_start_to_close_timeout,
                        attempts=self.settings.job_attempts,
                    )
                }
            )
        return decision

    @activity.defn(name=p.ACT_AWAIT_DEPENDENCIES)
    async def await_dependencies(self, input: p.DependenciesInput) -> p.DependenciesStatus:
        want = await asyncio.to_thread(self.bel.want, input.want_id)
        derivatives = [want.spec.derive(ref, want.want_id) for ref in input.missing]
        status = await asyncio.to_thread(
            self.bel.await_dependencies, input.want_id, input.job_run_id, input.missing, derivatives
        )
        pending = [d for d in derivatives if d.ref not in status.live and d.ref not in status.failed]
        await asyncio.gather(*(start_want(self.client, d, self.settings.task_queue) for d in pending))
        return status

    @activity.defn(name=p.ACT_FINISH_WANT)
    async def finish_want(self, input: p.FinishInput) -> None:
        await asyncio.to_thread(
            self.bel.finish_want, input.want_id, input.state, input.reason, input.instance_id
        )

    @activity.defn(name=p.ACT_RECORD_SLA_MISSED)
    async def record_sla_missed(self, input: p.SlaMissedInput) -> None:
        await asyncio.to_thread(self.bel.mark_sla_missed, input.want_id, input.deadline)
