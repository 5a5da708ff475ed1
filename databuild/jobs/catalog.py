"""Tables in the Spark catalog (a Hive metastore): after the BEL commit, each output whose pattern maps
to a table has its table partition pointed at the live instance location, so users query
``SELECT ... FROM daily_users WHERE date = '2024-01-03'`` with Spark SQL, the Thrift server and beeline,
or any engine reading the metastore. The BEL stays the source of truth: the catalog is told what the BEL
says is live, idempotently: a partition taken out of service without a build (a taint, a skip, a failed
re-check, in any process) is dropped from its table when the worker following the log sees it, and the
whole catalog is repaired from the BEL when a worker starts.

The metastore is an embedded Derby database under ``<home>/catalog`` (one JVM at a time: the worker that
holds ``<home>/catalog/lease`` serves it, and may serve SQL to other processes through the Thrift
server), or a metastore service (``thrift://host:9083``) that any number of workers share."""

import fcntl
import logging
import re
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from urllib.parse import unquote

from databuild.bel.queries import BelQueries
from databuild.config import Settings
from databuild.graph import Graph, Pattern
from databuild.jobs.spark import SparkRuntime
from databuild.models import EventFilter, PartitionStatus

log = logging.getLogger(__name__)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLACEHOLDER_SEGMENT = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
PAGE = 500
# The events that can take a ref's live instance out of service without a build of this worker's.
OUT_OF_SERVICE = ("PartitionTainted", "PartitionSkipped", "PartitionFailed")


@dataclass(frozen=True)
class TableSpec:
    name: str
    columns: tuple[str, ...]  # partition columns, in the pattern's order


def table_of(pattern: Pattern, name: str | None = None) -> TableSpec | str:
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
    return TableSpec(table, tuple(columns))


def graph_tables(graph: Graph) -> dict[str, TableSpec | str]:
    """Every output pattern of the graph, with its table or why it has none."""
    found: dict[str, TableSpec | str] = {}
    for job in graph.jobs:
        for pattern in job.outputs:
            if pattern.text in job.tables and job.tables[pattern.text] is None:
                found[pattern.text] = "left out by the graph (tables={...: None})"
            else:
                found[pattern.text] = table_of(pattern, job.tables.get(pattern.text))
    return found


