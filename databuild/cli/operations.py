"""Operator actions: `taint`, `publish`, `resolve`, `skip`, `check`, and the upkeep commands `migrate`, `gc`."""

import sys
from typing import Annotated

import typer
from rich.console import Group

from databuild.cli import render
from databuild.cli.app import (
    CliError,
    JsonFlag,
    app,
    bel,
    client,
    console,
    emit,
    err,
    jsonable,
    run,
    settings,
    with_client,
)
from databuild.config import masked_url
from databuild.durations import parse_setting_duration
from databuild.errors import GraphDefinitionError
from databuild.graph import load_graph


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
    db = run(client(lazy=True))  # a taint records in the BEL only: it works while Temporal is down
    impact = run(db.taint_impact(ref))
    if dry_run:
        emit(as_json, {"impact": impact, "tainted": []}, lambda: render.taint_impact(impact))
        return
    if not yes:
        if as_json or not sys.stdin.isatty():
            # No one to ask: the impact is shown all the same, and nothing is tainted without --yes.
            emit(as_json, {"impact": impact, "tainted": []}, lambda: render.taint_impact(impact))
            raise CliError(
                f"nothing tainted: see the impact with `databuild taint {ref} --dry-run`, "
                f"then confirm with `databuild taint {ref} --yes`"
            )
        console.print(render.taint_impact(impact))
        also = f" and {len(impact.current)} current downstream partition(s) (--cascade)" if cascade else ""
        if not typer.confirm(f"taint {ref}{also}?", default=False):
            raise typer.Exit(1)
    result = run(db.taint(ref, reason=reason, cascade=cascade, instance_id=impact.instance_id))
    emit(
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
    location: Annotated[
        str | None,
        typer.Option(help="Where its data is (a URI); default: the ref's folder in the storage root."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Announce that an external partition is now available; wakes every want waiting for it."""

    partition, created, signalled = run(
        with_client(
            lambda db: db.publish(ref, instance_id=instance_id, source=graph or "cli", location=location)
        )
    )
    payload = {"partition": partition, "newly_live": created, "wants_signalled": signalled}
    emit(
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
    partitions, woken = run(with_client(lambda db: db.resolve(ref)))
    refs = ", ".join(p.ref for p in partitions)
    emit(
        as_json,
        {"partitions": partitions, "wants_woken": woken},
        lambda: f"resolved {refs}; {woken} waiting want(s) will decide again",
    )


@app.command()
def skip(ref: str, as_json: JsonFlag = False) -> None:
    """Retire a partition: it is never built again, and wants waiting for it fail."""
    partition, woken = run(with_client(lambda db: db.skip(ref)))
    emit(
        as_json,
        {"partition": partition, "wants_woken": woken},
        lambda: f"{ref} retired; {woken} waiting want(s) told",
    )


@app.command()
def check(ref: str, as_json: JsonFlag = False) -> None:
    """Re-run a partition's checks on its live instance, on a worker, and record the results. A failing
    blocking check takes the instance out of service and fail-locks the partition (exit code 1)."""
    recheck = run(with_client(lambda db: db.check(ref)))
    emit(as_json, {**jsonable(recheck), "fail_locked": recheck.fail_locked}, lambda: render.recheck(recheck))
    if recheck.fail_locked:
        raise typer.Exit(1)


@app.command()
def migrate() -> None:
    """Create or upgrade the BEL schema (Alembic). Workers and the CLI upgrade it when they open it too."""
    from databuild.bel import BuildEventLog

    configured = settings()
    BuildEventLog.create(configured.database_url.get_secret_value()).dispose()
    console.print(f"BEL schema at {masked_url(configured.database_url)} is up to date")


@app.command()
def gc(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only list what would be deleted.")] = False,
    keep: Annotated[
        str | None,
        typer.Option(help="Retention, e.g. 7d (default: DATABUILD_GC_KEEP, 7 days)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Delete instance locations nothing needs: not live, not pinned, not being written, and retired
    (superseded, tainted, or never published) longer than the retention ago; and the folders failed
    submitted attempts left. Workers do this every DATABUILD_GC_EVERY (1h)."""
    from databuild.jobs.storage import Storage  # pyarrow: loaded by gc only
    from databuild.jobs.tables.setup import table_publisher
    from databuild.operations.garbage import collect_garbage

    configured = settings()
    retention = parse_setting_duration(keep) if keep is not None else configured.gc_keep
    storage, log = Storage(configured.storage_root), bel()
    try:
        graph = load_graph(configured.graph)
    except GraphDefinitionError as error:  # the storage is still collected; only the tables wait
        err.print(f"[yellow]note:[/] table snapshots are not expired: {error}")
        graph = None
    tables = None if graph is None else table_publisher(configured, log, graph, storage, None)
    report = collect_garbage(storage, log, keep=retention, dry_run=dry_run, tables=tables)
    emit(as_json, report, lambda: render.gc_report(report))
