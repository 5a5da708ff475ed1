"""`databuild backfill` (one want per partition of a time range, idempotently, with live progress) and
`databuild cancel` (a want, or a backfill's wants), `pause` and `resume` (a backfill)."""

import asyncio
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from databuild.backfill import BackfillProgress, BackfillRequest
from databuild.cli import render
from databuild.cli.app import CliError, JsonFlag, PlanFlag, app, client, console, emit, run, with_client
from databuild.cli.plan_render import plan_view
from databuild.client import DataBuild
from databuild.domain.plans import Plan
from databuild.durations import parse_duration, parse_timestamp
from databuild.models import first_error

POLL_SECONDS = 1.0


StaleOnlyFlag = Annotated[
    bool,
    typer.Option(
        "--stale-only",
        help="Want only the partitions of the range that are stale (`databuild stale`), as fresh wants "
        "that rebuild them; with nothing stale, register nothing.",
    ),
]


@app.command()
def backfill(
    pattern: Annotated[
        str, typer.Argument(help="An output pattern with one placeholder, e.g. 'raw_events/{date}'.")
    ],
    start: Annotated[str, typer.Option("--from", help="First partition's time (ISO), e.g. 2024-02-01.")],
    end: Annotated[str, typer.Option("--to", help="Last partition's time (ISO), included.")],
    step: Annotated[str, typer.Option(help="Between partitions: whole days (1d) or hours (1h).")] = "1d",
    sla: Annotated[str | None, typer.Option(help="Each want due this long after its data time.")] = None,
    ttl: Annotated[str | None, typer.Option(help="Each want gives up this long after its data time.")] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait until every want has ended, showing progress.")
    ] = False,
    plan: PlanFlag = False,
    stale_only: StaleOnlyFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Want every partition of PATTERN from --from to --to: one want each (source `backfill`). Asking
    again registers nothing new and shows the backfill's progress. With --plan: show what it would do,
    and record nothing. With --stale-only: only the stale ones, rebuilt."""
    try:
        request = BackfillRequest(
            pattern=pattern,
            start=parse_timestamp(start),
            end=parse_timestamp(end),
            step=parse_duration(step),
            sla=parse_duration(sla) if sla else None,
            ttl=parse_duration(ttl) if ttl else None,
            stale_only=stale_only,
        )
    except ValidationError as error:
        raise CliError(first_error(error)) from None
    if plan:

        async def planned(db: DataBuild) -> Plan:
            return await db.plan_backfill(request)

        found = run(with_client(planned, lazy=True, reads_only=True))  # a plan reads the BEL alone
        what = f"{pattern} from {start} to {end}" + (" (stale only)" if stale_only else "")
        if stale_only and not found.partitions and not as_json:
            in_range = (request.end - request.start) // request.step + 1
            console.print(
                f"plan for {what}: nothing stale among the {in_range:,} partitions of the range, "
                "so it would want none; nothing was recorded"
            )
            return
        emit(as_json, found, lambda: plan_view(found, what))
        return
    progress = run(_backfill(request, wait=wait, as_json=as_json))
    if stale_only and not progress.partitions and not as_json:
        return  # nothing was stale, and it said so
    emit(as_json, progress, lambda: render.backfill_summary(progress))


async def _backfill(request: BackfillRequest, *, wait: bool, as_json: bool) -> BackfillProgress:
    db = await client(lazy=request.stale_only)  # with nothing stale, Temporal is not needed
    async with db:
        if not as_json and not request.stale_only:
            return await _with_bars(db, request, wait=wait)
        # A stale-only backfill says what was stale, with no bars (it may register nothing).
        result = await db.backfill(request)
        if request.stale_only and not as_json:
            console.print(_stale_note(request, result))
        while wait and not result.finished:
            await asyncio.sleep(POLL_SECONDS)
            result = await db.backfill_progress(result.backfill_id)
        return result


async def _with_bars(db: DataBuild, request: BackfillRequest, *, wait: bool) -> BackfillProgress:
    """Register the backfill's wants, and with ``wait`` follow them to the end, with progress bars."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with render.live_block(console), Progress(*columns, console=console, transient=False) as bars:
        registering = bars.add_task("registering wants", total=None)

        def registered(done: int) -> None:
            bars.update(registering, completed=done)

        result = await db.backfill(request, on_registered=registered)
        bars.update(registering, total=result.partitions, completed=result.registered)
        if wait:
            ended = bars.add_task(render.backfill_states(result), total=result.partitions)
            while True:
                bars.update(ended, completed=result.done, description=render.backfill_states(result))
                if result.finished:
                    break
                await asyncio.sleep(POLL_SECONDS)
                result = await db.backfill_progress(request.backfill_id)
    return result


