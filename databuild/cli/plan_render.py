"""Plans for a terminal (``databuild want --plan``, ``databuild backfill --plan``)."""

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from databuild.domain.plans import Action, Plan, PlannedRun
from databuild.durations import format_duration


def plan_view(plan: Plan, what: str, limit: int = 20) -> Group:
    """A plan for a terminal: what it would build and in how many runs, what it finds done or blocked,
    how long it would take, the SLA it would miss; the runs by job, their outputs up to ``limit``."""
    counts = Table.grid(padding=(0, 2))
    for action, label in _PLAN_ACTIONS:
        if n := plan.count(action):
            counts.add_row(Text(label, style=_PLAN_STYLE.get(action, "")), f"{n:,}")
    runs = Table("job", "runs", "builds", box=None, header_style="bold")
    for label, found in _by_job(plan.runs).items():
        outputs = [ref for run in found for ref in run.outputs]
        shown = ", ".join(outputs[:limit]) + (
            f" (+{len(outputs) - limit:,} more)" if len(outputs) > limit else ""
        )
        runs.add_row(label, f"{len(found):,}", shown)
    lines: list[RenderableType] = [
        Text.assemble(("plan", "bold"), f" for {what}: ", ("nothing was recorded", "dim")),
        counts,
    ]
    if plan.runs:
        lines += [Text(f"{len(plan.runs):,} job run{'s' if len(plan.runs) != 1 else ''}:"), runs]
    lines.append(_plan_times(plan))
    for miss in plan.sla_misses[:limit]:
        lines.append(
            Text(
                f"would miss its SLA: {miss.ref} due {miss.deadline:%Y-%m-%d %H:%M} UTC, "
                f"live by {miss.eta_p90:%Y-%m-%d %H:%M} UTC (p90)",
                style="red",
            )
        )
    if len(plan.sla_misses) > limit:
        lines.append(Text(f"... and {len(plan.sla_misses) - limit:,} more would miss their SLA", style="red"))
    locked = [p.ref for p in plan.partitions if p.action is Action.fail_locked]
    if locked:
        lines.append(
            Text(
                f"blocked: {', '.join(locked[:limit])} fail-locked; fix the cause, then "
                f"`databuild resolve {locked[0]}`",
                style="red",
            )
        )
    lines += _stale_lines(plan, limit)
    if plan.discovered_at_run_time:
        later = plan.discovered_at_run_time
        lines.append(
            Text(
                f"inputs found when they run (their jobs declare none): {', '.join(later[:limit])}"
                + (f" (+{len(later) - limit:,} more)" if len(later) > limit else ""),
                style="dim",
            )
        )
    return Group(*lines)


_PLAN_ACTIONS = (
    (Action.build, "to build"),
    (Action.building, "being built (waited for)"),
    (Action.live, "live (used as it is)"),
    (Action.available, "external, available"),
    (Action.awaited, "external, not announced yet"),
    (Action.fail_locked, "fail-locked"),
    (Action.skipped, "skipped"),
)
_READY = (Action.live, Action.available)  # nothing to build or wait for
_PLAN_STYLE = {
    Action.build: "cyan",
    Action.live: "green",
    Action.fail_locked: "red",
    Action.awaited: "yellow",
}


def _by_job(runs: list[PlannedRun]) -> dict[str, list[PlannedRun]]:
    found: dict[str, list[PlannedRun]] = {}
    for run in runs:
        found.setdefault(run.job_label, []).append(run)
    return found


def _plan_times(plan: Plan) -> Text:
    if plan.eta_p50 is None or plan.eta_p90 is None:
        return _nothing_to_run(plan)
    timed = {run.job_label for run in plan.runs} - set(plan.untimed)
    if plan.runs and not timed:
        return Text(f"how long: unknown, no job it runs has succeeded before ({', '.join(plan.untimed)})")
    text = Text(
        f"expected live by {plan.eta_p50:%Y-%m-%d %H:%M:%S} UTC (p50), {plan.eta_p90:%Y-%m-%d %H:%M:%S} UTC "
        f"(p90), if every run that can go at once does; {format_duration(plan.work_p50)} of job time "
        f"(p50); confidence {plan.confidence}"
    )
    if plan.untimed:
        text.append(f"; never succeeded, counted as no time: {', '.join(plan.untimed)}", style="yellow")
    return text


def _nothing_to_run(plan: Plan) -> Text:
    """What a plan with no job to run finds: nothing to want, all live, or what holds the rest."""
    if not plan.partitions:
        return Text("nothing to do: it wants no partition")
    if all(p.action in _READY for p in plan.partitions):
        return Text("nothing to wait for: every wanted partition is live")
    held = [
        f"{n:,} {label}"
        for action, label in _PLAN_ACTIONS
        if action not in _READY and (n := plan.count(action))
    ]
    return Text(f"no job to run now: {', '.join(held)}", style="yellow")


def _stale_lines(plan: Plan, limit: int) -> list[RenderableType]:
    """Each stale live partition the plan reaches: rebuilt (``build (stale: ...)``, by a fresh want) or
    used as it is (``live (stale: ...)``, by any other)."""
    stale = [p for p in plan.partitions if p.stale]
    lines: list[RenderableType] = [
        Text(f"{p.action.value} (stale: {'; '.join(p.stale)}): {p.ref}", style=_PLAN_STYLE.get(p.action, ""))
        for p in stale[:limit]
    ]
    if len(stale) > limit:
        lines.append(Text(f"... and {len(stale) - limit:,} more stale", style="dim"))
    if any(p.action is Action.live for p in stale):
        lines.append(Text("a want uses a stale live partition as it is; --fresh rebuilds it", style="dim"))
    return lines
