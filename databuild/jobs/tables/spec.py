"""Which table each output pattern of a graph maps to, in which format, and the partitions a commit
carries."""

import re
from dataclasses import dataclass
from datetime import datetime

from databuild.graph import Graph, Pattern
from databuild.models import TableFormatName
from databuild.refs import RESERVED_SEGMENT

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLACEHOLDER_SEGMENT = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class TableSpec:
    name: str
    columns: tuple[str, ...]  # partition columns, in the pattern's order
    format: TableFormatName = "hive"
    pattern: str = ""  # the output pattern it shows

    @property
    def prefix(self) -> str:
        """The fixed start of its pattern's refs (``daily_users/``)."""
        return self.pattern.split("{", 1)[0]


@dataclass(frozen=True)
class Placed:
    """One partition of a table, and the instance whose data it is to show (None: it is to show none)."""

    ref: str
    values: dict[str, str]  # its partition columns' values
    instance_id: str | None = None
    location: str | None = None  # where the instance's files are (a URI)


@dataclass(frozen=True)
class Committed:
    """A commit made to a table: its snapshot (Iceberg) and when the table says it was made."""

    snapshot_id: int | None
    committed_at: datetime


def table_folder(namespace: str, table: str) -> str:
    """Where an Iceberg table DataBuild creates keeps its metadata, under the storage root (its data files
    are the instances' own)."""
    return f"{RESERVED_SEGMENT}/tables/{namespace}/{table}"


def table_of(pattern: Pattern, name: str | None = None, format_: TableFormatName = "hive") -> TableSpec | str:
    """The table a pattern maps to, or why it maps to none. By default ``name/{a}/{b}`` is table
    ``name`` partitioned by ``a`` and ``b``; ``name`` (from the graph) renames the table."""
    first, *rest = pattern.text.split("/")
    columns = [m[1] for segment in rest if (m := _PLACEHOLDER_SEGMENT.fullmatch(segment))]
    if not rest or len(columns) != len(rest):
        return (
            "only `table/{column}/...` patterns map to a table (each segment after the first one placeholder)"
        )
    table = name or first
    if not _IDENTIFIER.fullmatch(table):
        return f"{table!r} is not a table name; name it with @graph.job(..., tables={{{pattern.text!r}: 'name'}})"
    return TableSpec(table, tuple(columns), format_, pattern.text)


def graph_tables(graph: Graph, default_format: TableFormatName = "hive") -> dict[str, TableSpec | str]:
    """Every output pattern of the graph, with its table (in the job's format, else ``default_format``) or
    why it has none."""
    found: dict[str, TableSpec | str] = {}
    for job in graph.jobs:
        for pattern in job.outputs:
            if pattern.text in job.tables and job.tables[pattern.text] is None:
                found[pattern.text] = "left out by the graph (tables={...: None})"
            else:
                format_ = job.table_formats.get(pattern.text, default_format)
                found[pattern.text] = table_of(pattern, job.tables.get(pattern.text), format_)
    return found
