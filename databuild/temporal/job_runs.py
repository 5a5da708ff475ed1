"""Job runs on Temporal, from outside workflows: starting the workflow of a run a want's decision queued."""

import logging

from temporalio.client import Client
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from databuild.models import job_run_workflow_id
from databuild.temporal.protocol import JOB_RUN_WORKFLOW, SA_JOB_LABEL, SA_ROOT_WANT_ID, ExecuteOrder

log = logging.getLogger(__name__)


def job_run_summary(order: ExecuteOrder) -> str:
    return f"job {order.job_label} -> {', '.join(order.outputs)}"


def job_run_search_attributes(order: ExecuteOrder, root_want_id: str) -> TypedSearchAttributes:
    return TypedSearchAttributes(
        [
            SearchAttributePair(SA_JOB_LABEL, order.job_label),
            SearchAttributePair(SA_ROOT_WANT_ID, root_want_id),
        ]
    )


async def start_job_run(
    client: Client, task_queue: str, order: ExecuteOrder, want_id: str, root_want_id: str
) -> None:
    """Start the workflow of the run ``order`` queued for want ``want_id``, once: an attempt made again
    (the decision's activity retried) finds it started, or ended, and leaves it be. It is no child of the
    want: it serves every want delegated to it and outlives the one that queued it."""
    workflow_id = job_run_workflow_id(order.job_label, order.job_run_id)
    try:
        await client.start_workflow(
            JOB_RUN_WORKFLOW,
            order.job_run_input(),
            id=workflow_id,
            task_queue=task_queue,
            # One workflow per job run, ever: an ended one is never started again.
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            static_summary=job_run_summary(order),
            # Its first task goes straight to this worker when it has room (no task queue round trip).
            request_eager_start=True,
            static_details=f"queued by want `{want_id}`, root `{root_want_id}`",
            search_attributes=job_run_search_attributes(order, root_want_id),
        )
    except WorkflowAlreadyStartedError:
        log.debug("job run %s was started before", order.job_run_id)
