"""Rich renderings for humans; the CLI prints JSON of the same models with --json."""

import contextlib
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from databuild.backfill import BackfillProgress
from databuild.cli.render_cost import add_cost
from databuild.domain.checks import Recheck
from databuild.domain.estimates import Estimate
from databuild.domain.staleness import StalePartition, StaleReason
from databuild.durations import format_duration
from databuild.models import (
    BuildStats,
    CheckResult,
    Instance,
    InstanceStatus,
    JobRun,
    JobRunState,
    Partition,
    PartitionStatus,
    TableCommit,
    TaintImpact,
    Want,
    WantState,
)
from databuild.views.lineage import FamilyProgress, JobRunView, PartitionView, RelatedEntities, WantView
from databuild.views.why import Why

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
    JobRunState.cancelled: "yellow",
    JobRunState.running: "cyan",
    JobRunState.queued: "white",
    PartitionStatus.live: "green",
    PartitionStatus.building: "cyan",
    PartitionStatus.failed: "red",
    PartitionStatus.missing: "white",
    PartitionStatus.tainted: "yellow",
}

if TYPE_CHECKING:  # gc's module loads pyarrow, which only `databuild gc` needs
    from databuild.operations.garbage import GcReport


INSTANCE_STYLE = {
    InstanceStatus.live: "green",
    InstanceStatus.superseded: "dim",
    InstanceStatus.tainted: "yellow",
}


def state(value: WantState | JobRunState | PartitionStatus) -> Text:
    return Text(value.value, style=STATE_STYLE.get(value, "white"))


def run_state(run: JobRun) -> Text:
    """A job run's state; a queued run waiting for a pool slot says so."""
    return Text(run.status, style=STATE_STYLE.get(run.state, "white"))


def _short(uuid: str | None) -> str:
    return uuid[:8] if uuid else "-"


def want_label(want: Want) -> Text:
    text = Text.assemble(
        ("want ", "dim"), (want.ref, "bold"), " [", state(want.state), "] ", (want.want_id, "dim")
    )
    if want.fresh:
        text.append("  fresh", style="cyan")
    if want.cause:  # made by the system (late data): why
        text.append(f"  {want.cause}", style="cyan")
    if want.sla_missed:
        text.append("  SLA missed", style="bold red")
    if want.reason:  # a successful want's reason: a fresh want that accepted a stale instance, and why
        text.append(f"  {want.reason}", style="red" if want.state is not WantState.successful else "dim")
    return text