def _stale_note(request: BackfillRequest, result: BackfillProgress) -> str:
    in_range = (request.end - request.start) // request.step + 1
    if not result.partitions:
        return f"nothing stale among the {in_range:,} partitions of the range: nothing was registered"
    return (
        f"{result.partitions:,} of the {in_range:,} partitions of the range are stale: "
        f"{result.partitions:,} fresh wants rebuild them"
    )


@app.command()
def cancel(
    id_: Annotated[str, typer.Argument(metavar="ID", help="A want id (w-...) or a backfill id (bf-...).")],
    as_json: JsonFlag = False,
) -> None:
    """Cancel a want, or every want of a backfill that has not ended with the derivative wants only the
    backfill needs: each records `canceled`, and a running build stops unless another want needs it."""
    if id_.startswith("bf-"):
        stopped = run(with_client(lambda db: db.cancel_backfill(id_)))
        emit(
            as_json,
            {"backfill_id": id_, "wants_cancelled": stopped},
            lambda: f"{id_}: {stopped} want(s) cancelled",
        )
        return
    want = run(with_client(lambda db: db.cancel(id_)))
    already = want.state.is_final
    emit(
        as_json,
        {"want": want, "cancelled": not already},
        lambda: f"{id_} had already ended ({want.state.value})" if already else f"{id_} cancelled",
    )


@app.command()
def retry(
    id_: Annotated[str, typer.Argument(metavar="ID", help="A want id (w-...) or a backfill id (bf-...).")],
    as_json: JsonFlag = False,
) -> None:
    """Make a want decide again now: one still open (e.g. after fixing an input or a cause outside
    DataBuild), or one that ended failed or canceled, which opens again with the wants it derived that
    ended so (after `databuild resolve` of a fail-locked build). For a backfill: every want of it that
    ended failed or canceled opens again, and a cancelled backfill is no longer."""
    if id_.startswith("bf-"):
        done = run(with_client(lambda db: db.retry_backfill(id_)))
        locked = f"; fail-locked (`databuild resolve` them, then retry): {', '.join(done.fail_locked)}"
        emit(
            as_json,
            done,
            lambda: f"{id_}: {done.reopened} want(s) open again" + (locked if done.fail_locked else ""),
        )
        return
    want_id = id_
    want = run(with_client(lambda db: db.retry(want_id)))
    emit(as_json, {"want": want, "retried": True}, lambda: f"{want_id} ({want.ref}) decides again")


@app.command()
def pause(
    backfill_id: Annotated[str, typer.Argument(metavar="BACKFILL_ID", help="A backfill id (bf-...).")],
    as_json: JsonFlag = False,
) -> None:
    """Pause a backfill: its wants decide nothing new (runs already going finish) until `resume`."""
    _set_paused(backfill_id, True, as_json)


@app.command()
def resume(
    backfill_id: Annotated[str, typer.Argument(metavar="BACKFILL_ID", help="A backfill id (bf-...).")],
    as_json: JsonFlag = False,
) -> None:
    """Resume a paused backfill: its wants go on where they stopped."""
    _set_paused(backfill_id, False, as_json)


def _set_paused(backfill_id: str, paused: bool, as_json: bool) -> None:
    progress = run(with_client(lambda db: db.pause_backfill(backfill_id, paused=paused)))
    emit(as_json, progress, lambda: render.backfill_summary(progress))
