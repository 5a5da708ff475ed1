"""The workers serving a task queue now, as Temporal sees them (those that asked it for work lately), with
the job versions each recorded in the BEL when it started."""

from datetime import UTC, datetime

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from databuild.bel.queries import BelQueries
from databuild.domain.workers import Environment, WorkerVersions, differing

# The one environment until there are more: every worker serving the configured task queue.
PRODUCTION = "prod"


async def polling(client: Client, namespace: str, task_queue: str) -> dict[str, datetime]:
    """Identity -> when it last polled, of every worker polling ``task_queue`` for workflow or activity
    tasks (Temporal forgets a poller a few minutes after its last poll)."""
    seen: dict[str, datetime] = {}
    for kind in (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY):
        request = DescribeTaskQueueRequest(
            namespace=namespace, task_queue=TaskQueue(name=task_queue), task_queue_type=kind
        )
        answer = await client.workflow_service.describe_task_queue(request)
        for poller in answer.pollers:
            at = poller.last_access_time.ToDatetime(tzinfo=UTC)
            seen[poller.identity] = max(at, seen.get(poller.identity, at))
    return seen


async def serving(client: Client, bel: BelQueries, namespace: str, task_queue: str) -> list[WorkerVersions]:
    """The workers polling ``task_queue`` now, with their job versions (a worker that recorded none, of a
    DataBuild from before workers recorded themselves, is listed with none)."""
    seen = await polling(client, namespace, task_queue)
    recorded = {w.identity: w for w in await bel.call(bel.workers.versions, sorted(seen))}
    return [
        recorded[identity].model_copy(update={"last_seen": at})
        if identity in recorded
        else WorkerVersions(
            identity=identity, task_queue=task_queue, graph="", versions={}, started_at=at, last_seen=at
        )
        for identity, at in sorted(seen.items())
    ]


async def environment(client: Client, bel: BelQueries, namespace: str, task_queue: str) -> Environment:
    workers = await serving(client, bel, namespace, task_queue)
    return Environment(name=PRODUCTION, task_queue=task_queue, workers=workers, differing=differing(workers))
