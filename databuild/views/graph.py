"""The graph view: the jobs and output patterns of the graph, which patterns each job reads, how many
partitions of each pattern are in each status, and each job's policies (as declared, and in effect with
the settings). `GET /api/graph` returns it; the dashboard's `/graph` page draws it (databuild.web.graph_layout).

A job's inputs come from two sources, both mapped to patterns with ``Graph.pattern_for``:

* **declared**: its ``inputs=`` function, called with the placeholders of its latest succeeded run (a
  function that computes, such as "the last 7 days", needs real values), or before any run with each
  placeholder's own name (``date="date"``), which lists the plain ones (``f"raw/{date}"``);
* **observed**: what its latest succeeded run read (the BEL's read deps), so jobs that discover their
  inputs at run time have edges too, and a declaration that went stale shows as a difference.

Both are a handful of indexed lookups: the latest run of each job is one statement, whatever the size of
the log. The counts are one GROUP BY over the partitions, a pass over all of them: the web server counts in
the background (``partition_counter``), so its page and API answer at once on a big estate with counts a
few seconds old, and say when they were counted.
"""

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Literal

from pydantic import Field

from databuild.bel.queries import BelQueries
from databuild.config import Settings
from databuild.errors import GraphDefinitionError
from databuild.graph import Graph, Job
from databuild.models import ExecutorKind, JobRun, Model, PartitionStatus
from databuild.refreshed import Figure, Refreshed
from databuild.temporal.protocol import JobPolicy
from databuild.views.lineage import consistent

ExecutorSource = Literal["DATABUILD_JOB_EXECUTORS", "graph", "DATABUILD_EXECUTOR"]
PartitionCounts = dict[str | None, dict[PartitionStatus, int]]  # by glob (None: no pattern), then status
COUNT_EVERY = 2.0  # seconds between two counts of a web server's partitions
COUNT_PATIENCE = 0.5  # seconds a request waits for a count it started before it shows the last one


class PatternNode(Model):
    pattern: str
    glob: str = Field(description="the ref glob of its partitions (the lists' `pattern=` filter)")
    job: str | None = Field(description="the job that builds it; None: external (announced)")
    counts: dict[PartitionStatus, int] = Field(description="its partitions by status")

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class JobInput(Model):
    pattern: str
    declared: bool = Field(description="listed by the job's `inputs=`")
    observed: bool = Field(description="read by the job's latest succeeded run")


class JobPolicies(Model):
    """What ``@graph.job`` declares (None: not declared) and what is in effect with this server's
    settings, which workers share."""

    batch: int | None
    batch_window: timedelta | None = Field(description="DATABUILD_BATCH_WINDOW, of a batch job")
    pool: str | None
    pool_slots: int | None = Field(description="the pool's slots in DATABUILD_POOLS; None: not defined")
    max_running: int | None
    retries: int | None
    timeout: timedelta | None
    heartbeat_timeout: timedelta | None
    executor: ExecutorKind | None
    spark_conf: dict[str, str]
    effective: JobPolicy = Field(description="attempts, timeouts and lease of its runs")
    effective_executor: ExecutorKind
    executor_from: ExecutorSource = Field(description="which setting or declaration chose it")


class JobNode(Model):
    label: str
    outputs: list[str]
    inputs: list[JobInput]
    policies: JobPolicies
    latest_run: str | None = Field(description="its latest succeeded job run, whose reads are observed")
    inputs_note: str | None = Field(default=None, description="why its declared inputs are not listed")


class GraphView(Model):
    graph: str
    jobs: list[JobNode]
    patterns: list[PatternNode] = Field(description="external patterns first, then each job's outputs")
    unmatched: dict[PartitionStatus, int] = Field(
        description="partitions no pattern of the graph matches (built by a job since renamed or removed)"
    )
    counted_at: datetime | None = Field(
        default=None, description="when the partitions were counted; None: the first count is still running"
    )


