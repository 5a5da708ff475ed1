"""`databuild tables`: each output pattern's table, its format, catalog and current snapshot, and the
partitions it has not caught up with the BEL on."""

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from databuild.cli.app import JsonFlag, app, emit, run, with_client
from databuild.views.tables import TableView


@app.command("tables")
def tables(as_json: JsonFlag = False) -> None:
    """Each pattern's table: format, catalog, current snapshot, partitions held and behind the BEL."""
    found = run(with_client(lambda db: db.tables()))
    emit(as_json, found, lambda: tables_table(found))


def tables_table(views: list[TableView]) -> RenderableType:
    table = Table("pattern", "table", "format", "snapshot", "committed", "partitions", "behind", box=None)
    table.columns[5].justify = table.columns[6].justify = "right"
    notes: list[Text] = []
    for view in views:
        if view.table is None:
            notes.append(Text(f"{view.pattern}: no table ({view.note})", style="dim"))
            continue
        behind = Text(str(view.behind), style="yellow" if view.behind else "")
        table.add_row(
            view.pattern,
            view.table,
            view.format or "",
            "" if view.snapshot_id is None else str(view.snapshot_id),
            "" if view.committed_at is None else view.committed_at.strftime("%Y-%m-%d %H:%M:%S"),
            str(view.partitions),
            behind,
        )
        if view.note:
            notes.append(Text(f"{view.table}: {view.note}", style="dim"))
        if view.last_failure:
            notes.append(
                Text(
                    f"{view.table}: {view.failures} failed commit(s), the latest: {view.last_failure}",
                    style="red",
                )
            )
    catalogs = sorted({f"{v.format}: {v.catalog}" for v in views if v.catalog})
    footer = [Text(f"catalog {c}", style="dim") for c in catalogs]
    if any(v.behind for v in views):
        footer.append(
            Text(
                "partitions behind are committed by the workers as they follow the BEL, or when one starts",
                "yellow",
            )
        )
    return Group(table, *notes, *footer)
