"""`databuild`: the command line. Every list/show command takes --json for scripts."""

import asyncio
import json
import os
import sys
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, TypeVar

import typer
from pydantic import BaseModel
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape

from databuild import render
from databuild.client import DataBuild, build_spec
from databuild.config import Settings, masked_url
from databuild.durations import format_duration, parse_duration, parse_setting_duration, parse_timestamp
from databuild.errors import DataBuildError
from databuild.graph import load_graph
from databuild.models import (
    MAX_INDEX,
    EventFilter,
    JobRunState,
    PartitionStatus,
    Want,
    WantSource,
    WantState,
    parse_choice,
    validated,
)
from databuild.storage import Storage
from databuild.views import (
    FAN_OUT,
    Page,
    instance_view,
    job_run_view,
    list_job_runs,
    list_partitions,
    list_wants,
    partition_view,
    want_view,
)

app = typer.Typer(
    help="DataBuild: declare the partitions you want; DataBuild builds them.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
wants_app = typer.Typer(help="Inspect wants.", no_args_is_help=True)
partitions_app = typer.Typer(help="Inspect partitions.", no_args_is_help=True)
job_runs_app = typer.Typer(help="Inspect job runs.", no_args_is_help=True)
app.add_typer(wants_app, name="wants")
app.add_typer(partitions_app, name="partitions")
app.add_typer(job_runs_app, name="job-runs")
upstream_app = typer.Typer(
    help="Follow other DataBuild graphs (pull their events; take their pushes).", no_args_is_help=True
)
app.add_typer(upstream_app, name="upstream")
schedule_app = typer.Typer(help="Want partitions on a calendar (Temporal Schedules).", no_args_is_help=True)
app.add_typer(schedule_app, name="schedule")

console = Console()
err = Console(stderr=True)
T = TypeVar("T")

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
Limit = Annotated[int, typer.Option(min=1, max=MAX_INDEX, help="Rows to show.")]


class CliError(Exception):
    pass


def _settings(**overrides: object) -> Settings:
    return Settings.from_env(**overrides)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


async def _client() -> DataBuild:
    return await DataBuild.connect(_settings())


async def _with_client(call: Callable[[DataBuild], Coroutine[Any, Any, T]]) -> T:
    db = await _client()
    async with db:
        return await call(db)


def _bel() -> Any:
    from databuild.bel import BuildEventLog

    return BuildEventLog.create(_settings().database_url)


def _d(value: timedelta | None) -> str:
    return "none" if value is None else format_duration(value)


def _emit(as_json: bool, value: Any, human: Callable[[], Any]) -> None:
    if as_json:
        print(json.dumps(_jsonable(value), indent=2, default=str))
    else:
        console.print(human())


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


@app.command()
def dev(
    demo: Annotated[
        bool, typer.Option(help="Request the demo's top partition and print its fulfillment.")
    ] = False,
    exit_after_demo: Annotated[bool, typer.Option("--exit", help="Stop once the demo is done.")] = False,
    port: Annotated[int, typer.Option(help="Temporal frontend port.")] = 7233,
    ui_port: Annotated[int, typer.Option(help="Temporal UI port.")] = 8233,
    web_port: Annotated[int, typer.Option(help="Dashboard and HTTP API port (0: no web server).")] = 8000,
) -> None:
    """Embedded stack: Temporal dev server (+ UI), a worker and the dashboard; data in ./.databuild."""
    from worker.dev import run_dev  # the CLI hands over to the worker package to host workflows

    settings = _settings(temporal_address=f"127.0.0.1:{port}")
    raise typer.Exit(
        _run(
            run_dev(
                settings,
                demo=demo,
                exit_after_demo=exit_after_demo,
                ui_port=ui_port,
                web_port=web_port,
                console=console,
            )
        )
    )


@app.command()
def web(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port of the dashboard and the HTTP API.")] = 8000,
    temporal_ui: Annotated[
        str | None,
        typer.Option(envvar="DATABUILD_TEMPORAL_UI_URL", help="Temporal UI base URL for workflow links."),
    ] = None,
) -> None:
    """Serve the dashboard (/) and the HTTP JSON API (/api, docs at /docs) over the configured BEL."""
    from databuild.bel import BuildEventLog
    from databuild.runtime import settle_heap
    from databuild.web import create_app, serve, web_context

    settings = _settings()
    context = web_context(settings, BuildEventLog.create(settings.database_url), temporal_ui)
    app = create_app(context)
    settle_heap()  # once, after start-up: what start-up made stays out of every later full collection
    console.print(
        f"dashboard http://{host}:{port}/  API http://{host}:{port}/api  BEL {masked_url(settings.database_url)}"
    )
    _run(serve(app, host, port))


@app.command()
def worker() -> None:
    """Run a worker against the configured Temporal, BEL and storage."""
    from worker.run import serve

    settings = _settings()
    console.print(
        f"worker on task queue [bold]{settings.task_queue}[/] at {settings.temporal_address} "
        f"(namespace {settings.namespace}); BEL {masked_url(settings.database_url)}"
    )
    _run(serve(settings))


@app.command()
def want(
    ref: Annotated[str, typer.Argument(help="Partition ref, e.g. daily_summary/2024-01-07")],
    data_timestamp: Annotated[
        str | None, typer.Option(help="Business time (ISO); default: the date in the ref, else today.")
    ] = None,
    sla: Annotated[str | None, typer.Option(help="Due this long after the data time, e.g. 9h.")] = None,
    ttl: Annotated[str | None, typer.Option(help="Give up this long after the data time, e.g. 30d.")] = None,
    source: Annotated[WantSource, typer.Option(help="Who asks.")] = WantSource.cli,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the want, showing live progress.")] = False,
    requires: Annotated[
        list[str] | None,
        typer.Option(help="An external partition that must be available before the job runs; repeatable."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Declare that a partition must exist."""
    timestamp = parse_timestamp(data_timestamp) if data_timestamp else None
    sla_d = parse_duration(sla) if sla else None
    ttl_d = parse_duration(ttl) if ttl else None

    # Check everything before touching Temporal or the BEL: bad input records nothing.
    build_spec(
        load_graph(_settings().graph),
        ref,
        data_timestamp=timestamp,
        sla=sla_d,
        ttl=ttl_d,
        source=source,
        requires=requires or (),
    )

    async def go() -> Want | None:
        db = await _client()
        async with db:
            spec = await db.want(
                ref, data_timestamp=timestamp, sla=sla_d, ttl=ttl_d, source=source, requires=requires or ()
            )
            existing = db.bel.find_want(spec.want_id)
            if not as_json:
                console.print(
                    f"want [bold]{spec.want_id}[/] for [bold]{ref}[/] registered (workflow {spec.workflow_id})"
                )
            if existing is not None and (existing.sla, existing.ttl) != (spec.sla, spec.ttl):
                err.print(
                    f"[yellow]note:[/] this want already existed with SLA {_d(existing.sla)} and TTL "
                    f"{_d(existing.ttl)}; those deadlines stand (a want's identity is its ref, data "
                    "timestamp and source, and the ref's taint count). Use another --data-timestamp or "
                    "--source for new deadlines."
                )
            if not wait:
                found = db.bel.find_want(spec.want_id)
                if as_json:
                    print(
                        json.dumps(
                            {
                                "want_id": spec.want_id,
                                "workflow_id": spec.workflow_id,
                                "want": _jsonable(found),
                            },
                            indent=2,
                        )
                    )
                return found
            if as_json:
                result = await db.wait(spec)
            else:
                with Live(
                    render.progress_summary(None, [], []), console=console, refresh_per_second=4
                ) as live:

                    def update(current: Want | None) -> None:
                        live.update(render.progress(db.bel, current))

                    result = await db.wait(spec, on_update=update)
                    live.update(render.progress(db.bel, result))
                console.print(render.fulfillment_tree(want_view(db.bel, spec.want_id)))
            if as_json:
                print(json.dumps(_jsonable(want_view(db.bel, spec.want_id)), indent=2))
            return result

    result = _run(go())
    if wait and result is not None and result.state is not WantState.successful:
        raise typer.Exit(1)


State = Annotated[str | None, typer.Option(help="Only this state.")]
Prefix = Annotated[str | None, typer.Option(help="Only refs starting with this.")]
Pattern = Annotated[
    str | None, typer.Option("--pattern", help="Only refs matching this glob: * within a segment, ** across.")
]
Offset = Annotated[int, typer.Option(min=0, max=MAX_INDEX, help="Skip this many rows (paging).")]


def _page_note(page: Page) -> str:
    return "" if page.next_offset is None else f"more: --offset {page.next_offset}"


@wants_app.command("list")
def wants_list(
    state: State = None,
    prefix: Prefix = None,
    pattern: Pattern = None,
    limit: Limit = 50,
    offset: Offset = 0,
    as_json: JsonFlag = False,
) -> None:
    """List wants, newest first."""
    view = list_wants(
        _bel(),
        state=parse_choice(WantState, state),
        ref_prefix=prefix,
        ref_glob=pattern,
        limit=limit,
        offset=offset,
    )
    _emit(as_json, view, lambda: Group(render.wants_table(view.data), _page_note(view.page)))


@wants_app.command("show")
def wants_show(
    want_id: str,
    expand: Annotated[bool, typer.Option("--expand", help="Show every retry of a build.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """The fulfillment tree of a want: job runs, partition instances, derivative wants."""
    view = want_view(_bel(), want_id)
    _emit(as_json, view, lambda: render.fulfillment_tree(view, expand=expand))


@partitions_app.command("list")
def partitions_list(
    status: State = None,
    prefix: Prefix = None,
    pattern: Pattern = None,
    limit: Limit = 50,
    offset: Offset = 0,
    as_json: JsonFlag = False,
) -> None:
    """List partitions by ref."""
    view = list_partitions(
        _bel(),
        status=parse_choice(PartitionStatus, status, "status"),
        ref_prefix=prefix,
        ref_glob=pattern,
        limit=limit,
        offset=offset,
    )
    _emit(as_json, view, lambda: Group(render.partitions_table(view.data), _page_note(view.page)))


@partitions_app.command("show")
def partitions_show(
    ref: Annotated[str | None, typer.Argument(help="Partition ref; its live (or latest) instance.")] = None,
    instance: Annotated[
        str | None, typer.Option("--instance", help="Show this instance (UUID) instead, live or not.")
    ] = None,
    fan_out: Annotated[int, typer.Option(min=1, max=10_000, help="Downstream consumers to show.")] = FAN_OUT,
    offset: Annotated[
        int, typer.Option(min=0, max=MAX_INDEX, help="Skip this many downstream consumers.")
    ] = 0,
    as_json: JsonFlag = False,
) -> None:
    """Lineage of a partition instance: the job run that built it and what it read; who reads it."""
    if (ref is None) == (instance is None):
        raise CliError("give a partition REF or --instance UUID (one of them)")
    bel = _bel()
    if instance is not None:
        view = instance_view(bel, instance, fan_out=fan_out, offset=offset)
    else:
        assert ref is not None
        view = partition_view(bel, ref, fan_out=fan_out, offset=offset)
    _emit(as_json, view, lambda: render.lineage_view(view))


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
        _bel(),
        state=parse_choice(JobRunState, state),
        job_label=job,
        ref_prefix=prefix,
        ref_glob=pattern,
        limit=limit,
        offset=offset,
    )
    _emit(as_json, view, lambda: Group(render.job_runs_table(view.data), _page_note(view.page)))


@job_runs_app.command("show")
def job_runs_show(job_run_id: str, as_json: JsonFlag = False) -> None:
    """What a job run did: wanted by, read and wrote (UUIDs), status history, derivative wants, delegations."""
    view = job_run_view(_bel(), job_run_id)
    _emit(as_json, view, lambda: render.job_run_detail(view))


@app.command()
def taint(
    ref: str,
    reason: Annotated[str | None, typer.Option(help="Why, shown in the lineage views.")] = None,
    cascade: Annotated[
        bool, typer.Option("--cascade", help="Taint the current downstream too, so wants rebuild it.")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only show the impact.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Invalidate a partition's live instance: shows the downstream impact, then (once confirmed)
    marks it tainted; the next want rebuilds it and everything built from it shows as stale."""
    bel = _bel()
    impact = bel.taint_impact(ref)
    if dry_run:
        _emit(as_json, {"impact": impact, "tainted": []}, lambda: render.taint_impact(impact))
        return
    if not yes:
        if as_json or not sys.stdin.isatty():
            raise CliError(
                f"nothing tainted: see the impact with `databuild taint {ref} --dry-run`, "
                f"then confirm with `databuild taint {ref} --yes`"
            )
        console.print(render.taint_impact(impact))
        also = f" and {len(impact.current)} current downstream partition(s) (--cascade)" if cascade else ""
        if not typer.confirm(f"taint {ref}{also}?", default=False):
            raise typer.Exit(1)
    result = bel.taint(ref, reason=reason, cascade=cascade, instance_id=impact.instance_id)
    _emit(
        as_json,
        {"impact": result.impact, "tainted": result.tainted, "partition": result.partition},
        lambda: Group(
            render.taint_impact(result.impact),
            f"tainted {', '.join(t.ref for t in result.tainted)}; the next want rebuilds "
            + ("them" if len(result.tainted) > 1 else "it")
            + (
                f"; left alone (being rebuilt): {', '.join(t.ref for t in result.not_tainted)}"
                if result.not_tainted
                else ""
            ),
        ),
    )


@app.command()
def publish(
    ref: str,
    instance_id: Annotated[
        str | None, typer.Option(help="The producer's instance UUID (repeats of it change nothing).")
    ] = None,
    graph: Annotated[str | None, typer.Option(help="Who produced it (recorded with the partition).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Announce that an external partition is now available; wakes every want waiting for it."""

    partition, created, signalled = _run(
        _with_client(lambda db: db.publish(ref, instance_id=instance_id, source=graph or "cli"))
    )
    payload = {"partition": partition, "newly_live": created, "wants_signalled": signalled}
    _emit(
        as_json,
        payload,
        lambda: (
            f"{ref} is live (instance {partition.instance_id}); "
            + ("announced now" if created else "it already was")
            + f"; {signalled} waiting want(s) signalled"
        ),
    )


@app.command()
def resolve(ref: str, as_json: JsonFlag = False) -> None:
    """Clear a fail-lock after fixing its cause: waiting wants decide again and rebuild it."""
    partitions, woken = _run(_with_client(lambda db: db.resolve(ref)))
    refs = ", ".join(p.ref for p in partitions)
    _emit(
        as_json,
        {"partitions": partitions, "wants_woken": woken},
        lambda: f"resolved {refs}; {woken} waiting want(s) will decide again",
    )


@app.command()
def skip(ref: str, as_json: JsonFlag = False) -> None:
    """Retire a partition: it is never built again, and wants waiting for it fail."""
    partition, woken = _run(_with_client(lambda db: db.skip(ref)))
    _emit(
        as_json,
        {"partition": partition, "wants_woken": woken},
        lambda: f"{ref} retired; {woken} waiting want(s) told",
    )


@app.command()
def migrate() -> None:
    """Create or upgrade the BEL schema (Alembic); workers and commands also do this on start."""
    from databuild.bel import BuildEventLog

    url = _settings().database_url
    BuildEventLog.create(url).dispose()
    console.print(f"BEL schema at {masked_url(url)} is up to date")


@app.command()
def sweep(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only list what would go.")] = False,
    keep_failed: Annotated[
        str | None,
        typer.Option(
            help="Keep failed attempts' submission folders this long (default: 7d, or DATABUILD_KEEP_FAILED_ATTEMPTS)."
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Remove what job attempts left on the storage once their job run has ended, and put back a live
    partition an uncommitted publish had moved aside. Workers do this every DATABUILD_SWEEP_EVERY (1h)."""
    from databuild.sweep import sweep as sweep_storage

    settings = _settings()
    keep = parse_setting_duration(keep_failed) if keep_failed is not None else settings.keep_failed_attempts
    report = sweep_storage(Storage(settings.storage_root), _bel(), keep_failed=keep, dry_run=dry_run)
    _emit(as_json, report, lambda: render.sweep_report(report))


@app.command()
def stats(as_json: JsonFlag = False) -> None:
    """Job success rates (skipped counts as success) and builds avoided by delegation."""
    figures = _bel().stats()
    _emit(as_json, figures, lambda: render.stats_view(figures))


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
    page = _bel().event_page(since, limit, where)

    def human() -> Any:
        from rich.table import Table

        table = Table("idx", "at", "type", "ref", "want", "job run")
        for e in page.events:
            table.add_row(
                str(e.idx), f"{e.at:%H:%M:%S}", e.type, e.ref or "", e.want_id or "", e.job_run_id or ""
            )
        return Group(table, f"next: --since {page.next_since_idx}  (log at {page.last_idx})")

    _emit(as_json, page, human)


@upstream_app.command("add")
def upstream_add(
    url: Annotated[str, typer.Argument(help="The upstream graph's HTTP API, e.g. http://upstream:8000")],
    pattern: Annotated[list[str], typer.Option(help="Upstream refs to follow (glob); repeatable.")],
    name: Annotated[str | None, typer.Option(help="What to call the upstream (default: its host).")] = None,
    every: Annotated[str, typer.Option(help="How often to ask it for new events.")] = "5s",
    as_json: JsonFlag = False,
) -> None:
    """Follow an upstream graph durably: its live partitions matching the patterns become available
    here (external partitions) and wake the wants waiting for them. Survives restarts; resumes where it was."""
    import httpx

    from databuild.protocol import UpstreamInput
    from databuild.temporal import start_upstream
    from databuild.upstream import check_upstream

    name = name or (httpx.URL(url).host or "").replace(":", "_") or "upstream"
    check_upstream(name, url, pattern)
    spec = UpstreamInput(name=name, url=url, patterns=pattern, poll_every=parse_duration(every))
    _run(_with_client(lambda db: start_upstream(db.temporal, db.settings.task_queue, spec)))
    _emit(as_json, spec, lambda: f"following upstream [bold]{name}[/] at {url} ({', '.join(pattern)})")


@upstream_app.command("list")
def upstream_list(as_json: JsonFlag = False) -> None:
    """Upstream graphs followed, with their cursors and what they applied."""
    from databuild.protocol import QUERY_UPSTREAM_STATUS, UPSTREAM_WORKFLOW, UpstreamStatus

    async def go(db: DataBuild) -> list[UpstreamStatus]:
        query = (
            f"WorkflowType = '{UPSTREAM_WORKFLOW}' AND ExecutionStatus = 'Running' "
            f"AND TaskQueue = '{db.settings.task_queue}'"
        )
        found = []
        async for execution in db.temporal.list_workflows(query):
            handle = db.temporal.get_workflow_handle(execution.id)
            found.append(await handle.query(QUERY_UPSTREAM_STATUS, result_type=UpstreamStatus))
        return sorted(found, key=lambda u: u.name)

    statuses = _run(_with_client(go))

    def human() -> Any:
        from rich.table import Table

        table = Table("name", "url", "patterns", "cursor", "applied", "refused")
        for u in statuses:
            url = masked_url(u.url) if u.url else "push only"
            table.add_row(u.name, url, ", ".join(u.patterns), str(u.cursor), str(u.applied), str(u.refused))
        return table

    _emit(as_json, statuses, human)


@upstream_app.command("remove")
def upstream_remove(name: str, as_json: JsonFlag = False) -> None:
    """Stop following an upstream graph (what it made available stays available)."""
    from temporalio.service import RPCError

    from databuild.protocol import upstream_workflow_id

    async def go(db: DataBuild) -> None:
        try:
            await db.temporal.get_workflow_handle(
                upstream_workflow_id(db.settings.task_queue, name)
            ).terminate("databuild upstream remove")
        except RPCError as error:
            raise CliError(
                f"no upstream {name!r} is followed ({error.message}); see `databuild upstream list`"
            ) from None

    _run(_with_client(go))
    _emit(as_json, {"removed": name}, lambda: f"stopped following upstream {name}")


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
    from databuild.protocol import ScheduledWantInput
    from databuild.schedules import check_pattern, fill
    from databuild.temporal import create_want_schedule

    check_pattern(pattern)
    load_graph(_settings().graph).resolve(
        fill(pattern, datetime(2024, 1, 7, 5, tzinfo=UTC))
    )  # a job makes it
    spec = ScheduledWantInput(
        pattern=pattern, sla=parse_duration(sla) if sla else None, ttl=parse_duration(ttl) if ttl else None
    )
    sid = _run(
        _with_client(
            lambda db: create_want_schedule(db.temporal, db.settings.task_queue, spec, cron, paused=paused)
        )
    )
    _emit(as_json, {"schedule_id": sid, "pattern": pattern, "cron": cron}, lambda: f"schedule {sid}: {cron}")


@schedule_app.command("list")
def schedule_list(as_json: JsonFlag = False) -> None:
    """Want schedules: pattern, cron, paused."""
    from databuild.temporal import list_want_schedules

    found = _run(_with_client(lambda db: list_want_schedules(db.temporal)))
    rows = [{"pattern": p, "cron": c, "paused": paused} for p, c, paused in found]

    def human() -> Any:
        from rich.table import Table

        table = Table("pattern", "cron", "paused")
        for row in rows:
            table.add_row(str(row["pattern"]), str(row["cron"]), "yes" if row["paused"] else "")
        return table

    _emit(as_json, rows, human)


@schedule_app.command("remove")
def schedule_remove(pattern: str, as_json: JsonFlag = False) -> None:
    """Delete a want schedule (wants it registered stay)."""
    from databuild.temporal import delete_want_schedule

    _run(_with_client(lambda db: delete_want_schedule(db.temporal, pattern)))
    _emit(as_json, {"removed": pattern}, lambda: f"schedule for {pattern} removed")


@schedule_app.command("backfill")
def schedule_backfill(
    pattern: str,
    start: Annotated[str, typer.Option("--from", help="First time (ISO, UTC if no zone).")],
    end: Annotated[str, typer.Option("--to", help="Last time (ISO), inclusive.")],
    as_json: JsonFlag = False,
) -> None:
    """Run the schedule for every time it would have fired between --from and --to. Idempotent: a
    time already wanted is the same want."""
    from databuild.temporal import backfill_want_schedule

    first, last = parse_timestamp(start), parse_timestamp(end)
    if last < first:
        raise CliError(f"--to {end} is before --from {start}")
    _run(_with_client(lambda db: backfill_want_schedule(db.temporal, pattern, first, last)))
    _emit(
        as_json,
        {"pattern": pattern, "from": first, "to": last},
        lambda: f"backfilling {pattern} {first} .. {last}",
    )


@app.command()
def sla(as_json: JsonFlag = False) -> None:
    """Wants that missed their SLA (flagged, or overdue and not yet built)."""
    found = _bel().sla_misses()
    _emit(as_json, found, lambda: render.wants_table(found))


def main() -> None:
    code: int = 0
    try:
        app()
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except (DataBuildError, CliError) as error:
        # One line, however wide the terminal, and printed as is (messages quote user input).
        err.print(f"[bold red]error:[/] {escape(str(error))}", soft_wrap=True)
        code = 2
    except KeyboardInterrupt:
        code = 130
    sys.stdout.flush()
    sys.stderr.flush()
    # The Temporal SDK can abort the interpreter at exit (PyGILState_Release); leave directly.
    os._exit(code)


if __name__ == "__main__":
    main()
