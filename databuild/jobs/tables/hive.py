"""Hive tables: each partition of a table points at its live instance's location in a Hive metastore, so
users query ``SELECT ... FROM daily_users WHERE date = '2024-01-03'`` with Spark SQL, the Thrift server and
beeline, or any engine reading the metastore.

The metastore is an embedded Derby database under ``<home>/catalog`` (one JVM at a time: the worker that
holds ``<home>/catalog/lease`` serves it, and may serve SQL to other processes through the Thrift
server), or a metastore service (``thrift://host:9083``) that any number of workers share."""

import fcntl
import logging
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Literal
from urllib.parse import unquote

from databuild.config import Settings
from databuild.jobs.spark import SparkRuntime
from databuild.jobs.tables.base import TableState
from databuild.jobs.tables.spec import Committed, Placed, TableSpec

log = logging.getLogger(__name__)


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
    """The Spark settings of the worker's session for its Hive metastore, or None when it has none:
    catalog `none`, or an embedded metastore another worker process holds (it says so in the log)."""
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


def serve_sql(spark: SparkRuntime) -> None:
    """Start the Spark Thrift server (HiveServer2) in the worker's own JVM, on the port of its session's
    ``spark.hive.server2.thrift.port``: beeline and JDBC clients query the catalog it holds."""
    session = spark.session()
    jvm = session.sparkContext._jvm
    assert jvm is not None
    jvm.org.apache.spark.sql.hive.thriftserver.HiveThriftServer2.startWithContext(
        session._jsparkSession.sqlContext()
    )


class HiveTables:
    """Tables of a Hive metastore, changed through the worker's own SparkSession."""

    name: Literal["hive"] = "hive"

    def __init__(self, spark: SparkRuntime, *, database: str, root: str, catalog: str) -> None:
        self.spark = spark
        self.database = database
        self.root = root.rstrip("/")
        self.catalog = catalog
        self._lock = threading.Lock()  # one catalog change at a time per process (Derby, and DDL races)
        self._known: set[str] = set()

    def qualified(self, spec: TableSpec) -> str:
        return f"{self.database}.{spec.name}"

    def _quoted(self, spec: TableSpec) -> str:
        return f"`{self.database}`.`{spec.name}`"

    @staticmethod
    def _where(spec: TableSpec, values: Mapping[str, str]) -> str:
        return ", ".join(f"`{c}` = '{values[c]}'" for c in spec.columns)

    def audit(self, spec: TableSpec, placed: Sequence[Placed]) -> None:
        """A Hive table reads each partition's files with the schema it was created with: nothing to refuse."""

    def publish(self, spec: TableSpec, placed: Sequence[Placed], summary: Mapping[str, str]) -> Committed:
        """Point each partition at its instance's location (re-pointing is idempotent)."""
        table = self._quoted(spec)
        with self._lock:
            session = self.spark.session()
            for each in placed:
                assert each.location is not None
                if table not in self._known:
                    self._create(spec, each.location)
                quoted = each.location.replace("'", "\\'")
                where = self._where(spec, each.values)
                session.sql(f"ALTER TABLE {table} ADD IF NOT EXISTS PARTITION ({where}) LOCATION '{quoted}'")
                session.sql(f"ALTER TABLE {table} PARTITION ({where}) SET LOCATION '{quoted}'")
        return Committed(snapshot_id=None, committed_at=datetime.now(UTC))

    def _create(self, spec: TableSpec, location: str) -> None:
        """The table, with the schema of the instance at ``location`` (lock held)."""
        session = self.spark.session()
        session.sql(f"CREATE DATABASE IF NOT EXISTS `{self.database}`")
        data = session.read.parquet(location).schema
        fields = [
            f"`{f.name}` {f.dataType.simpleString()}" for f in data.fields if f.name not in spec.columns
        ]
        partitions = ", ".join(f"`{c}` STRING" for c in spec.columns)
        session.sql(
            f"CREATE TABLE IF NOT EXISTS {self._quoted(spec)} ({', '.join(fields)}, {partitions}) USING parquet "
            f"PARTITIONED BY ({', '.join(f'`{c}`' for c in spec.columns)}) "
            # External (a location of its own): dropping the table never deletes an instance.
            f"LOCATION '{self.root}/{spec.name}'"
        )
        self._known.add(self._quoted(spec))

    def withdraw(self, spec: TableSpec, placed: Sequence[Placed], summary: Mapping[str, str]) -> Committed:
        table = self._quoted(spec)
        with self._lock:
            session = self.spark.session()
            if table in self._known or session.catalog.tableExists(self.qualified(spec)):
                for each in placed:
                    # The table is external: dropping a partition leaves the instance's files to gc.
                    session.sql(
                        f"ALTER TABLE {table} DROP IF EXISTS PARTITION ({self._where(spec, each.values)})"
                    )
        return Committed(snapshot_id=None, committed_at=datetime.now(UTC))

    def listed(self, spec: TableSpec) -> list[dict[str, str]]:
        with self._lock:
            session = self.spark.session()
            if not session.catalog.tableExists(self.qualified(spec)):
                return []
            shown = session.sql(f"SHOW PARTITIONS {self._quoted(spec)}").collect()
        return [
            {
                column: unquote(value)
                for column, _, value in (part.partition("=") for part in row[0].split("/"))
            }
            for row in shown
        ]

    def describe(self, spec: TableSpec) -> TableState:
        with self._lock:
            exists = self.spark.session().catalog.tableExists(self.qualified(spec))
        location = f"{self.root}/{spec.name}" if exists else None
        return TableState(table=self.qualified(spec), catalog=self.catalog, exists=exists, location=location)

    def expire(self, spec: TableSpec, keep: set[int], older_than: datetime) -> list[int]:
        """A Hive table has no snapshots."""
        return []
