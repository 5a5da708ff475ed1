"""Server-rendered dashboard pages (Jinja2, autoescaped): lists, the three detail views, and a
"want this partition" form. Links go between the views and into the Temporal UI."""

import asyncio
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import quote

import jinja2
from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from databuild import __version__
from databuild.durations import format_duration, parse_timestamp
from databuild.errors import DataBuildError, InvalidInputError
from databuild.models import JobRunState, PartitionStatus, WantSource, WantState, format_bytes, parse_choice
from databuild.views.cost import cost_overview
from databuild.views.graph import graph_view
from databuild.views.lineage import (
    FAN_OUT,
    instance_view,
    job_run_view,
    list_job_runs,
    list_partitions,
    list_wants,
    partition_view,
    want_view,
)
from databuild.views.logs import AttemptLogView, attempt_log
from databuild.views.staleness import with_staleness
from databuild.web.auth import GuardedRoute
from databuild.web.context import context
from databuild.web.cost_plot import charts
from databuild.web.graph_layout import draw
from databuild.web.paths import TEMPLATES
from databuild.web.requests import Offset, WantRequest, register_want
from databuild.web.timeline import want_timeline
from databuild.web.writer import dashboard_writer, flash_of, forget_flash, signed_in

router = APIRouter(include_in_schema=False, route_class=GuardedRoute)
COST_ROWS = 200  # rows of the cost page by partition: the costliest

# Every template is autoescaped: refs, labels, reasons and errors are user-supplied.
_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, undefined=jinja2.StrictUndefined
)
_env.filters["short"] = lambda uuid: (uuid or "-")[:8]
_env.filters["path"] = lambda value: quote(value or "", safe="/")
_env.filters["q"] = lambda value: quote(value or "", safe="")
_env.filters["duration"] = format_duration
_env.filters["size"] = format_bytes
templates = Jinja2Templates(env=_env)


def _page(request: Request, name: str, status_code: int = 200, **values: Any) -> HTMLResponse:
    ctx = context(request)
    shared = {
        "ui": ctx.workflow_url,
        "version": __version__,
        "query": dict(request.query_params),
        "flash": flash_of(request),
        "tokens": ctx.tokens.configured,  # the nav offers to sign in
        "signed_in": signed_in(request),
    }
    response = templates.TemplateResponse(request, name, {**shared, **values}, status_code=status_code)
    if shared["flash"] is not None:
        forget_flash(response)  # shown once
    return response


def error_page(request: Request, error: DataBuildError, status: int) -> HTMLResponse:
    return _page(request, "error.html", status, error=str(error), kind=type(error).__name__, status=status)


Text = Annotated[str | None, Query()]
Limit = Annotated[int, Query(ge=1, le=1000)]


@router.get("/")
def home() -> RedirectResponse:
    return RedirectResponse("/wants", status_code=307)


