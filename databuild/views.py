"""Detail views assembled from BEL lookups: want fulfillment tree, partition lineage."""

from databuild.bel.queries import BelQueries
from databuild.models import JobRun, JobRunState, Model, Partition, Want


class JobRunLink(Model):
    relation: str  # executed | delegated | skipped
    job_run: JobRun


class FulfillmentNode(Model):
    want: Want
    partition: Partition | None
    job_runs: list[JobRunLink]
    triggered_by: str | None  # the dep-miss job run of the parent that spawned this derivative want
    derivatives: list["FulfillmentNode"]


def fulfillment(bel: BelQueries, want_id: str, limit: int = 10_000) -> FulfillmentNode:
    """The tree of work done for a want: its job runs, its partition, and derivative wants, recursively."""
    root = bel.want(want_id)
    family = bel.wants(root_want_id=root.root_want_id or root.want_id, limit=limit)
    children: dict[str, list[Want]] = {}
    for want in family:
        if want.parent_want_id:
            children.setdefault(want.parent_want_id, []).append(want)

    def node(want: Want, triggered_by: str | None, seen: frozenset[str]) -> FulfillmentNode:
        runs = [JobRunLink(relation=rel, job_run=run) for rel, run in bel.want_job_runs(want.want_id)]
        misses = {
            ref: link.job_run.job_run_id
            for link in runs
            if link.job_run.state is JobRunState.dep_miss
            for ref in link.job_run.missing
        }
        kids = sorted(children.get(want.want_id, []), key=lambda w: w.ref)
        return FulfillmentNode(
            want=want,
            partition=bel.find_partition(want.ref),
            job_runs=runs,
            triggered_by=triggered_by,
            derivatives=[
                node(kid, misses.get(kid.ref), seen | {want.want_id})
                for kid in kids
                if kid.want_id not in seen
            ],
        )

    return node(root, None, frozenset())


class LineageEdge(Model):
    job_run: JobRun
    partitions: list[Partition]


class PartitionLineage(Model):
    partition: Partition
    built_by: JobRun | None
    upstream: list[Partition]
    downstream: list[LineageEdge]
    downstream_more: int


def lineage(bel: BelQueries, ref: str, fan_out: int = 20) -> PartitionLineage:
    """Where the live instance of ``ref`` came from and who read it."""
    partition = bel.partition(ref)
    builder = bel.job_run(partition.built_by) if partition.built_by else None
    upstream = [p for r in (builder.reads if builder else []) if (p := bel.find_partition(r.ref)) is not None]
    edges, total = bel.consumers_of(partition.instance_id, fan_out) if partition.instance_id else ([], 0)
    runs = {run.job_run_id: run for run in bel.job_runs_by_id(sorted({run_id for run_id, _ in edges}))}
    outputs: dict[str, list[Partition]] = {}
    for run_id, output in edges:
        if (p := bel.find_partition(output.ref)) is not None:
            outputs.setdefault(run_id, []).append(p)
    downstream = [LineageEdge(job_run=runs[run_id], partitions=parts) for run_id, parts in outputs.items()]
    return PartitionLineage(
        partition=partition,
        built_by=builder,
        upstream=upstream,
        downstream=downstream,
        downstream_more=max(total - len(edges), 0),
    )
