"""`databuild want` (declare a need, optionally wait for it) and `databuild wants list|show`."""

import asyncio
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.live import Live

from databuild.cli import render
from databuild.cli.app import (
    JsonFlag,
    Limit,
    Offset,
    Pattern,
    PlanFlag,
    Prefix,
    State,
    app,
    bel,
    client,
    console,
    duration,
    emit,
    err,
    jsonable,
    page_note,
    run,
    settings,
    with_client,
)
from databuild.cli.plan_render import plan_view
from databuild.client import DataBuild, build_spec
from databuild.domain.plans import Plan
from databuild.durations import parse_duration, parse_timestamp
from databuild.graph import load_graph
from databuild.models import Want, WantSource, WantSpec, WantState, parse_choice
from databuild.views.lineage import list_wants, want_view
from databuild.views.staleness import with_staleness

wants_app = typer.Typer(help="Inspect wants.", no_args_is_help=True)
app.add_typer(wants_app, name="wants")


FreshFlag = Annotated[
    bool,
    typer.Option(
        "--fresh",
        help="If REF is live but stale (`databuild stale`), rebuild it and the stale inputs it needs; "
        "by default a want accepts any live partition.",
    ),
]
Requires = Annotated[
    list[str] | None,
    typer.Option(help="An external partition that must be available before the job runs; repeatable."),
]


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
    requires: Requires = None,
    plan: PlanFlag = False,
    fresh: FreshFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Declare that a partition must exist (with --plan: show what that would do, and record nothing;
    with --fresh: rebuild it if it is stale)."""
    asked = _Asked(
        ref=ref,
        data_timestamp=parse_timestamp(data_timestamp) if data_timestamp else None,
        sla=parse_duration(sla) if sla else None,
        ttl=parse_duration(ttl) if ttl else None,
        source=source,
        requires=tuple(requires or ()),
        fresh=fresh,
    )
    asked.check()  # before touching Temporal or the BEL: bad input records nothing
    if plan:
        found = run(with_client(asked.plan, lazy=True, reads_only=True))  # a plan reads the BEL alone
        emit(as_json, found, lambda: plan_view(found, ref))
        return
    result = run(_want(asked, wait=wait, as_json=as_json))
    if wait and result is not None and result.state is not WantState.successful:
        raise typer.Exit(1)


@dataclass(frozen=True)
class _Asked:
    """A want as the command line asks for it, parsed."""

    ref: str
    data_timestamp: datetime | None
    sla: timedelta | None
    ttl: timedelta | None
    source: WantSource
    requires: tuple[str, ...]
    fresh: bool

    def options(self) -> dict[str, Any]:
        """What a plan, a spec and a registration all take (a registration and a spec: the source too)."""
        return {
            "data_timestamp": self.data_timestamp,
            "sla": self.sla,
            "ttl": self.ttl,
            "requires": self.requires,
            "fresh": self.fresh,
        }

    def check(self) -> None:
        build_spec(load_graph(settings().graph), self.ref, source=self.source, **self.options())

    async def plan(self, db: DataBuild) -> Plan:
        return await db.plan(self.ref, **self.options())

    async def register(self, db: DataBuild) -> WantSpec:
        return await db.want(self.ref, source=self.source, **self.options())


async def _want(asked: _Asked, *, wait: bool, as_json: bool) -> Want | None:
    db = await client()
    async with db:
        spec = await asked.register(db)
        await _announce(db, spec, asked.ref, as_json=as_json)
        if not wait:
            return await _registered(db, spec, as_json=as_json)
        return await _wait_and_show(db, spec, as_json=as_json)


async def _announce(db: DataBuild, spec: WantSpec, ref: str, *, as_json: bool) -> None:
    """Say the want is registered, and warn when it already existed with other deadlines."""
    existing = await asyncio.to_thread(db.bel.wants.find, spec.want_id)
    if not as_json:
        fresh = " (fresh: rebuilt if stale)" if spec.fresh else ""
        console.print(
            f"want [bold]{spec.want_id}[/] for [bold]{ref}[/] registered{fresh} (workflow {spec.workflow_id})"
        )
    if existing is not None and (existing.sla, existing.ttl) != (spec.sla, spec.ttl):
        err.print(
            f"[yellow]note:[/] this want already existed with SLA {duration(existing.sla)} and TTL "
            f"{duration(existing.ttl)}; those deadlines stand (a want's identity is its ref, data "
            "timestamp and source, and the ref's taint count). Use another --data-timestamp or "
            "--source for new deadlines."
        )


async def _registered(db: DataBuild, spec: WantSpec, *, as_json: bool) -> Want | None:
    """The want as recorded now, printed as JSON when asked (without --wait)."""
    found = await asyncio.to_thread(db.bel.wants.find, spec.want_id)
    if as_json:
        print(
            json.dumps(
                {
                    "want_id": spec.want_id,
                    "workflow_id": spec.workflow_id,
                    "fresh": spec.fresh,
                    "want": jsonable(found),
                },
                indent=2,
            )
        )
    return found


async def _wait_and_show(db: DataBuild, spec: WantSpec, *, as_json: bool) -> Want:
    """Wait for the want (with live progress on a terminal), then show its fulfillment tree."""
    if as_json:
        result = await db.wait(spec)
    else:
        live_display = Live(render.progress(None), console=console, refresh_per_second=4)
        with render.live_block(console), live_display as live:
            result = await db.wait(spec, on_progress=lambda progress: live.update(render.progress(progress)))
    graph = await db.loaded_graph()
    tree = await asyncio.to_thread(
        lambda: with_staleness(db.bel, graph, want_view(db.bel, spec.want_id, graph))
    )
    if as_json:
        print(json.dumps(jsonable(tree), indent=2))
    else:
        console.print(render.fulfillment_tree(tree))
    return result


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
        bel(),
        state=parse_choice(WantState, state),
        ref_prefix=prefix,
        ref_glob=pattern,
        limit=limit,
        offset=offset,
    )
    emit(as_json, view, lambda: Group(render.wants_table(view.data), page_note(view.page)))


@wants_app.command("show")
def wants_show(
    want_id: str,
    expand: Annotated[bool, typer.Option("--expand", help="Show every retry of a build.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """The fulfillment tree of a want: job runs, partition instances, derivative wants."""
    log, graph = bel(), load_graph(settings().graph)
    view = with_staleness(log, graph, want_view(log, want_id, graph))
    emit(as_json, view, lambda: render.fulfillment_tree(view, expand=expand))
