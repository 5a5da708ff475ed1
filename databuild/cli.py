"""`databuild`: the command line. Every list/show command takes --json for scripts."""

import asyncio
import json
import os
import sys
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Annotated, Any, TypeVar

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.live import Live

from databuild import render
from databuild.client import DataBuild, build_spec
from databuild.config import Settings
from databuild.durations import format_duration, parse_duration, parse_timestamp
from databuild.errors import DataBuildError
from databuild.graph import load_graph
from databuild.models import JobRunState, PartitionStatus, Want, WantSource, WantState
from databuild.views import fulfillment, lineage

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

console = Console()
err = Console(stderr=True)
T = TypeVar("T")

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
Limit = Annotated[int, typer.Option(help="Rows to show.")]


class CliError(Exception):
    pass


def _settings(**overrides: object) -> Settings:
    return Settings.from_env(**overrides)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


async def _client() -> DataBuild:
    settings = _settings()
    try:
        return await DataBuild.connect(settings)
    except RuntimeError as error:
        raise CliError(
            f"cannot reach Temporal at {settings.temporal_address} ({error}). Start the embedded stack "
            "with `databuild dev`, or point DATABUILD_TEMPORAL_ADDRESS at your server."
        ) from None


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
) -> None:
    """Embedded stack: Temporal dev server (+ UI) and a worker; data in ./.databuild."""
    from worker.dev import run_dev  # the CLI hands over to the worker package to host workflows

    settings = _settings(temporal_address=f"127.0.0.1:{port}")
    raise typer.Exit(
        _run(run_dev(settings, demo=demo, exit_after_demo=exit_after_demo, ui_port=ui_port, console=console))
    )


