"""`databuild schedule add|list|remove|backfill`: want partitions on a calendar (Temporal Schedules)."""

from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from databuild.cli.app import CliError, JsonFlag, app, emit, run, settings, with_client
from databuild.durations import parse_duration, parse_timestamp
from databuild.graph import load_graph

schedule_app = typer.Typer(help="Want partitions on a calendar (Temporal Schedules).", no_args_is_help=True)
app.add_typer(schedule_app, name="schedule")


@schedule_app.command("add")
def schedule_add(
    pattern: Annotated[
        str, typer.Argument(help="Ref with a time placeholder: {date}, {hour}, {month}, {year}.")
    ],
    cron: Annotated[str, typer.Option(help="When, as a cron expression in UTC, e.g. '0 5 * * *'.")],
    sla: Annotated[str | None, typer.Option(help="Due this long after the scheduled time, e.g. 9h.")] = None,
    ttl: Annotated[
        str | None, typer.Option(help="Give up this long after the scheduled time, e.g. 365d.")
    ] = None,
    paused: Annotated[bool, typer.Option("--paused", help="Create it paused (backfills still run).")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Want PATTERN for each scheduled time: the data timestamp is that time, so re-runs and backfills
    of one time are one want."""
    from databuild.temporal.protocol import ScheduledWantInput
    from databuild.temporal.schedules import check_pattern, create_want_schedule, fill

    check_pattern(pattern)
    load_graph(settings().graph).resolve(fill(pattern, datetime(2024, 1, 7, 5, tzinfo=UTC)))  # a job makes it
    spec = ScheduledWantInput(
        pattern=pattern, sla=parse_duration(sla) if sla else None, ttl=parse_duration(ttl) if ttl else None
    )
    sid = run(
        with_client(
            lambda db: create_want_schedule(db.temporal, db.settings.task_queue, spec, cron, paused=paused)
        )
    )
    emit(as_json, {"schedule_id": sid, "pattern": pattern, "cron": cron}, lambda: f"schedule {sid}: {cron}")


@schedule_app.command("list")
def schedule_list(as_json: JsonFlag = False) -> None:
    """Want schedules: pattern, cron, paused."""
    from databuild.temporal.schedules import list_want_schedules

    found = run(with_client(lambda db: list_want_schedules(db.temporal)))
    rows = [{"pattern": p, "cron": c, "paused": paused} for p, c, paused in found]

    def human() -> Any:
        from rich.table import Table

        table = Table("pattern", "cron", "paused")
        for row in rows:
            table.add_row(str(row["pattern"]), str(row["cron"]), "yes" if row["paused"] else "")
        return table

    emit(as_json, rows, human)


@schedule_app.command("remove")
def schedule_remove(pattern: str, as_json: JsonFlag = False) -> None:
    """Delete a want schedule (wants it registered stay)."""
    from databuild.temporal.schedules import delete_want_schedule

    run(with_client(lambda db: delete_want_schedule(db.temporal, pattern)))
    emit(as_json, {"removed": pattern}, lambda: f"schedule for {pattern} removed")


@schedule_app.command("backfill")
def schedule_backfill(
    pattern: str,
    start: Annotated[str, typer.Option("--from", help="First time (ISO, UTC if no zone).")],
    end: Annotated[str, typer.Option("--to", help="Last time (ISO), inclusive.")],
    as_json: JsonFlag = False,
) -> None:
    """Run the schedule for every time it would have fired between --from and --to. Idempotent: a
    time already wanted is the same want."""
    from databuild.temporal.schedules import backfill_want_schedule

    first, last = parse_timestamp(start), parse_timestamp(end)
    if last < first:
        raise CliError(f"--to {end} is before --from {start}")
    run(with_client(lambda db: backfill_want_schedule(db.temporal, pattern, first, last)))
    emit(
        as_json,
        {"pattern": pattern, "from": first, "to": last},
        lambda: f"backfilling {pattern} {first} .. {last}",
    )
