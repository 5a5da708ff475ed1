"""Rich renderings of cost: a report's table, and a job run's cost in its detail tree."""

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from databuild.domain.cost import CostReport, CostRow, RunCost, SparkCost
from databuild.models import format_bytes as size
from databuild.views.lineage import PartitionView


def seconds(value: float) -> str:
    return f"{value:,.1f}"


def _spent(row: CostRow) -> str:
    text = seconds(row.task_seconds)
    return f"{text} (+{row.unknown_attempts} unknown)" if row.unknown_attempts else text


def _saved(row: CostRow) -> str:
    text = seconds(row.task_seconds_saved)
    return f"{text} (+{row.unvalued_avoided} unvalued)" if row.unvalued_avoided else text


# Below this many columns the table keeps what was spent and saved, and leaves Spark's detail out (at 80
# columns ten columns cut every header to two letters).
WIDE = 120


def cost_table(report: CostReport, width: int = WIDE) -> RenderableType:
    """The report as a table; in a terminal narrower than ``WIDE``, without CPU, bytes and tasks."""
    if not report.rows:
        return Text("no job run has recorded its cost, and no want was delegated" + _scope(report))
    wide = width >= WIDE
    headers = [report.by, "builds run", "avoided (active/historical)", "task-s spent", "task-s saved"]
    table = Table(*headers, *(["CPU s", "input", "output", "shuffle", "tasks"] if wide else []))
    for row in [*report.rows, report.total]:
        cells: list[str | Text] = [
            Text(row.key, style="bold" if row is report.total else "", overflow="fold"),
            str(row.builds_run),
            f"{row.builds_avoided} ({row.avoided_active}/{row.avoided_historical})",
            _spent(row),
            _saved(row),
        ]
        if wide:
            cells += [
                seconds(row.cpu_seconds),
                size(row.input_bytes),
                size(row.output_bytes),
                size(row.shuffle_bytes),
                str(row.tasks),
            ]
        table.add_row(*cells)
    note = "task-seconds: Spark executor run time; a run is shared evenly among its outputs"
    if report.total.unknown_attempts or report.total.unvalued_avoided:
        note += "; unknown: the executor (Spark Connect) cannot report it, or the run recorded none"
    if not wide:
        note += f"; CPU, bytes and tasks in a terminal of {WIDE} columns or more, or with --json"
    return Group(table, Text(note + _scope(report), style="dim"))


def _scope(report: CostReport) -> str:
    scope = f" (refs {report.pattern})" if report.pattern else ""
    return scope + (f" since {report.since:%Y-%m-%d %H:%M:%S}" if report.since else "")


def cost_line(cost: SparkCost) -> str:
    return (
        f"{seconds(cost.task_seconds)} task-s, {seconds(cost.cpu_seconds)} CPU s, {cost.tasks} tasks in "
        f"{cost.spark_jobs} Spark jobs; in {size(cost.input_bytes)}, out {size(cost.output_bytes)}, "
        f"shuffle {size(cost.shuffle_bytes)}"
    )


def instance_cost(view: PartitionView) -> list[RenderableType]:
    """Under a partition's lineage: its share of the run that built it, if that is known."""
    if view.cost is None:
        return []
    return [Text(f"cost: {cost_line(view.cost)} (its share of run {view.data.built_by})", style="dim")]


def add_cost(tree: Tree, cost: RunCost | None) -> None:
    """A job run's cost under its detail tree: each attempt's, and the shares of a run of several outputs."""
    if cost is None or not cost.attempts:
        return
    branch = tree.add(Text("cost (Spark's accounting)", style="bold"))
    for a in cost.attempts:
        what = cost_line(a.cost) if a.cost is not None else f"unknown: {a.unknown_reason}"
        branch.add(Text(f"attempt {a.attempt} ({a.executor}): {what}"))
    if cost.total is not None and len(cost.per_partition) > 1:
        share = next(iter(cost.per_partition.values()))
        branch.add(Text(f"each of its {len(cost.per_partition)} outputs: {cost_line(share)}", style="dim"))
