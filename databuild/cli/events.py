"""What the build event log says: `stats`, `events` (the log itself, with a cursor) and `sla`."""

from typing import Annotated, Any

import typer
from rich.console import Group

from databuild.cli import render
from databuild.cli.app import JsonFlag, Limit, app, bel, emit
from databuild.models import MAX_INDEX, EventFilter, validated


@app.command()
def stats(as_json: JsonFlag = False) -> None:
    """Job success rates (skipped counts as success) and builds avoided by delegation."""
    figures = bel().events.stats()
    emit(as_json, figures, lambda: render.stats_view(figures))


@app.command()
def events(
    since: Annotated[
        int, typer.Option("--since", min=0, max=MAX_INDEX, help="Only events after this index.")
    ] = 0,
    pattern: Annotated[
        list[str] | None,
        typer.Option(help="Refs matching this glob (* in a segment, ** across); repeatable."),
    ] = None,
    ref: Annotated[list[str] | None, typer.Option(help="This exact ref; repeatable.")] = None,
    job: Annotated[list[str] | None, typer.Option(help="Job runs of this job label; repeatable.")] = None,
    job_run: Annotated[list[str] | None, typer.Option(help="This job run id; repeatable.")] = None,
    want: Annotated[list[str] | None, typer.Option(help="This want id; repeatable.")] = None,
    event_type: Annotated[
        list[str] | None, typer.Option("--type", help="This event type; repeatable.")
    ] = None,
    limit: Limit = 100,
    as_json: JsonFlag = False,
) -> None:
    """The build event log, oldest first; prints the cursor to continue from (--since)."""
    where = validated(
        EventFilter,
        refs=ref or [],
        patterns=pattern or [],
        job_labels=job or [],
        job_run_ids=job_run or [],
        want_ids=want or [],
        types=event_type or [],
    )
    page = bel().events.page(since, limit, where)

    def human() -> Any:
        from rich.table import Table

        table = Table("idx", "at", "type", "ref", "want", "job run")
        for e in page.events:
            table.add_row(
                str(e.idx), f"{e.at:%H:%M:%S}", e.type, e.ref or "", e.want_id or "", e.job_run_id or ""
            )
        return Group(table, f"next: --since {page.next_since_idx}  (log at {page.last_idx})")

    emit(as_json, page, human)


@app.command()
def sla(as_json: JsonFlag = False) -> None:
    """Wants that missed their SLA (flagged, or overdue and not yet built)."""
    found = bel().wants.sla_misses()
    emit(as_json, found, lambda: render.wants_table(found))