def partition_counter(bel: BelQueries, graph: Graph) -> Refreshed[PartitionCounts]:
    """The graph's partitions counted by pattern and status in the background, at most every
    ``COUNT_EVERY`` seconds (one pass over every partition: seconds on a million)."""
    globs = [p.glob for p in graph.patterns]
    return Refreshed(
        lambda: bel.partitions.counts(globs),
        name="partition counts",
        every=COUNT_EVERY,
        patience=COUNT_PATIENCE,
    )


@consistent
def graph_view(
    bel: BelQueries, graph: Graph, settings: Settings, counter: Refreshed[PartitionCounts] | None = None
) -> GraphView:
    """The graph with its partitions counted now, or as ``counter`` last counted them."""
    patterns = graph.patterns
    counted = (
        counter.get()
        if counter is not None
        else Figure(bel.partitions.counts([p.glob for p in patterns]), datetime.now(UTC))
    )
    counts = counted.value if counted is not None else {}
    builders = {p.text: job.label for job in graph.jobs for p in job.outputs}
    latest = {run.job_label: run for run in bel.job_runs.latest_succeeded([j.label for j in graph.jobs])}
    jobs = []
    for job in graph.jobs:
        run = latest.get(job.label)
        declared, note = _declared(graph, job, run)
        observed = _patterns(graph, [read.ref for read in run.reads] if run else [])
        jobs.append(
            JobNode(
                label=job.label,
                outputs=[p.text for p in job.outputs],
                inputs=[
                    JobInput(pattern=p, declared=p in declared, observed=p in observed)
                    for p in sorted(declared | observed)
                ],
                policies=_policies(job, settings),
                latest_run=run.job_run_id if run else None,
                inputs_note=note,
            )
        )
    return GraphView(
        graph=graph.name,
        jobs=jobs,
        patterns=[
            PatternNode(pattern=p.text, glob=p.glob, job=builders.get(p.text), counts=counts.get(p.glob, {}))
            for p in patterns
        ],
        unmatched=counts.get(None, {}),
        counted_at=counted.at if counted is not None else None,
    )


def _patterns(graph: Graph, refs: Sequence[str]) -> set[str]:
    return {found.text for ref in refs if (found := graph.pattern_for(ref)) is not None}


def _declared(graph: Graph, job: Job, run: JobRun | None) -> tuple[set[str], str | None]:
    """The patterns ``job`` declares it reads, or why they cannot be listed."""
    if job.inputs is None:
        return set(), None
    samples = [{name: name for name in job.outputs[0].names}]
    if run is not None:  # a batch run's params are its first partition's
        samples.insert(0, run.partitions[0] if run.partitions else run.params)
    for params in samples:
        try:
            return _patterns(graph, job.declared_inputs(params)), None
        except GraphDefinitionError:
            continue
    return set(), "its inputs= needs real placeholder values: they are listed once it has succeeded"


def _policies(job: Job, settings: Settings) -> JobPolicies:
    # The precedence of databuild.jobs.executors.Executors.from_settings: the operator's per-job setting, then
    # the graph's executor=, then the worker's default.
    source: ExecutorSource
    if job.label in settings.job_executors:
        executor, source = settings.job_executors[job.label], "DATABUILD_JOB_EXECUTORS"
    elif job.executor is not None:
        executor, source = job.executor, "graph"
    else:
        executor, source = settings.executor, "DATABUILD_EXECUTOR"
    return JobPolicies(
        batch=job.batch,
        batch_window=settings.batch_window if job.batch is not None else None,
        pool=job.pool,
        pool_slots=settings.pools.get(job.pool) if job.pool is not None else None,
        max_running=job.max_running,
        retries=job.retries,
        timeout=job.timeout,
        heartbeat_timeout=job.heartbeat_timeout,
        executor=job.executor,
        spark_conf=job.spark_conf,
        effective=JobPolicy.of(job, settings),
        effective_executor=executor,
        executor_from=source,
    )