def job_run_label(run: JobRun, relation: str | None = None) -> Text:
    text = Text.assemble(
        ("job run ", "dim"), run.job_run_id, " ", (run.job_label, "bold"), " [", run_state(run), "]"
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


def instance_label(instance_id: str | None, ref: str, index: RelatedEntities, verb: str = "") -> Text:
    """``verb ref uuid:abcd1234 [live, stale, 2 checks passed]``: an instance as the index knows it."""
    text = Text(f"{verb} " if verb else "", style="dim")
    text.append(ref, style="bold")
    text.append(f" uuid:{_short(instance_id)}", style="dim")
    found = index.instances.get(instance_id or "")
    if found is not None:
        text.append(" [")
        text.append(found.status.value, style=INSTANCE_STYLE[found.status])
        if found.stale or instance_id in index.stale:
            text.append(", stale", style="yellow")
        failed = [c.name for c in found.checks if not c.passed]
        if failed:
            text.append(f", check failed: {', '.join(failed)}", style="red")
        elif found.checks:
            text.append(
                f", {len(found.checks)} check{'s' if len(found.checks) != 1 else ''} passed", style="green"
            )
        text.append("]")
    return text


DECLARED = ""  # a derivative want started for a declared input, not by a dep-miss
MAX_TREE_DEPTH = 40  # deeper wants are listed by `databuild wants show` on their own


def fulfillment_tree(view: WantView, *, expand: bool = False) -> Tree:
    """The want fulfillment tree. Retries of one build collapse to one line unless ``expand``; a
    derivative want shared by several wants is drawn once (later: "shown above")."""
    tree = Tree("")
    _fulfillment_node(view, view.data.want_id, None, tree, expand, set(), 0)
    root = tree.children[0]
    if view.data.estimate is not None:
        root.children.insert(0, Tree(sla_estimate(view.index.wants[view.data.want_id], view.data.estimate)))
    return root


def sla_estimate(want: Want, estimate: Estimate) -> Text:
    """One line: the deadline, when the partition is estimated live, how sure, and what takes longest."""
    deadline = want.sla_deadline
    risky = deadline is not None and estimate.at_risk(deadline)
    text = Text("SLA ", style="bold")
    text.append(f"due {deadline:%Y-%m-%d %H:%M}Z; " if deadline else "")
    earliest = "at the earliest " if estimate.confidence.value == "none" else ""
    text.append(
        f"estimated live {earliest}{estimate.eta_p90:%Y-%m-%d %H:%M:%S}Z (p90)",
        style="red" if risky else "green",
    )
    text.append(f", {estimate.confidence.value} confidence")
    if estimate.slowest_step:
        text.append(f"; slowest step left: {estimate.slowest_step}")
    if estimate.external:
        text.append(f"; waits for external {', '.join(estimate.external)}")
    return text


def _fulfillment_node(
    view: WantView,
    want_id: str,
    triggered_by: str | None,
    parent: Tree,
    expand: bool,
    shown: set[str],
    depth: int,
) -> None:
    index = view.index
    want = index.wants[want_id]
    branch = parent.add(want_label(want))
    if triggered_by == DECLARED:
        branch.add(Text("a declared input of its parent's job", style="dim"))
    elif triggered_by:
        branch.add(Text(f"triggered by dep-miss of {triggered_by}", style="dim"))
    if want_id in shown:
        branch.add(Text("(shown above)", style="dim"))
        return
    shown.add(want_id)
    if depth >= MAX_TREE_DEPTH:
        branch.add(Text(f"... deeper: databuild wants show {want_id}", style="dim"))
        return
    node = view.data.nodes[want_id]
    if node.instance_id:
        branch.add(instance_label(node.instance_id, want.ref, index, "fulfilled by"))
    for group in node.job_runs:
        runs = [index.job_runs[link.job_run_id] for link in group.runs]
        last = runs[-1]
        if len(runs) == 1 or expand:
            for link, run in zip(group.runs, runs, strict=True):
                _run_branch(branch.add(job_run_label(run, link.relation)), run, index)
        else:
            states = " → ".join(r.state.value for r in runs)
            label = job_run_label(last, group.last.relation)
            label.append(f"  ({len(runs)} runs: {states}; --expand shows each)", style="dim")
            _run_branch(branch.add(label), last, index)
    for edge in node.derivatives:
        _fulfillment_node(view, edge.want_id, edge.triggered_by or DECLARED, branch, expand, shown, depth + 1)


def _run_branch(branch: Tree, run: JobRun, index: RelatedEntities) -> None:
    for read in run.reads:
        branch.add(instance_label(read.instance_id, read.ref, index, "read"))
    for write in run.writes:
        branch.add(instance_label(write.instance_id, write.ref, index, "wrote"))
    for ref in run.missing:
        branch.add(Text(f"missing {ref}", style="magenta"))


def lineage_view(view: PartitionView) -> RenderableType:
    data, index = view.data, view.index
    partition = index.partitions[data.ref]
    head = partition_label(partition)
    if partition.generation:
        head.append(f"  tainted {partition.generation}x", style="yellow")
    if partition.reason:
        head.append(f"  ({partition.reason})", style="yellow")
    focus = instance_label(data.instance_id, data.ref, index, "instance")
    shown = index.instances.get(data.instance_id or "")
    if shown is not None:
        instance_details(focus, shown, view.stale)
    up = Tree(Text("upstream", style="bold"))
    if data.built_by is not None:
        builder = up.add(job_run_label(index.job_runs[data.built_by]))
        for read in index.job_runs[data.built_by].reads:
            how = "built on previous" if read.instance_id in data.previous else "read"
            builder.add(instance_label(read.instance_id, read.ref, index, how))
    elif data.instance_id and index.instances[data.instance_id].external:
        up.add(Text("external: announced by publish", style="dim"))
    down = Tree(Text("downstream", style="bold"))
    for edge in data.downstream:
        branch = down.add(job_run_label(index.job_runs[edge.job_run_id]))
        for instance_id in edge.instance_ids:
            branch.add(instance_label(instance_id, index.instances[instance_id].ref, index, "built"))
    if data.downstream_more:
        down.add(Text(f"+{data.downstream_more} more (--offset to page)", style="dim"))
    if not data.downstream and not data.downstream_more:
        down.add(Text("nothing has read this instance", style="dim"))
    history = Tree(Text(f"instances ({data.history_total})", style="bold"))
    for instance_id in data.history:
        label = instance_label(instance_id, data.ref, index)
        past = index.instances.get(instance_id)
        if past is not None and past.facts is not None:
            label.append(f"  {past.facts.summary}", style="dim")
        if past is not None and past.schema_changed:
            label.append("  schema changed", style="yellow")
        if past is not None and past.table is not None and past.table.snapshot_id is not None:
            label.append(f"  snapshot {past.table.snapshot_id}", style="dim")
        if past is not None and past.location:
            label.append(f"  {past.location}", style="dim cyan")
        history.add(label)
    return Group(head, focus, up, down, history)


def instance_details(focus: Text, shown: Instance, stale: Sequence[StaleReason]) -> None:
    """What `partitions show` says of the instance it is about, under its label."""
    focus.append(f"\n  location {shown.location or '(none recorded)'}", style="cyan")
    if shown.pinned:
        focus.append("  pinned", style="magenta")
    if shown.facts is not None:
        focus.append(f"\n  facts {shown.facts.summary}")
        columns = ", ".join(f"{c.name} {c.type}" for c in shown.facts.columns)
        focus.append(f"\n  schema {columns or '(no columns)'}")
    if shown.schema_changed:
        focus.append("  schema changed", style="bold yellow")
    if shown.job_version is not None:
        focus.append(f"\n  job version {shown.job_version}")
    if shown.table is not None:
        focus.append("\n  table ")
        focus.append_text(table_commit(shown.table))
    for reason in stale:
        focus.append(f"\n  stale: {reason}", style="yellow")
    if shown.checks:
        for line in check_lines(shown.checks).split("\n"):
            focus.append("\n  check ")
            focus.append_text(line)


def table_commit(commit: TableCommit) -> Text:
    """``default.daily_users (iceberg) snapshot 123, committed 2024-01-03 09:00:00 UTC``."""
    text = Text(f"{commit.table} ({commit.format})")
    if commit.snapshot_id is not None:
        text.append(f" snapshot {commit.snapshot_id}", style="bold")
    text.append(f", committed {commit.committed_at:%Y-%m-%d %H:%M:%S} UTC")
    if commit.removed_at is not None:
        text.append(f", taken out {commit.removed_at:%Y-%m-%d %H:%M:%S} UTC", style="yellow")
    return text


def check_lines(checks: Sequence[CheckResult]) -> Text:
    """``passed not_null(id) (blocking) no nulls in id``, one check a line."""
    text = Text()
    for n, check in enumerate(checks):
        text.append("\n" if n else "")
        text.append("passed" if check.passed else "FAILED", style="green" if check.passed else "bold red")
        text.append(f" {check.name}", style="bold")
        text.append(f" ({check.severity.value}) {check.message}", style="dim" if check.passed else "")
    return text


def recheck(found: Recheck) -> RenderableType:
    head = Text(f"checked {found.ref} instance {found.instance_id}:")
    if found.fail_locked:
        verdict = Text(
            f"{found.ref} is fail-locked: a blocking check failed, so its instance is out of service (what "
            f"was built from it shows stale); fix the cause, then `databuild resolve {found.ref}`",
            style="bold red",
        )
    else:
        verdict = Text(f"{found.ref} stays live", style="green")
    return Group(head, check_lines(found.results), verdict)


def job_run_detail(view: JobRunView) -> Tree:
    data, index = view.data, view.index
    run = index.job_runs[data.job_run_id]
    tree = Tree(job_run_label(run))
    tree.add(Text(f"workflow {run.workflow_id}", style="dim"))
    wanted = tree.add(Text("wanted by", style="bold"))
    for link in data.wanted_by:
        wanted.add(Text.assemble(want_label(index.wants[link.want_id]), (f" ({link.relation})", "dim")))
    if data.wanted_by_total > len(data.wanted_by):
        wanted.add(Text(f"+{data.wanted_by_total - len(data.wanted_by)} more", style="dim"))
    _run_branch(tree.add(Text("read / wrote", style="bold")), run, index)
    history = tree.add(Text("status history", style="bold"))
    for change in data.status_history:
        line = Text.assemble(f"{change.at:%Y-%m-%d %H:%M:%S} ", state(change.state))
        if change.detail:
            line.append(f"  {change.detail}", style="dim")
        history.add(line)
    if data.derivatives:
        derived = tree.add(Text("derivative wants (dep-miss)", style="bold"))
        for d in data.derivatives:
            child = index.wants.get(d.derivative_want_id or "")
            derived.add(want_label(child) if child else Text(f"{d.ref} (no want)", style="dim"))
    if data.delegations:
        delegated = tree.add(Text("delegated to this run", style="bold"))
        for delegation in data.delegations:
            delegated.add(Text(f"{delegation.ref} by want {delegation.want_id} ({delegation.kind})"))
        if data.delegations_total > len(data.delegations):
            delegated.add(Text(f"+{data.delegations_total - len(data.delegations)} more", style="dim"))
    if run.partitions:
        tree.add(Text(f"batch of {len(run.partitions)} partitions", style="bold"))
    if run.missing_for:
        missed = tree.add(Text("missing, by output (each output's want waits for these)", style="bold"))
        for out, refs in sorted(run.missing_for.items()):
            missed.add(Text.assemble(out, (": " + (", ".join(refs) or "none: decides again at once"), "dim")))
    if run.reason:
        tree.add(Text(f"reason: {run.reason}", style="red" if run.state is JobRunState.failed else "dim"))
    add_cost(tree, data.cost)
    if run.attempts:
        tree.add(Text(f"log: databuild job-runs show {run.job_run_id} --log [--attempt N]", style="dim"))
    return tree


def taint_impact(impact: TaintImpact, limit: int = 50) -> RenderableType:
    current = impact.current
    table = Table("depth", "ref", "instance", "today")
    for d in impact.downstream[:limit]:
        table.add_row(str(d.depth), d.ref, d.instance_id, "current" if d.current else "older instance")
    summary = Text(
        f"tainting {impact.ref} (uuid:{impact.instance_id}) makes {len(impact.downstream)} downstream "
        f"instance(s) stale, {len(current)} of them current"
    )
    if len(impact.downstream) > limit:
        summary.append(f"; the first {limit} are shown (--json lists all)", style="dim")
    return Group(summary, table) if impact.downstream else summary


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


def partitions_table(parts: list[Partition], stale: Mapping[str, list[StaleReason]]) -> Table:
    """``stale``: the reasons of the stale live instances, by UUID."""
    table = Table("ref", "status", "instance", "built by", "updated")
    table.columns[0].no_wrap = True
    for p in parts:
        why = stale.get(p.instance_id or "")
        table.add_row(
            p.ref,
            state(p.status)
            + (Text(f" ({p.reason})", style="dim") if p.reason else Text(""))
            + (Text(f" · stale: {why[0]}", style="yellow") if why else Text(""))
            + (Text(f" (+{len(why) - 1} more)", style="dim") if why and len(why) > 1 else Text("")),
            p.instance_id or "-",
            p.built_by or ("external" if p.external else "-"),
            f"{p.updated_at:%Y-%m-%d %H:%M:%S}",
        )
    return table


def stale_table(stale: list[StalePartition]) -> RenderableType:
    if not stale:
        return Text("nothing is stale")
    table = Table("ref", "instance", "job (version)", "why stale")
    table.columns[0].no_wrap = True
    for p in stale:
        job = "external" if p.job_label is None else f"{p.job_label} ({p.job_version or 'not recorded'})"
        table.add_row(p.ref, p.instance_id, job, "\n".join(str(r) for r in p.reasons))
    return Group(table, Text(f"{len(stale)} stale; `databuild why REF` explains one", style="dim"))


def why_view(found: Why) -> RenderableType:
    stale = Text(" (stale)", style="yellow") if found.stale else Text("")
    tree = Tree(Text.assemble(Text(found.ref, style="bold"), " ", state(found.status), stale))
    for fact in found.chain:
        at = f"{fact.at:%Y-%m-%d %H:%M:%S} " if fact.at is not None else ""
        tree.add(Text.assemble(Text(at, style="dim"), fact.text))
    return tree


def job_runs_table(runs: list[JobRun]) -> Table:
    table = Table("job run", "job", "state", "outputs", "attempts", "missing / reason")
    table.columns[0].no_wrap = True
    for r in runs:
        table.add_row(
            r.job_run_id,
            r.job_label,
            run_state(r),
            ", ".join(r.outputs),
            str(r.attempts),
            ", ".join(r.missing) or (r.reason or ""),
        )
    return table


def stats_view(stats: BuildStats) -> Group:
    table = Table(
        "job", "succeeded", "skipped", "failed", "dep-miss", "cancelled", "in progress", "success rate"
    )
    for job in stats.jobs:
        rate = "-" if job.success_rate is None else f"{job.success_rate:.1%}"
        counts = (job.succeeded, job.skipped, job.failed, job.dep_miss, job.cancelled, job.in_progress)
        table.add_row(job.job_label, *(str(n) for n in counts), rate)
    summary = Text(
        f"builds avoided: {stats.builds_avoided}  (delegations: {stats.delegations_active} to running builds, "
        f"{stats.delegations_historical} to earlier builds)"
    )
    return Group(table, summary)


def gc_report(report: "GcReport") -> Group:
    table = Table("kind", "location", "why", title="would delete" if report.dry_run else "deleted")
    for item in report.deleted:
        table.add_row(item.kind, Text(item.location), item.reason)
    kept = ", ".join(f"{n} {why}" for why, n in sorted(report.kept.items())) or "none"
    verb = "to delete" if report.dry_run else "deleted"
    expired = f"; {report.expired_snapshots} table snapshot(s) expired" if report.expired_snapshots else ""
    summary = Text(
        f"{len(report.deleted)} {verb} (retention {format_duration(report.keep)}); kept: {kept}{expired}"
    )
    return Group(table, summary)


@contextlib.contextmanager
def live_block(console: Console) -> Iterator[None]:
    """Around a live display (rich's Live or Progress): rich ends its last line only on a terminal, so in
    a log or a pipe what was printed next (a tree, a summary, an error) ran into it."""
    try:
        yield
    finally:
        if not console.is_terminal:
            console.line()


def progress(view: FamilyProgress | None) -> Table:
    """The live view of `want --wait`: the want, its derivative wants and job runs by state."""
    table = Table.grid(padding=(0, 2))
    if view is None or view.want is None:
        table.add_row(Text("registering want...", style="dim"))
        return table
    table.add_row(want_label(view.want))
    counts = Counter(w.state for w in view.family if w.want_id != view.want.want_id)
    if counts:
        table.add_row(
            Text("derivative wants: " + ", ".join(f"{n} {s.value}" for s, n in sorted(counts.items())))
        )
    run_counts = Counter(view.job_runs.values())
    if run_counts:
        table.add_row(Text("job runs: " + ", ".join(f"{n} {s.value}" for s, n in sorted(run_counts.items()))))
    return table


def backfill_states(progress: BackfillProgress) -> str:
    """``built 40 · building 3 · failed 1``: the backfill's wants by state, final ones first."""
    counts = sorted(progress.by_state.items(), key=lambda item: (not item[0].is_final, item[0].value))
    return " · ".join(f"{state.value} {n}" for state, n in counts) or "no wants yet"


def backfill_summary(progress: BackfillProgress) -> Text:
    request = progress.request
    text = Text(f"backfill {progress.backfill_id}: {request.pattern} ", style="bold")
    text.append(
        f"from {request.start:%Y-%m-%d %H:%M} to {request.end:%Y-%m-%d %H:%M} every {format_duration(request.step)}\n"
    )
    if progress.canceled:
        text.append("CANCELLED (wants registered from now on end cancelled)\n", style="red")
    elif progress.paused:
        text.append("PAUSED (databuild resume to go on)\n", style="yellow")
    text.append(
        f"{progress.registered}/{progress.partitions} wants registered, {progress.started} started by its window; "
        f"{progress.done} ended: "
    )
    text.append(backfill_states(progress))
    return text