@app.command()
def worker() -> None:
    """Run a worker against the configured Temporal, BEL and storage."""
    from worker.run import serve

    settings = _settings()
    console.print(
        f"worker on task queue [bold]{settings.task_queue}[/] at {settings.temporal_address} "
        f"(namespace {settings.namespace}); BEL {settings.database_url}"
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
    as_json: JsonFlag = False,
) -> None:
    """Declare that a partition must exist."""
    timestamp = parse_timestamp(data_timestamp) if data_timestamp else None
    sla_d = parse_duration(sla) if sla else None
    ttl_d = parse_duration(ttl) if ttl else None

    # Check everything before touching Temporal or the BEL: bad input records nothing.
    spec = build_spec(
        load_graph(_settings().graph), ref, data_timestamp=timestamp, sla=sla_d, ttl=ttl_d, source=source
    )

    async def go() -> Want | None:
        db = await _client()
        async with db:
            await db.want(ref, data_timestamp=timestamp, sla=sla_d, ttl=ttl_d, source=source)
            existing = db.bel.find_want(spec.want_id)
            if not as_json:
                console.print(
                    f"want [bold]{spec.want_id}[/] for [bold]{ref}[/] registered (workflow {spec.workflow_id})"
                )
            if existing is not None and (existing.sla, existing.ttl) != (spec.sla, spec.ttl):
                err.print(
                    f"[yellow]note:[/] this want already existed with SLA {_d(existing.sla)} and TTL "
                    f"{_d(existing.ttl)}; those deadlines stand (a want's identity is its ref, data "
                    "timestamp and source). Use another --data-timestamp or --source for new deadlines."
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
                console.print(render.fulfillment_tree(fulfillment(db.bel, spec.want_id)))
            if as_json:
                print(json.dumps(_jsonable(fulfillment(db.bel, spec.want_id)), indent=2))
            return result

    result = _run(go())
    if wait and result is not None and result.state is not WantState.successful:
        raise typer.Exit(1)


@wants_app.command("list")
def wants_list(
    state: Annotated[WantState | None, typer.Option(help="Only wants in this state.")] = None,
    prefix: Annotated[str | None, typer.Option(help="Only refs starting with this.")] = None,
    limit: Limit = 50,
    as_json: JsonFlag = False,
) -> None:
    """List wants, newest first."""
    found = _bel().wants(state=state, ref_prefix=prefix, limit=limit)
    _emit(as_json, found, lambda: render.wants_table(found))


@wants_app.command("show")
def wants_show(want_id: str, as_json: JsonFlag = False) -> None:
    """The fulfillment tree of a want: job runs, partitions, derivative wants."""
    tree = fulfillment(_bel(), want_id)
    _emit(as_json, tree, lambda: render.fulfillment_tree(tree))


@partitions_app.command("list")
def partitions_list(
    status: Annotated[PartitionStatus | None, typer.Option(help="Only this status.")] = None,
    prefix: Annotated[str | None, typer.Option(help="Only refs starting with this.")] = None,
    limit: Limit = 50,
    as_json: JsonFlag = False,
) -> None:
    """List partitions by ref."""
    found = _bel().partitions(status=status, ref_prefix=prefix, limit=limit)
    _emit(as_json, found, lambda: render.partitions_table(found))


@partitions_app.command("show")
def partitions_show(ref: str, as_json: JsonFlag = False) -> None:
    """Lineage of a partition: the job run that built it and its inputs; who reads it."""
    view = lineage(_bel(), ref)
    _emit(as_json, view, lambda: render.lineage_view(view))


@job_runs_app.command("list")
def job_runs_list(
    state: Annotated[JobRunState | None, typer.Option(help="Only runs in this state.")] = None,
    job: Annotated[str | None, typer.Option(help="Only this job label.")] = None,
    limit: Limit = 50,
    as_json: JsonFlag = False,
) -> None:
    """List job runs, newest first."""
    found = _bel().job_runs(state=state, job_label=job, limit=limit)
    _emit(as_json, found, lambda: render.job_runs_table(found))


@job_runs_app.command("show")
def job_runs_show(job_run_id: str, as_json: JsonFlag = False) -> None:
    """What a job run did: outputs, reads and writes with instance UUIDs, missing inputs."""
    run = _bel().job_run(job_run_id)

    def human() -> Any:
        from rich.tree import Tree

        tree = Tree(render.job_run_label(run))
        tree.add(f"wanted by {run.want_id or '-'}  (workflow {run.workflow_id})")
        for r in run.reads:
            tree.add(f"read {r.ref} uuid:{r.instance_id}")
        for w in run.writes:
            tree.add(f"wrote {w.ref} uuid:{w.instance_id}")
        for m in run.missing:
            tree.add(f"missing {m}")
        if run.reason:
            tree.add(f"reason: {run.reason}")
        return tree

    _emit(as_json, run, human)


@app.command()
def publish(ref: str, as_json: JsonFlag = False) -> None:
    """Announce that an external partition is now available; wakes every want waiting for it."""

    partition, created, signalled = _run(_with_client(lambda db: db.publish(ref)))
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
    console.print(f"BEL schema at {url} is up to date")


@app.command()
def stats(as_json: JsonFlag = False) -> None:
    """Job success rates (skipped counts as success) and builds avoided by delegation."""
    figures = _bel().stats()
    _emit(as_json, figures, lambda: render.stats_view(figures))


@app.command()
def events(
    since: Annotated[int, typer.Option("--since", help="Only events after this index.")] = 0,
    pattern: Annotated[str | None, typer.Option(help="Only events for refs matching this glob.")] = None,
    limit: Limit = 100,
    as_json: JsonFlag = False,
) -> None:
    """The build event log, oldest first."""
    found = _bel().events(since_idx=since, limit=limit, pattern=pattern)

    def human() -> Any:
        from rich.table import Table

        table = Table("idx", "at", "type", "ref", "want", "job run")
        for e in found:
            table.add_row(
                str(e.idx), f"{e.at:%H:%M:%S}", e.type, e.ref or "", e.want_id or "", e.job_run_id or ""
            )
        return table

    _emit(as_json, found, human)


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
        err.print(f"[bold red]error:[/] {error}")
        code = 2
    except KeyboardInterrupt:
        code = 130
    sys.stdout.flush()
    sys.stderr.flush()
    # The Temporal SDK can abort the interpreter at exit (PyGILState_Release); leave directly.
    os._exit(code)


if __name__ == "__main__":
    main()
