"""The cost of one attempt's Spark work, from Spark's own accounting: the driver's status store.

Every Spark application keeps an ``AppStatusStore`` (what the Spark UI and its REST API show), fed by a
listener on the driver, whether or not the UI is enabled (DataBuild disables it). Its jobs carry their job
group, and its stage data the sums of the task metrics: executor run time and CPU time, input, output and
shuffle bytes, tasks. PySpark's ``StatusTracker`` gives the job and stage ids of a group but no metrics,
so the store is read through the JVM gateway. The listener is asynchronous: its queue is drained before
reading, so the tasks of the group's last Spark job are in. The store keeps the latest
``spark.ui.retainedJobs`` and ``spark.ui.retainedStages`` (1,000 each): an attempt is read as it ends,
long before a busy worker could push its stages out."""

import logging
from typing import TYPE_CHECKING, Any

from databuild.domain.cost import SparkCost

if TYPE_CHECKING:
    from pyspark import SparkContext

# Read each attempt's cost (the session executor). Turned off only by bench/bench_orchestration.py, which
# times jobs with and without it in one run to measure what reading it costs.
ACCOUNTING = True
# How long to wait for Spark's listener queue to drain before reading what it has (milliseconds).
DRAIN_TIMEOUT_MS = 10_000

log = logging.getLogger(__name__)


def group_cost(context: "SparkContext", group: str) -> SparkCost:
    """What Spark accounted for every Spark job started in ``group``, summed over the attempts of their
    stages that ran (a stage shared by two jobs counts once). Raises if the JVM cannot be read."""
    jvm_context = context._jsc.sc()
    try:
        jvm_context.listenerBus().waitUntilEmpty(DRAIN_TIMEOUT_MS)
    except Exception as error:  # a timeout: the figures may miss the last tasks; say so, still read
        log.warning("Spark's listener queue did not drain within %d ms: %s", DRAIN_TIMEOUT_MS, error)
    store = jvm_context.statusStore()
    tracker = context.statusTracker()
    job_ids = tracker.getJobIdsForGroup(group)
    stage_ids: set[int] = set()
    for job_id in job_ids:
        info = tracker.getJobInfo(job_id)
        stage_ids.update(info.stageIds if info else [])
    total = SparkCost(task_seconds=0.0, cpu_seconds=0.0, spark_jobs=len(job_ids))
    for stage_id in sorted(stage_ids):
        for data in _stage_attempts(store, stage_id):
            total = total.plus(_stage_cost(data))
    return total


def _stage_attempts(store: Any, stage_id: int) -> list[Any]:
    """Every attempt of a stage (its Scala method's defaults passed as Py4J cannot leave them out)."""
    try:
        found = store.stageData(
            stage_id,
            False,
            getattr(store, "stageData$default$3")(),
            False,
            getattr(store, "stageData$default$5")(),
        )
    except Exception:  # evicted from the store (see the module's note): nothing to count
        return []
    return [found.apply(i) for i in range(found.size())]


def _stage_cost(data: Any) -> SparkCost:
    if str(data.status()) == "SKIPPED":  # its output was reused: it ran no task
        return SparkCost(task_seconds=0.0, cpu_seconds=0.0)
    return SparkCost(
        task_seconds=data.executorRunTime() / 1000,  # milliseconds
        cpu_seconds=data.executorCpuTime() / 1e9,  # nanoseconds
        input_bytes=data.inputBytes(),
        output_bytes=data.outputBytes(),
        shuffle_read_bytes=data.shuffleReadBytes(),
        shuffle_write_bytes=data.shuffleWriteBytes(),
        tasks=data.numCompleteTasks() + data.numFailedTasks() + data.numKilledTasks(),
    )
