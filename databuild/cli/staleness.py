"""`databuild stale` and `databuild why`: which live partitions are stale, and why any partition is in its
state. Both read the BEL alone (Temporal may be down)."""

from typing import Annotated

import typer

from databuild.cli import render
from databuild.cli.app import JsonFlag, app, emit, run, with_client


@app.command("stale")
def stale(
    pattern: Annotated[
        str | None,
        typer.Argument(help="Only refs matching this glob: * within a segment, ** across (default: all)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """List the stale live partitions with their reasons: a changed job version, a newer or tainted
    input, or a stale input."""
    found = run(with_client(lambda db: db.stale(pattern), lazy=True))
    emit(as_json, found, lambda: render.stale_table(found))


@app.command("why")
def why(
    ref: Annotated[str, typer.Argument(help="The partition ref, e.g. daily_summary/2024-01-07.")],
    as_json: JsonFlag = False,
) -> None:
    """Explain why a partition is in its state, as a chain of recorded facts."""
    found = run(with_client(lambda db: db.why(ref), lazy=True))
    emit(as_json, found, lambda: render.why_view(found))
