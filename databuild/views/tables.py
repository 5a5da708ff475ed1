"""Each output pattern's table: its format, catalog and current snapshot as its format says, and how many
partitions it holds and is behind the BEL on, as the BEL says (`databuild tables`, `/api/tables`)."""

from datetime import datetime
from typing import TYPE_CHECKING

from pydantic import Field

from databuild.bel.queries import BelQueries
from databuild.config import Settings, masked_url
from databuild.graph import Graph
from databuild.jobs.tables.spec import TableSpec, graph_tables
from databuild.models import Model, TableFormatName

if TYPE_CHECKING:
    from databuild.jobs.tables.base import TableFormat


class TableView(Model):
    pattern: str
    table: str | None = Field(default=None, description="`namespace.table`; None: the pattern is no table")
    format: TableFormatName | None = None
    catalog: str | None = Field(default=None, description="where the table is registered (no secrets)")
    exists: bool | None = Field(default=None, description="None: not asked (a Hive metastore needs a worker)")
    snapshot_id: int | None = Field(default=None, description="its current snapshot (Iceberg)")
    committed_at: datetime | None = Field(default=None, description="when its current snapshot was made")
    location: str | None = None
    metadata: str | None = Field(
        default=None, description="its current metadata file (Iceberg): what DuckDB's `iceberg_scan` opens"
    )
    partitions: int = Field(default=0, description="partitions it holds, as DataBuild committed them")
    behind: int = Field(
        default=0, description="partitions it has not caught up with the BEL on (a commit not yet made)"
    )
    commits: int = Field(default=0, description="commits DataBuild made to it")
    failures: int = Field(default=0, description="commits to it that failed")
    last_failure: str | None = Field(default=None, description="why its latest failed commit failed")
    note: str | None = Field(default=None, description="why the pattern is no table, or why it was not asked")


def tables_view(bel: BelQueries, graph: Graph, settings: Settings) -> list[TableView]:
    """Every output pattern of the graph with its table, in pattern order."""
    from databuild.jobs.storage import Storage  # pyarrow and the formats: loaded when tables are asked for
    from databuild.jobs.tables.setup import table_formats

    formats = table_formats(settings, Storage(settings.storage_root), None)
    stats = {each.table: each for each in bel.tables.stats()}
    views = [
        _view(bel, settings, pattern, spec, formats)
        for pattern, spec in sorted(graph_tables(graph, settings.table_format).items())
    ]
    return [
        view.model_copy(
            update={"commits": found.commits, "failures": found.failures, "last_failure": found.last_failure}
        )
        if view.table is not None and (found := stats.get(view.table)) is not None
        else view
        for view in views
    ]


def _view(
    bel: BelQueries,
    settings: Settings,
    pattern: str,
    spec: TableSpec | str,
    formats: "dict[TableFormatName, TableFormat]",
) -> TableView:
    if isinstance(spec, str):
        return TableView(pattern=pattern, note=spec)
    view = TableView(
        pattern=pattern,
        table=f"{settings.catalog_database}.{spec.name}",
        format=spec.format,
        partitions=bel.tables.held_count(spec.prefix, spec.format),
        behind=bel.tables.count_behind(spec.prefix, spec.format),
    )
    format_ = formats.get(spec.format)
    if format_ is None:  # Hive: its metastore is a worker's Spark session's
        catalog = "none" if settings.catalog == "none" else masked_url(settings.catalog)
        note = "no catalog (DATABUILD_CATALOG=none)" if settings.catalog == "none" else None
        return view.model_copy(update={"catalog": catalog, "note": note})
    try:
        state = format_.describe(spec)
    except Exception as error:  # the catalog is down: the BEL's side still shows
        return view.model_copy(
            update={"note": f"its catalog did not answer: {str(error).splitlines()[0][:200]}"}
        )
    return view.model_copy(
        update={
            "catalog": state.catalog,
            "exists": state.exists,
            "snapshot_id": state.snapshot_id,
            "committed_at": state.committed_at,
            "location": state.location,
            "metadata": state.metadata,
            "note": None if state.exists else "created by its first publish",
        }
    )
