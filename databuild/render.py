"""Rich renderings for humans; the CLI prints JSON of the same models with --json."""

from collections import Counter

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from databuild.bel.queries import BelQueries
from databuild.models import BuildStats, JobRun, JobRunState, Partition, PartitionStatus, Want, WantState
from databuild.views import FulfillmentNode, PartitionLineage

STATE_STYLE = {
    WantState.successful: "green",
    WantState.failed: "red",
    WantState.expired: "red",
    WantState.canceled: "yellow",
    WantState.building: "cyan",
    WantState.upstream_building: "magenta",
    WantState.new: "white",
    JobRunState.succeeded: "green",
    JobRunState.skipped: "green",
    JobRunState.failed: "red",
    JobRunState.dep_miss: "magenta",
    JobRunState.running: "cyan",
    JobRunState.queued: "white",
    PartitionStatus.live: "green",
    PartitionStatus.building: "cyan",
    PartitionStatus.failed: "red",
    PartitionStatus.missing: "white",
    PartitionStatus.tainted: "yellow",
}


def state(value: WantState | JobRunState | PartitionStatus) -> Text:
    return Text(value.value, style=STATE_STYLE.get(value, "white"))


def _short(uuid: str | None) -> str:
    return uuid[:8] if uuid else "-"


def want_label(want: Want) -> Text:
    text = Text.assemble(
        ("want ", "dim"), (want.ref, "bold"), " [", state(want.state), "] ", (want.want_id, "dim")
    )
    if want.sla_missed:
        text.append("  SLA missed", style="bold red")
    if want.reason and want.state is not WantState.successful:
        text.append(f"  {want.reason}", style="red")
    return text


def job_run_label(run: JobRun, relation: str | None = None) -> Text:
    text = Text.assemble(
        ("job run ", "dim"), run.job_run_id, " ", (run.job_label, "bold"), " [", state(run.state), "]"
    )
    if relation and relation != "executed":
        text.append(f" ({relation})", style="dim")
    if run.attempts > 1:
        text.append(f" attempts={run.attempts}", style="yellow")
    if run.missing:
        text.append(f" missing {len(run.missing)}", style="magenta")
    return text


def partition_label(p: Partition) -> Text:
    return Text.assemble(
        ("partition ", "dim"),
        (p.ref, "bold"),
        " [",
        state(p.status),
        "] ",
        ("uuid:" + _short(p.instance_id), "dim"),
    )


def fulfillment_tree(node: FulfillmentNode, tree: Tree | None = None) -> Tree:
    branch = Tree(want_label(node.want)) if tree is None else tree.add(want_label(node.want))
    if node.triggered_by:
        branch.add(Text(f"triggered by dep-miss of {node.triggered_by}", style="dim"))
    if node.partition is not None:
        branch.add(partition_label(node.partition))
    for link in node.job_runs:
        run_branch = branch.add(job_run_label(link.job_run, link.relation))
        for read in link.job_run.reads:
            run_branch.add(Text(f"read {read.ref} uuid:{_short(read.instance_id)}", style="dim"))
        for write in link.job_run.writes:
            run_branch.add(Text(f"wrote {write.ref} uuid:{_short(write.instance_id)}", style="green"))
    for child in node.derivatives:
        fulfillment_tree(child, branch)
    return branch


def lineage_view(view: PartitionLineage) -> RenderableType:
    up = Tree(Text("upstream", style="bold"))
    if view.built_by is not None:
        builder = up.add(job_run_label(view.built_by))
        for p in view.upstream:
            builder.add(partition_label(p))
    elif view.partition.external:
        up.add(Text("external: announced by publish", style="dim"))
    down = Tree(Text("downstream", style="bold"))
    for edge in view.downstream:
        branch = down.add(job_run_label(edge.job_run))
        for p in edge.partitions:
            branch.add(partition_label(p))
    if view.downstream_more:
        down.add(Text(f"+{view.downstream_more} more", style="dim"))
    return Group(partition_label(view.partition), up, down)


def wants_table(wants: list[Want]) -> Table:
    table = Table("want id", "ref", "state", "source", "data time", "SLA", "reason")
    for column in table.columns[:3]:
        column.no_wrap = True
    for w in wants:
        sla = (
            "-"
            if w.sla_deadline is None
            else f"{w.sla_deadline:%Y-%m-%d %H:%M}" + (" MISSED" if w.sla_missed else "")
        )
        table.add_row(
            w.want_id,
            w.ref,
            state(w.state),
            w.source.value,
            f"{w.data_timestamp:%Y-%m-%d %H:%M}",
            sla,
            w.reason or "",
        )
    return table


def partitions_table(parts: list[Partition]) -> Table:
    table = Table("ref", "status", "instance", "built by", "updated")
    table.columns[0].no_wrap = True
    for p in parts:
        table.add_row(
            p.ref,
            state(p.status),
            p.instance_id or "-",
            p.built_by or ("external" if p.external else "-"),
            f"{p.updated_at:%Y-%m-%d %H:%M:%S}",
        )
    return table


def job_runs_table(runs: list[JobRun]) -> Table:
    table = Table("job run", "job", "state", "outputs", "attempts", "missing / reason")
    table.columns[0].no_wrap = True
    for r in runs:
        table.add_row(
            r.job_run_id,
            r.job_label,
            state(r.state),
            ", ".join(r.outputs),
            str(r.attempts),
            ", ".join(r.missing) or (r.reason or ""),
        )
    return table


def progress_summary(root: Want | None, family: list[Want], runs: list[JobRun]) -> Table:
    table = Table.grid(padding=(0, 2))
    if root is None:
        table.add_row(Text("registering want...", style="dim"))
        return table
    table.add_row(want_label(root))
    counts = Counter(w.state for w in family if w.want_id != root.want_id)
    if counts:
        table.add_row(
            Text("derivative wants: " + ", ".join(f"{n} {s.value}" for s, n in sorted(counts.items())))
        )
    run_counts = Counter(r.state for r in runs)
    if run_counts:
        table.add_row(Text("job runs: " + ", ".join(f"{n} {s.value}" for s, n in sorted(run_counts.items()))))
    return table


def stats_view(stats: BuildStats) -> Group:
    table = Table("job", "succeeded", "skipped", "failed", "dep-miss", "in progress", "success rate")
    for job in stats.jobs:
        rate = "-" if job.success_rate is None else f"{job.success_rate:.1%}"
        counts = (job.succeeded, job.skipped, job.failed, job.dep_miss, job.in_progress)
        table.add_row(job.job_label, *(str(n) for n in counts), rate)
    summary = Text(
        f"builds avoided: {stats.builds_avoided}  (delegations: {stats.delegations_active} to running builds, "
        f"{stats.delegations_historical} to earlier builds)"
    )
    return Group(table, summary)


def progress(bel: BelQueries, current: Want | None) -> Table:
    """The live view of `want --wait`: the want, its derivative wants and job runs by state."""
    if current is None:
        return progress_summary(None, [], [])
    family = bel.wants(root_want_id=current.root_want_id or current.want_id, limit=10_000)
    runs: dict[str, JobRun] = {}
    for member in family:
        for _, run in bel.want_job_runs(member.want_id):
            runs[run.job_run_id] = run
    return progress_summary(current, family, list(runs.values()))
