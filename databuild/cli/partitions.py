"""`databuild partitions list|show`: partitions, and the lineage of one instance."""

from typing import Annotated

import typer
from rich.console import Group

from databuild.cli import render
from databuild.cli.app import (
    CliError,
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
    run,
    with_client,
)
from databuild.cli.render_cost import instance_cost
from databuild.models import MAX_INDEX, PartitionStatus, parse_choice
from databuild.views.lineage import FAN_OUT, instance_view, list_partitions, partition_view
from databuild.views.staleness import with_staleness

partitions_app = typer.Typer(help="Inspect partitions.", no_args_is_help=True)
app.add_typer(partitions_app, name="partitions")


@partitions_app.command("list")
def partitions_list(
    status: State = None,
    prefix: Prefix = None,
    pattern: Pattern = None,
    limit: Limit = 50,
    offset: Offset = 0,
    as_json: JsonFlag = False,
) -> None:
    """List partitions by ref; a live one that is stale says so (`databuild why REF` explains it)."""
    log = bel()
    view = list_partitions(
        log,
        status=parse_choice(PartitionStatus, status, "status"),
        ref_prefix=prefix,
        ref_glob=pattern,
        limit=limit,
        offset=offset,
    )
    if (graph := graph_or_note()) is not None:
        view = with_staleness(log, graph, view)
    emit(
        as_json,
        view,
        lambda: Group(render.partitions_table(view.data, view.index.stale), page_note(view.page)),
    )


@partitions_app.command("pin")
def partitions_pin(
    instance: Annotated[str, typer.Argument(help="Instance UUID (`partitions show REF` lists them).")],
    reason: Annotated[str | None, typer.Option(help="Why it is kept, for whoever finds it later.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Keep an instance's data from garbage collection, live or not."""
    pinned = run(with_client(lambda db: db.pin(instance, reason=reason)))
    emit(
        as_json,
        pinned,
        lambda: f"pinned {pinned.ref} instance {pinned.instance_id}: gc keeps {pinned.location}",
    )


@partitions_app.command("unpin")
def partitions_unpin(
    instance: Annotated[str, typer.Argument(help="Instance UUID.")], as_json: JsonFlag = False
) -> None:
    """Let garbage collection remove an instance again once it is past the retention."""
    unpinned = run(with_client(lambda db: db.pin(instance, pinned=False)))
    emit(as_json, unpinned, lambda: f"unpinned {unpinned.ref} instance {unpinned.instance_id}")


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
    log = bel()
    if instance is not None:
        view = instance_view(log, instance, fan_out=fan_out, offset=offset)
    else:
        assert ref is not None
        view = partition_view(log, ref, fan_out=fan_out, offset=offset)
    if (graph := graph_or_note()) is not None:
        view = with_staleness(log, graph, view)
    emit(as_json, view, lambda: Group(render.lineage_view(view), *instance_cost(view)))
