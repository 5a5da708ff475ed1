"""`databuild cost`: task-seconds spent and saved per job, day or partition. Reads the BEL alone."""

from datetime import UTC, datetime
from typing import Annotated

import typer

from databuild.cli.app import JsonFlag, app, console, emit, run, with_client
from databuild.cli.render_cost import cost_table
from databuild.domain.cost import CostBy
from databuild.durations import parse_duration, parse_timestamp
from databuild.errors import InvalidInputError


def parse_since(text: str) -> datetime:
    """An ISO time, or a duration back from now (``7d``)."""
    if text[:1].isdigit() and text.strip()[-1:].lower() in "wdhms" and "-" not in text and ":" not in text:
        return datetime.now(UTC) - parse_duration(text)
    return parse_timestamp(text)


@app.command("cost")
def cost(
    pattern: Annotated[
        str | None,
        typer.Argument(help="Only refs matching this glob: * within a segment, ** across (default: all)."),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            help="Only what ran or was avoided from then on: a time (2024-01-07) or a duration back (7d)."
        ),
    ] = None,
    by: Annotated[str, typer.Option(help="One row per job, day or partition.")] = "job",
    as_json: JsonFlag = False,
) -> None:
    """Task-seconds spent by job runs (Spark's own accounting) and saved by delegation (builds avoided)."""
    if by not in ("job", "day", "partition"):
        raise InvalidInputError(f"--by {by!r}: use job, day or partition")
    start = parse_since(since) if since else None
    chosen: CostBy = by  # type: ignore[assignment]
    report = run(with_client(lambda db: db.cost(pattern, since=start, by=chosen), lazy=True))
    emit(as_json, report, lambda: cost_table(report, console.width))
