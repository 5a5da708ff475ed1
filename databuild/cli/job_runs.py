"""`databuild job-runs list|show`: job runs, and what one of them did."""

from typing import Annotated

import typer
from rich.console import Group

from databuild.cli import render
from databuild.cli.app import (
    JsonFlag,
    Limit,
    Offset,
    Pattern,
    Prefix,
    State,
    app,
    bel,
    emit,
    graph_or_note,
    page_note,
    settings,
)
from databuild.models import JobRunState, parse_choice
from databuild.views.lineage import job_run_view, list_job_runs
from databuild.views.staleness import with_staleness

job_runs_app = typer.Typer(help="Inspect job runs.", no_args_is_help=True)
app.add_typer(job_runs_app, name="job-runs")


@job_runs_app.command("list")
def job_runs_list(
    state: State = None,
    job: Annotated[str | None, typer.Option(help="Only this job label.")] = None,
    prefix: Prefix = None,
    pattern: Pattern = None,
    limit: Limit = 50,
    offset: Offset = 0,
    as_json: JsonFlag = False,
) -> None:
    """List job runs, newest first (filter by an output ref with --prefix or --pattern)."""
    view = list_job_runs(
        bel(),
        state=parse_choice(JobRunState, state),
        job_label=job,
        ref_prefix=prefix,
        ref_glob=pattern,
        limit=limit,
        offset=offset,
    )
    emit(as_json, view, lambda: Group(render.job_runs_table(view.data), page_note(view.page)))


@job_runs_app.command("show")
def job_runs_show(
    job_run_id: str,
    log: Annotated[bool, typer.Option("--log", help="Print the log of its latest attempt instead.")] = False,
    attempt: Annotated[
        int | None, typer.Option(min=1, help="Print the log of this attempt (implies --log).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """What a job run did: wanted by, read and wrote (UUIDs), status history, derivative wants, delegations;
    with --log, what its job logged."""
    if log or attempt is not None:
        # Storage loads pyarrow (and numpy): a third of a second every command would pay, for this one.
        from databuild.jobs.storage import Storage
        from databuild.views.logs import attempt_log

        found = attempt_log(bel(), Storage(settings().storage_root), job_run_id, attempt)
        if as_json:
            emit(True, found, lambda: None)
        else:
            print(found.text, end="")  # as it is, without markup: a log is for reading and for grep
        return
    events = bel()
    view = job_run_view(events, job_run_id)
    if (graph := graph_or_note()) is not None:
        view = with_staleness(events, graph, view)
    emit(as_json, view, lambda: render.job_run_detail(view))