class CatalogLease:
    """The embedded metastore admits one JVM: the process holding this lock file is it."""

    def __init__(self, home: Path) -> None:
        self.path = home / "catalog" / "lease"
        self._file: IO[str] | None = None

    def acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = self.path.open("a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return False
        self._file = handle
        _HELD.append(self)  # held for the life of the process: the lock goes with the file
        return True


_HELD: list[CatalogLease] = []


def spark_catalog_conf(settings: Settings) -> dict[str, str] | None:
    """The Spark settings of the worker's session for its catalog, or None when it has none: catalog
    `none`, or an embedded metastore another worker process holds (it says so in the log)."""
    if settings.catalog == "none":
        return None
    if settings.catalog != "embedded":
        return {
            "spark.sql.catalogImplementation": "hive",
            "spark.hadoop.hive.metastore.uris": settings.catalog,
        }
    if not CatalogLease(settings.home).acquire():
        log.warning(
            "the embedded catalog under %s is held by another worker process; this one builds but leaves "
            "the catalog to it (point DATABUILD_CATALOG at a thrift:// metastore to share one)",
            settings.home / "catalog",
        )
        return None
    return embedded_catalog_conf(settings.home / "catalog")


def embedded_catalog_conf(folder: Path) -> dict[str, str]:
    folder = folder.resolve()
    derby = f"jdbc:derby:;databaseName={folder / 'metastore_db'};create=true"
    return {
        "spark.sql.catalogImplementation": "hive",
        "spark.hadoop.javax.jdo.option.ConnectionURL": derby,
        "spark.sql.warehouse.dir": str(folder / "warehouse"),
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={folder}",
    }


class Catalog:
    """Keeps table partitions on the live instances, through the worker's own SparkSession."""

    def __init__(
        self, spark: SparkRuntime, graph: Graph, bel: BelQueries, *, database: str, root: str
    ) -> None:
        self.spark = spark
        self.root = root.rstrip("/")
        self.graph = graph
        self.bel = bel
        self.database = database
        self.tables = graph_tables(graph)
        self._lock = threading.Lock()  # one catalog change at a time per process (Derby, and DDL races)
        self._known: set[str] = set()
        self._cursor: int | None = None  # the log's index up to which changes are followed (follow_log)
        # Catalog changes run on a thread of their own, so a slow metastore never holds a job activity
        # (and its heartbeats) after the commit that made its outputs live.
        self._changes = ThreadPoolExecutor(max_workers=1, thread_name_prefix="databuild-catalog")

    def follow_later(self, refs: Iterable[str]) -> Future[None]:
        """Make the tables of ``refs`` show what the BEL says of them now, in the background; a failure
        is logged (the next repair puts it right)."""
        return self._changes.submit(self._follow_all, list(refs))

    def _follow_all(self, refs: list[str]) -> None:
        for ref in refs:
            try:
                self.follow(ref)
            except Exception as error:
                log.warning("catalog: could not bring the table of %s up to date: %s", ref, error)

    def close(self) -> None:
        self._changes.shutdown(wait=True)

    def table(self, ref: str) -> tuple[TableSpec, dict[str, str]] | None:
        """``ref``'s table and its partition values, if its pattern maps to one."""
        pattern = self.graph.pattern_for(ref)
        spec = self.tables.get(pattern.text) if pattern is not None else None
        if pattern is None or not isinstance(spec, TableSpec):
            return None
        return spec, pattern.match(ref) or {}

    def follow(self, ref: str) -> str | None:
        """Point ``ref``'s table partition at the instance the BEL says is live now (a later build may
        have replaced the one that asked), or drop it when none is: after a taint, a skip or a failed
        re-check no SQL reader reads an instance taken out of service. Returns ``db.table (col=value,
        ...)`` of a partition pointed at, or None."""
        mapped = self.table(ref)
        if mapped is None:
            return None
        spec, values = mapped
        table = f"`{self.database}`.`{spec.name}`"
        where = ", ".join(f"`{c}` = '{values[c]}'" for c in spec.columns)
        partition = self.bel.partitions.find(ref)
        if partition is None or partition.status is not PartitionStatus.live:
            self._drop(table, where)
            return None
        location = self.bel.partitions.instance(partition.instance_id or "").location
        if location is None:
            return None  # none recorded: nothing to point the table partition at
        with self._lock:
            session = self.spark.session()
            if table not in self._known:
                session.sql(f"CREATE DATABASE IF NOT EXISTS `{self.database}`")
                data = session.read.parquet(location).schema
                fields = [
                    f"`{f.name}` {f.dataType.simpleString()}"
                    for f in data.fields
                    if f.name not in spec.columns
                ]
                partitions = ", ".join(f"`{c}` STRING" for c in spec.columns)
                session.sql(
                    f"CREATE TABLE IF NOT EXISTS {table} ({', '.join(fields)}, {partitions}) USING parquet "
                    f"PARTITIONED BY ({', '.join(f'`{c}`' for c in spec.columns)}) "
                    # External (a location of its own): dropping the table never deletes an instance.
                    f"LOCATION '{self.root}/{spec.name}'"
                )
                self._known.add(table)
            quoted = location.replace("'", "\\'")
            session.sql(f"ALTER TABLE {table} ADD IF NOT EXISTS PARTITION ({where}) LOCATION '{quoted}'")
            session.sql(f"ALTER TABLE {table} PARTITION ({where}) SET LOCATION '{quoted}'")
        return f"{self.database}.{spec.name} ({where})"

    def _drop(self, table: str, where: str) -> None:
        with self._lock:
            session = self.spark.session()
            if table in self._known or session.catalog.tableExists(table.replace("`", "")):
                # The table is external: dropping a partition leaves the instance's files to gc.
                session.sql(f"ALTER TABLE {table} DROP IF EXISTS PARTITION ({where})")

    def follow_log(self) -> int:
        """Follow the changes of live instances made away from this worker's builds (a taint, a skip, a
        failed re-check, from any process) that the log recorded since the last call, or since the
        repair. Returns how many refs it looked at."""
        if self._cursor is None:
            return 0  # the repair has not run: it brings every table up to date first
        page = self.bel.events.page(self._cursor, PAGE, EventFilter(types=list(OUT_OF_SERVICE)))
        refs = sorted({e.ref for e in page.events if e.ref is not None})
        self._follow_all(refs)
        self._cursor = page.next_since_idx
        return len(refs)

    def repair(self) -> int:
        """Bring every table up to date from the BEL (after a crash between a commit and its catalog
        change, or a catalog that was down): each live partition pointed at its live instance, each table
        partition of a ref that is no longer live dropped. Returns how many it pointed."""
        since = self.bel.events.last_idx()
        pointed = offset = 0
        while page := self.bel.partitions.query(status=PartitionStatus.live, limit=PAGE, offset=offset):
            offset += len(page)
            for partition in page:
                try:
                    pointed += self.follow(partition.ref) is not None
                except Exception as error:  # one bad partition must not stop the others
                    log.warning("catalog: could not point %s at its instance: %s", partition.ref, error)
        self._follow_all(self._listed_but_not_live())
        self._cursor = since  # what changed during the repair is followed again: following is idempotent
        return pointed

    def _listed_but_not_live(self) -> list[str]:
        """The refs of the table partitions in the catalog whose ref the BEL says is not live."""
        listed: list[str] = []
        for pattern in self.graph.patterns:
            spec = self.tables.get(pattern.text)
            if not isinstance(spec, TableSpec):
                continue
            with self._lock:
                session = self.spark.session()
                if not session.catalog.tableExists(f"{self.database}.{spec.name}"):
                    continue
                shown = session.sql(f"SHOW PARTITIONS `{self.database}`.`{spec.name}`").collect()
            for row in shown:
                values = dict(
                    (column, unquote(value))
                    for column, _, value in (part.partition("=") for part in row[0].split("/"))
                )
                listed.append(pattern.format(values))
        live = {
            p.ref
            for start in range(0, len(listed), PAGE)
            for p in self.bel.partitions.by_ref(listed[start : start + PAGE])
            if p.status is PartitionStatus.live
        }
        return [ref for ref in listed if ref not in live]


def serve_sql(spark: SparkRuntime) -> None:
    """Start the Spark Thrift server (HiveServer2) in the worker's own JVM, on the port of its session's
    ``spark.hive.server2.thrift.port``: beeline and JDBC clients query the catalog it holds."""
    session = spark.session()
    jvm = session.sparkContext._jvm
    assert jvm is not None
    jvm.org.apache.spark.sql.hive.thriftserver.HiveThriftServer2.startWithContext(
        session._jsparkSession.sqlContext()
    )
