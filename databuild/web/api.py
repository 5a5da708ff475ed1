"""The HTTP JSON API. Detail and list responses are ``{data, index}`` (databuild.views.lineage)."""

import asyncio
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import PlainTextResponse
from pydantic import Field

from databuild.backfill import BackfillProgress, BackfillRequest, BackfillRetry
from databuild.domain.cost import CostBy, CostReport
from databuild.domain.plans import Plan
from databuild.domain.staleness import StalePartition
from databuild.durations import Timestamp
from databuild.models import (
    MAX_INDEX,
    BuildStats,
    EventFilter,
    EventPage,
    Instance,
    JobRun,
    JobRunState,
    Model,
    Partition,
    PartitionStatus,
    TaintResult,
    Want,
    WantSource,
    WantState,
    validated,
)
from databuild.views.graph import GraphView, graph_view
from databuild.views.lineage import (
    FAN_OUT,
    JobRunView,
    ListView,
    PartitionView,
    WantView,
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
from databuild.views.tables import TableView
from databuild.views.why import Why
from databuild.web.auth import GuardedRoute, caller, guard
from databuild.web.context import context
from databuild.web.requests import Offset, WantRequest, plan_want, register_want

router = APIRouter(prefix="/api", tags=["api"], route_class=GuardedRoute)

Limit = Annotated[int, Query(ge=1, le=1000, description="rows per page")]
Prefix = Annotated[str | None, Query(description="only refs starting with this")]
Pattern = Annotated[
    str | None, Query(description="only refs matching this glob: `*` in a segment, `**` across")
]
FanOut = Annotated[int, Query(ge=1, le=10_000, description="downstream consumers to include")]


@guard
def authorized(request: Request) -> str:
    """The caller's name; 401 before the body or anything else is read, and nothing recorded."""
    return caller(request, context(request).tokens)


Caller = Annotated[str, Depends(authorized)]


class Announcement(Model):
    """ "Partition X is available", from an upstream graph or any producer."""

    instance_id: str | None = Field(
        default=None,
        max_length=64,
        description="the producer's instance UUID: the same one twice changes nothing",
    )
    graph: str | None = Field(default=None, max_length=200, description="who produced it")
    location: str | None = Field(
        default=None, max_length=2000, description="where its data is (a URI); default: the ref's folder"
    )


class AnnouncementResult(Model):
    partition: Partition
    newly_live: bool = Field(description="whether this announcement changed the partition")
    wants_signalled: int


class TaintRequest(Model):
    reason: str | None = Field(default=None, max_length=2000)
    cascade: bool = Field(default=False, description="taint the current downstream too")
    dry_run: bool = Field(default=False, description="record nothing; report the impact")
    instance_id: str | None = Field(
        default=None,
        description="refuse (409) unless this is still the live instance, e.g. the one previewed",
    )


@router.get("/wants", response_model=ListView[Want])
def get_wants(
    request: Request,
    state: WantState | None = None,
    prefix: Prefix = None,
    pattern: Pattern = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> ListView[Want]:
    return list_wants(
        context(request).bel, state=state, ref_prefix=prefix, ref_glob=pattern, limit=limit, offset=offset
    )


@router.post("/wants", response_model=WantView, status_code=201)
async def post_want(request: Request, _caller: Caller, body: WantRequest) -> WantView:
    """Register a want (source `api`). Asking again for the same want returns the same want."""
    ctx = context(request)
    want = await register_want(ctx, body, WantSource.api)
    graph = await ctx.db.loaded_graph()
    return await asyncio.to_thread(
        lambda: with_staleness(ctx.bel, graph, want_view(ctx.bel, want.want_id, graph))
    )


@router.post("/wants/plan", response_model=Plan)
async def post_want_plan(request: Request, _caller: Caller, body: WantRequest) -> Plan:
    """What registering this want would do now: the partitions it would build, live or blocked, its job
    runs, when it would be live (p50, p90 of the jobs' recorded durations) and whether it would miss its
    SLA. Records nothing; like a registration, it needs a caller (a big plan reads much of the BEL)."""
    return await plan_want(context(request), body)


@router.get("/wants/{want_id}", response_model=WantView)
async def get_want(request: Request, want_id: str) -> WantView:
    """Want fulfillment: job runs (retries grouped), instances, derivative wants and their triggers, and
    for a want with an SLA that has not ended, when its partition is estimated live."""
    ctx = context(request)
    graph = await ctx.db.loaded_graph()
    return await asyncio.to_thread(lambda: with_staleness(ctx.bel, graph, want_view(ctx.bel, want_id, graph)))


@router.get("/partitions", response_model=ListView[Partition])
def get_partitions(
    request: Request,
    status: PartitionStatus | None = None,
    prefix: Prefix = None,
    pattern: Pattern = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> ListView[Partition]:
    """Partitions by ref; the stale live instances are in ``index.stale``, with why."""
    ctx = context(request)
    view = list_partitions(
        ctx.bel, status=status, ref_prefix=prefix, ref_glob=pattern, limit=limit, offset=offset
    )
    return with_staleness(ctx.bel, ctx.db.graph, view)


@router.get("/instances/{instance_id}", response_model=PartitionView)
def get_instance(
    request: Request, instance_id: str, fan_out: FanOut = FAN_OUT, offset: Offset = 0
) -> PartitionView:
    """Lineage of one partition instance by UUID, whether it is live, superseded or tainted."""
    ctx = context(request)
    return with_staleness(
        ctx.bel, ctx.db.graph, instance_view(ctx.bel, instance_id, fan_out=fan_out, offset=offset)
    )


@router.post("/backfills", response_model=BackfillProgress)
async def post_backfill(request: Request, _caller: Caller, body: BackfillRequest) -> BackfillProgress:
    """Want every partition of ``pattern`` from ``start`` to ``end`` (one want each, source `backfill`).
    Idempotent: asking again registers nothing new. Bad input is refused with 400 before anything is
    recorded. Registering many wants takes a while: poll ``GET /api/backfills/{id}`` for progress."""
    return await context(request).db.backfill(body)


@router.post("/backfills/plan", response_model=Plan)
async def post_backfill_plan(request: Request, _caller: Caller, body: BackfillRequest) -> Plan:
    """What this backfill would do now (as ``POST /api/wants/plan`` for each of its partitions). Records
    nothing."""
    ctx = context(request)
    async with ctx.planning():
        return await ctx.db.plan_backfill(body)


@router.get("/backfills/{backfill_id}", response_model=BackfillProgress)
async def get_backfill(request: Request, backfill_id: str) -> BackfillProgress:
    """A backfill's wants, counted by state."""
    return await context(request).db.backfill_progress(backfill_id)


@router.post("/backfills/{backfill_id}/cancel", response_model=BackfillProgress)
async def post_cancel_backfill(request: Request, _caller: Caller, backfill_id: str) -> BackfillProgress:
    """Cancel every want of the backfill that has not ended, with the derivative wants only the backfill
    needs (their builds stop unless another want needs them); returns the backfill's progress."""
    db = context(request).db
    await db.cancel_backfill(backfill_id)
    return await db.backfill_progress(backfill_id)


@router.post("/backfills/{backfill_id}/retry", response_model=BackfillRetry)
async def post_retry_backfill(request: Request, _caller: Caller, backfill_id: str) -> BackfillRetry:
    """Open again every want of the backfill that ended failed or canceled (with the wants they derived
    that ended so), and lift its cancel; partitions still fail-locked are listed, and stay ended."""
    return await context(request).db.retry_backfill(backfill_id)


@router.post("/backfills/{backfill_id}/pause", response_model=BackfillProgress)
async def post_pause_backfill(request: Request, _caller: Caller, backfill_id: str) -> BackfillProgress:
    """Pause a backfill: its wants decide nothing new (runs already going finish) until resumed."""
    return await context(request).db.pause_backfill(backfill_id)


@router.post("/backfills/{backfill_id}/resume", response_model=BackfillProgress)
async def post_resume_backfill(request: Request, _caller: Caller, backfill_id: str) -> BackfillProgress:
    """Resume a paused backfill."""
    return await context(request).db.pause_backfill(backfill_id, paused=False)


@router.post("/wants/{want_id}/cancel", response_model=Want)
async def post_cancel_want(request: Request, _caller: Caller, want_id: str) -> Want:
    """Cancel a want that has not ended (a want that has is returned as it is)."""
    return await context(request).db.cancel(want_id)


@router.post("/wants/{want_id}/retry", response_model=Want)
async def post_retry_want(request: Request, _caller: Caller, want_id: str) -> Want:
    """Make a want decide again now: one still open, or one that ended failed or canceled (opened again
    with the wants it derived that ended so); 409 for one that succeeded or expired, or is fail-locked."""
    return await context(request).db.retry(want_id)


class PinRequest(Model):
    pinned: bool = Field(default=True, description="false: garbage collection may remove it again")
    reason: str | None = Field(default=None, max_length=2000, description="why it is kept")


@router.post("/instances/{instance_id}/pin", response_model=Instance)
async def post_pin(request: Request, _caller: Caller, instance_id: str, body: PinRequest) -> Instance:
    """Keep an instance's data from garbage collection, live or not (or let it go with pinned=false)."""
    return await context(request).db.pin(instance_id, pinned=body.pinned, reason=body.reason)


@router.post("/partitions/{ref:path}/taint", response_model=TaintResult)
async def post_taint(request: Request, _caller: Caller, ref: str, body: TaintRequest) -> TaintResult:
    """Taint the live instance (``dry_run``: only report the impact, every instance built from it)."""
    ctx = context(request)
    if body.dry_run:
        impact = await ctx.db.taint_impact(ref)
        partition = await asyncio.to_thread(ctx.bel.partitions.get, ref)
        return TaintResult(partition=partition, impact=impact, tainted=[])
    return await ctx.db.taint(ref, reason=body.reason, cascade=body.cascade, instance_id=body.instance_id)


@router.post("/partitions/{ref:path}/available", response_model=AnnouncementResult)
async def post_available(
    request: Request, caller: Caller, ref: str, body: Announcement
) -> AnnouncementResult:
    """Announce an external partition (the same path as `databuild publish` and the Temporal signal):
    records it and wakes every want waiting for it. Idempotent. A ref the graph does not declare
    external (e.g. a job's output) is refused with 400 and the reason, and nothing is recorded."""
    source = body.graph or caller
    db = context(request).db
    partition, created, signalled = await db.publish(
        ref, instance_id=body.instance_id, source=source, location=body.location
    )
    return AnnouncementResult(partition=partition, newly_live=created, wants_signalled=signalled)


@router.get("/events", response_model=EventPage)
def get_events(
    request: Request,
    _caller: Caller,
    since_idx: Annotated[int, Query(ge=0, le=MAX_INDEX, description="return events after this index")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ref: Annotated[list[str], Query(description="exact partition refs")] = [],  # noqa: B006
    pattern: Annotated[list[str], Query(description="ref globs: * in a segment, ** across")] = [],  # noqa: B006
    job: Annotated[list[str], Query(description="job labels")] = [],  # noqa: B006
    job_run_id: Annotated[list[str], Query()] = [],  # noqa: B006
    want_id: Annotated[list[str], Query()] = [],  # noqa: B006
    type: Annotated[list[str], Query(description="event types, e.g. PartitionLive")] = [],  # noqa: B006
) -> EventPage:
    """The build event log for other graphs: events after ``since_idx`` that match, and the cursor
    (``next_since_idx``) to continue from. Within a filter any value matches; filters combine with AND."""
    where = validated(
        EventFilter,
        refs=ref,
        patterns=pattern,
        job_labels=job,
        job_run_ids=job_run_id,
        want_ids=want_id,
        types=type,
    )
    return context(request).bel.events.page(since_idx, limit, where)


@router.get("/partitions/{ref:path}", response_model=PartitionView)
def get_partition(request: Request, ref: str, fan_out: FanOut = FAN_OUT, offset: Offset = 0) -> PartitionView:
    """Lineage of the ref's live (or latest) instance: builder and inputs upstream, consumers downstream."""
    ctx = context(request)
    return with_staleness(ctx.bel, ctx.db.graph, partition_view(ctx.bel, ref, fan_out=fan_out, offset=offset))


@router.get("/stale", response_model=list[StalePartition])
async def get_stale(request: Request, pattern: Pattern = None) -> list[StalePartition]:
    """The stale live partitions (of refs matching ``pattern``), with their reasons, by ref."""
    return await context(request).db.stale(pattern)


@router.get("/cost", response_model=CostReport)
async def get_cost(
    request: Request,
    pattern: Pattern = None,
    since: Annotated[
        Timestamp | None,
        Query(description="only what ran or was avoided from then on (ISO 8601, or Unix seconds)"),
    ] = None,
    by: Annotated[CostBy, Query(description="one row per job, day or partition")] = "job",
) -> CostReport:
    """Builds run and avoided, task-seconds spent (Spark's accounting) and saved (by delegation)."""
    return await context(request).db.cost(pattern, since=since, by=by)


@router.get("/tables", response_model=list[TableView])
async def get_tables(request: Request) -> list[TableView]:
    """Each output pattern's table: format, catalog, current snapshot, partitions held and behind the BEL."""
    return await context(request).db.tables()


@router.get("/why/{ref:path}", response_model=Why)
async def get_why(request: Request, ref: str) -> Why:
    """Why the ref is in its state: the chain of recorded facts."""
    return await context(request).db.why(ref)


@router.get("/job-runs", response_model=ListView[JobRun])
def get_job_runs(
    request: Request,
    state: JobRunState | None = None,
    job: Annotated[str | None, Query(description="only this job label")] = None,
    prefix: Prefix = None,
    pattern: Pattern = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> ListView[JobRun]:
    return list_job_runs(
        context(request).bel,
        state=state,
        job_label=job,
        ref_prefix=prefix,
        ref_glob=pattern,
        limit=limit,
        offset=offset,
    )


@router.get("/job-runs/{job_run_id}", response_model=JobRunView)
def get_job_run(request: Request, job_run_id: str) -> JobRunView:
    ctx = context(request)
    return with_staleness(ctx.bel, ctx.db.graph, job_run_view(ctx.bel, job_run_id))


@router.get(
    "/job-runs/{job_run_id}/log",
    response_model=AttemptLogView,
    responses={
        200: {"content": {"text/plain": {}}},
        404: {"description": "no such run or attempt, or no log"},
    },
)
def get_job_run_log(
    request: Request,
    job_run_id: str,
    attempt: Annotated[int | None, Query(ge=1, le=MAX_INDEX, description="default: the latest")] = None,
    format: Annotated[
        Literal["json", "text"], Query(description="`text`: the log alone, as plain text")
    ] = "json",
) -> AttemptLogView | PlainTextResponse:
    """What one attempt of the job run logged: `ctx.log`, Python logging and warnings, the traceback of a
    failure (and with the `submit` executor the application's output). 404 says why a log is missing."""
    ctx = context(request)
    found = attempt_log(ctx.bel, ctx.storage, job_run_id, attempt)
    return PlainTextResponse(found.text) if format == "text" else found


@router.get("/stats", response_model=BuildStats)
def get_stats(request: Request) -> BuildStats:
    return context(request).bel.events.stats()


@router.get("/sla", response_model=list[Want])
def get_sla(request: Request) -> list[Want]:
    """Wants that missed their SLA: flagged, or overdue and not yet built."""
    return context(request).bel.wants.sla_misses()


@router.get("/graph", response_model=GraphView)
async def get_graph(request: Request) -> GraphView:
    """The graph's jobs and patterns: what each job reads (declared, and read by its latest succeeded run)
    and writes, its policies (declared, and in effect with this server's settings), and each pattern's
    partitions by status. The dashboard's `/graph` page draws it."""
    ctx = context(request)
    graph = await ctx.db.loaded_graph()
    return await asyncio.to_thread(graph_view, ctx.bel, graph, ctx.settings, ctx.partition_counter(graph))
