"""What each run of a want schedule does: register the want for the scheduled time (idempotently)."""

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    # Imported once and shared by every run, not again into each run's sandbox (cheaper starts).
    from activities.wants import WantActivities
    from databuild.temporal import protocol as p
    from databuild.temporal.schedules import fill
    from workflows.calls import remote


@workflow.defn(name=p.SCHEDULED_WANT_WORKFLOW)
class ScheduledWantWorkflow:
    @workflow.run
    async def run(self, input: p.ScheduledWantInput) -> str:
        # The server stamps the scheduled time on every run, backfills included.
        at = workflow.info().typed_search_attributes.get(p.SA_SCHEDULED_START_TIME) or workflow.now()
        request = p.ScheduledWantRequest(
            ref=fill(input.pattern, at), data_timestamp=at, sla=input.sla, ttl=input.ttl
        )
        workflow.set_current_details(f"wanting `{request.ref}` for {at:%Y-%m-%d %H:%M}Z")
        return await remote(WantActivities.register_scheduled_want, request)