@router.get("/wants", response_class=HTMLResponse)
def wants_page(
    request: Request,
    state: Text = None,
    pattern: Text = None,
    prefix: Text = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> HTMLResponse:
    view = list_wants(
        context(request).bel,
        state=parse_choice(WantState, state),
        ref_prefix=prefix or None,
        ref_glob=pattern or None,
        limit=limit,
        offset=offset,
    )
    return _page(request, "wants.html", view=view, states=list(WantState))


@router.post("/wants", response_model=None)
async def want_form(
    request: Request,
    _writer: Annotated[None, Depends(dashboard_writer)],
    ref: Annotated[str, Form()],
    sla: Annotated[str, Form()] = "",
    ttl: Annotated[str, Form()] = "",
) -> Response:
    """The "want this partition" form: registers a want (source `dashboard`) and shows it."""
    try:
        want = await register_want(
            context(request),
            WantRequest(ref=ref.strip(), sla=sla or None, ttl=ttl or None),
            WantSource.dashboard,
        )
    except InvalidInputError as error:
        view = await asyncio.to_thread(list_wants, context(request).bel, limit=50)
        return _page(
            request, "wants.html", 400, view=view, states=list(WantState), form_error=str(error), ref=ref
        )
    return RedirectResponse(f"/wants/{quote(want.want_id, safe='')}", status_code=303)


@router.get("/wants/{want_id}", response_class=HTMLResponse)
async def want_page(request: Request, want_id: str) -> HTMLResponse:
    ctx = context(request)
    graph = await ctx.db.loaded_graph()
    view = await asyncio.to_thread(lambda: with_staleness(ctx.bel, graph, want_view(ctx.bel, want_id, graph)))
    return _page(request, "want.html", view=view, timeline=want_timeline(view, datetime.now(UTC)))


@router.get("/backfills/{backfill_id}", response_class=HTMLResponse)
def backfill_page(request: Request, backfill_id: str) -> HTMLResponse:
    return _page(request, "backfill.html", progress=context(request).bel.backfills.progress(backfill_id))


@router.get("/partitions", response_class=HTMLResponse)
def partitions_page(
    request: Request,
    status: Text = None,
    pattern: Text = None,
    prefix: Text = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> HTMLResponse:
    ctx = context(request)
    view = list_partitions(
        ctx.bel,
        status=parse_choice(PartitionStatus, status, "status"),
        ref_prefix=prefix or None,
        ref_glob=pattern or None,
        limit=limit,
        offset=offset,
    )
    view = with_staleness(ctx.bel, ctx.db.graph, view)
    return _page(request, "partitions.html", view=view, states=list(PartitionStatus))


@router.get("/partitions/{ref:path}", response_class=HTMLResponse)
def partition_page(request: Request, ref: str, fan_out: Limit = FAN_OUT, offset: Offset = 0) -> HTMLResponse:
    ctx = context(request)
    view = with_staleness(ctx.bel, ctx.db.graph, partition_view(ctx.bel, ref, fan_out=fan_out, offset=offset))
    return _page(request, "partition.html", view=view, fan_out=fan_out)


@router.get("/instances/{instance_id}", response_class=HTMLResponse)
def instance_page(
    request: Request, instance_id: str, fan_out: Limit = FAN_OUT, offset: Offset = 0
) -> HTMLResponse:
    ctx = context(request)
    view = with_staleness(
        ctx.bel, ctx.db.graph, instance_view(ctx.bel, instance_id, fan_out=fan_out, offset=offset)
    )
    return _page(request, "partition.html", view=view, fan_out=fan_out)


@router.get("/job-runs", response_class=HTMLResponse)
def job_runs_page(
    request: Request,
    state: Text = None,
    job: Text = None,
    pattern: Text = None,
    prefix: Text = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> HTMLResponse:
    view = list_job_runs(
        context(request).bel,
        state=parse_choice(JobRunState, state),
        job_label=job or None,
        ref_prefix=prefix or None,
        ref_glob=pattern or None,
        limit=limit,
        offset=offset,
    )
    return _page(request, "job_runs.html", view=view, states=list(JobRunState))


@router.get("/job-runs/{job_run_id}", response_class=HTMLResponse)
def job_run_page(
    request: Request, job_run_id: str, attempt: Annotated[int | None, Query(ge=1)] = None
) -> HTMLResponse:
    ctx = context(request)
    view = with_staleness(ctx.bel, ctx.db.graph, job_run_view(ctx.bel, job_run_id))
    try:
        log: AttemptLogView | str = attempt_log(ctx.bel, ctx.storage, job_run_id, attempt)
    except DataBuildError as missing:  # the page still shows the run, and why there is no log (storage down)
        log = str(missing)
    return _page(request, "job_run.html", view=view, log=log)


@router.get("/cost", response_class=HTMLResponse)
def cost_page(request: Request, pattern: Text = None, since: Text = None, by: Text = None) -> HTMLResponse:
    ctx = context(request)
    chosen = by or "job"
    if chosen not in ("job", "day", "partition"):
        raise InvalidInputError(f"by {chosen!r}: use job, day or partition")
    start = parse_timestamp(since) if since else None
    page = cost_overview(ctx.bel, chosen, pattern or None, start, COST_ROWS)  # type: ignore[arg-type]
    return _page(
        request, "cost.html", report=page.report, rows_in_all=page.rows_in_all, charts=charts(page.by_day)
    )


@router.get("/graph", response_class=HTMLResponse)
async def graph_page(request: Request) -> HTMLResponse:
    ctx = context(request)
    graph = await ctx.db.loaded_graph()
    view = await asyncio.to_thread(graph_view, ctx.bel, graph, ctx.settings, ctx.partition_counter(graph))
    return _page(request, "graph.html", view=view, drawing=draw(view), states=list(PartitionStatus))
