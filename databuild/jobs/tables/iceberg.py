"""Apache Iceberg tables: each published instance (or each run's batch of instances) is one Iceberg commit
that replaces exactly its partitions' files with the instance's own, where Spark wrote them (Iceberg's
add-files path: nothing is copied or rewritten), its snapshot summary naming the DataBuild instances, run,
want and job version. A taint is a delete snapshot of its partition. Any Iceberg reader (Spark, Trino,
Flink, DuckDB, pyiceberg) sees only what the BEL made live, and travels back to an older instance by the
snapshot id DataBuild recorded for it.

The catalog is a SQL catalog (Iceberg's JDBC catalog tables, by default in the BEL's own database) or a
REST catalog. Each table is partitioned by its pattern's placeholders (identity), whose values the data
files hold, and created by its first publish with the schema of its first instance."""

import logging
import os
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from functools import reduce
from typing import TYPE_CHECKING, Literal
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from databuild.domain.table_schemas import schema_change
from databuild.errors import ConfigurationError, TableSchemaError
from databuild.jobs.storage import Storage
from databuild.jobs.tables.base import TableState
from databuild.jobs.tables.spec import Committed, Placed, TableSpec, table_folder
from databuild.refs import RESERVED_SEGMENT

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.catalog import Catalog
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.table import Table, Transaction

log = logging.getLogger(__name__)

CATALOG_NAME = "databuild"  # the JDBC catalog's `catalog_name`: Spark, Trino and Flink name it so too
INSTANCES = "databuild.instances"  # the snapshot summary's list of the instances it added
COMMIT_RETRIES = "10"  # Iceberg's optimistic retries of a commit that raced another writer's
FOOTER_THREADS = 8
# A partition the table never held has nothing to delete: no news. Set once for the process (a filter set
# around each delete with catch_warnings would race the other threads' filters).
warnings.filterwarnings("ignore", "Delete operation did not match any records", UserWarning)
CATALOG_OPENINGS = 5  # tries at opening a SQL catalog whose tables other processes are making at once


def object_store_properties() -> dict[str, str]:
    """Iceberg's file settings for an S3-compatible store, from the AWS variables that point DataBuild's own
    storage at it (pyarrow reads them itself; Iceberg's file IO is told)."""
    found = {
        "s3.endpoint": os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"),
        "s3.region": os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"),
    }
    return {key: value for key, value in found.items() if value}


def open_catalog(url: str, root: str) -> "Catalog":
    """The Iceberg catalog at ``url``: a REST catalog (``http(s)://``), else a SQL catalog in that database.
    New tables go under ``<root>/_databuild/tables``."""
    warehouse = f"{root.rstrip('/')}/{RESERVED_SEGMENT}/tables"
    scheme = urlsplit(url).scheme
    files = object_store_properties()
    if scheme in ("http", "https"):
        from pyiceberg.catalog.rest import RestCatalog

        uri, properties = rest_catalog_properties(url)
        return RestCatalog(CATALOG_NAME, uri=uri, **files, **properties)
    from pyiceberg.catalog.sql import SqlCatalog

    if scheme.startswith("sqlite") and "timeout=" not in url:
        # Beside the BEL's own writes: wait for the database's write lock as the BEL does, not 5 s.
        url += ("&" if "?" in url else "?") + "timeout=20"
    for _ in range(CATALOG_OPENINGS - 1):
        try:
            return SqlCatalog(CATALOG_NAME, uri=url, warehouse=warehouse, **files)
        except Exception as error:
            if "already exists" not in str(error):
                raise _unusable(error) from error
            # Another process is making the catalog's tables at this moment (one at a time, not in one
            # transaction): they are there once it is done.
            time.sleep(0.1)
    try:
        return SqlCatalog(CATALOG_NAME, uri=url, warehouse=warehouse, **files)
    except Exception as error:
        raise _unusable(error) from error


def _unusable(error: Exception) -> ConfigurationError:
    """The driver's and SQLAlchemy's errors, as one line: the catalog is not usable."""
    return ConfigurationError(
        f"cannot open the Iceberg catalog: {str(error).splitlines()[0][:300]}; check DATABUILD_ICEBERG_CATALOG"
    )


# What a REST catalog's URL may carry as query parameters: the warehouse it serves (Polaris and Lakekeeper
# name one), and its credentials (OAuth2 client credentials, or a bearer token).
REST_PROPERTIES = ("warehouse", "credential", "token", "scope", "oauth2-server-uri", "prefix")


def rest_catalog_properties(url: str) -> tuple[str, dict[str, str]]:
    """A REST catalog's URL without the properties its query names (``?warehouse=prod&credential=id:secret``),
    and those properties."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    unknown = sorted({key for key, _ in query} - set(REST_PROPERTIES))
    if unknown:
        raise ConfigurationError(
            f"DATABUILD_ICEBERG_CATALOG: a REST catalog takes {', '.join(REST_PROPERTIES)} as parameters, not "
            f"{', '.join(unknown)}"
        )
    return urlunsplit(parts._replace(query="")), dict(query)


class IcebergTables:
    """Tables of one Iceberg catalog namespace."""

    name: Literal["iceberg"] = "iceberg"

    def __init__(self, catalog_url: str, *, namespace: str, storage: Storage, shown: str) -> None:
        self.catalog_url = catalog_url
        self.namespace = namespace
        self.storage = storage
        self.shown = shown  # the catalog as messages name it: no credentials
        self._catalog: Catalog | None = None
        self._opening = threading.Lock()

    @property
    def catalog(self) -> "Catalog":
        """Opened at first use: a worker whose tables are all Hive never connects to it."""
        with self._opening:
            if self._catalog is None:
                catalog = open_catalog(self.catalog_url, self.storage.uri)
                try:
                    catalog.create_namespace_if_not_exists(self.namespace)
                except Exception:
                    if not catalog.namespace_exists(self.namespace):  # not made by another process meanwhile
                        raise
                self._catalog = catalog
            return self._catalog

    def qualified(self, spec: TableSpec) -> str:
        return f"{self.namespace}.{spec.name}"

    def _load(self, spec: TableSpec) -> "Table | None":
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog.load_table(self.qualified(spec))
        except NoSuchTableError:
            return None

    def _create(self, spec: TableSpec, schema: "pa.Schema") -> "Table":
        """The table, partitioned by the pattern's placeholders, with the schema of its first instance (or
        the table another process has just created)."""
        from pyiceberg.exceptions import CommitFailedException, TableAlreadyExistsError

        location = self.storage.uri_of(table_folder(self.namespace, spec.name))
        properties = {"databuild.pattern": spec.pattern, "commit.retry.num-retries": COMMIT_RETRIES}
        try:
            with (
                self.catalog.create_table_transaction(
                    self.qualified(spec), schema=schema, location=location, properties=properties
                ) as created,
                created.update_spec() as partitioning,
            ):
                for column in spec.columns:
                    partitioning.add_identity(column)
        except (TableAlreadyExistsError, CommitFailedException):
            # Created meanwhile by another process (a create that lost the race is refused as a commit).
            if (table := self._load(spec)) is None:
                raise
            return table
        table = self._load(spec)
        assert table is not None
        return table

    # Before the BEL commit -------------------------------------------------------------------------------
    def audit(self, spec: TableSpec, placed: Sequence[Placed]) -> None:
        """Refuse instances whose files hold other partitions' values, or whose schema would lose data in
        the table (``TableSchemaError``, one line)."""
        footers = self._footers(self._files_of(placed), every=True)
        for each in placed:
            for footer in footers[each.instance_id or ""]:
                _check_partition_values(self.qualified(spec), spec, each, footer)
        schemas = [_iceberg_columns(self.qualified(spec), s) for s in _distinct_schemas(footers)]
        table = self._load(spec)
        if table is None:
            return  # its first publish creates it with the first instance's schema
        columns, partitioned_by = _columns_of(table)
        for schema in schemas:
            schema_change(self.qualified(spec), columns, partitioned_by, schema, spec.columns)

    def _footers(
        self, files: Mapping[str, Sequence[str]], *, every: bool
    ) -> dict[str, list["pq.FileMetaData"]]:
        """The Parquet footers of each instance's ``files`` (``every`` file, or its first), by instance id,
        read on parallel threads (an object store's reads mostly wait)."""
        import pyarrow.parquet as pq

        wanted = [
            (instance_id, uri) for instance_id, uris in files.items() for uri in (uris if every else uris[:1])
        ]

        def read(uri: str) -> pq.FileMetaData:
            return pq.read_metadata(self.storage.arrow_path(uri), filesystem=self.storage.filesystem)

        with ThreadPoolExecutor(max(1, min(FOOTER_THREADS, len(wanted)))) as pool:
            footers = list(pool.map(read, (uri for _, uri in wanted)))
        found: dict[str, list[pq.FileMetaData]] = {instance_id: [] for instance_id in files}
        for (instance_id, _), footer in zip(wanted, footers, strict=True):
            found[instance_id].append(footer)
        return found

    def _files_of(self, placed: Sequence[Placed]) -> dict[str, list[str]]:
        """The data files of each instance, by instance id, as URIs."""
        found: dict[str, list[str]] = {}
        for each in placed:
            assert each.instance_id is not None and each.location is not None
            found[each.instance_id] = self.storage.data_files_at(each.location)
        return found

    # After the BEL commit --------------------------------------------------------------------------------
    def publish(self, spec: TableSpec, placed: Sequence[Placed], summary: Mapping[str, str]) -> Committed:
        files = self._files_of(placed)
        every = sorted(f for each in files.values() for f in each)
        schemas = _distinct_schemas(self._footers(files, every=False))  # one footer an instance
        table = self._load(spec) or self._create(spec, _optional(schemas[0]))
        done = self._already(table, spec, placed, every)
        if done is not None:
            return done
        columns, partitioned_by = _columns_of(table)
        changes = [
            schema_change(
                self.qualified(spec),
                columns,
                partitioned_by,
                _iceberg_columns(self.qualified(spec), s),
                spec.columns,
            )
            for s in schemas
        ]
        properties = {**summary, INSTANCES: ",".join(sorted(files))}
        with table.transaction() as tx:
            if any(change.evolves for change in changes):
                with tx.update_schema() as update:
                    for schema in schemas:
                        update.union_by_name(_optional(schema))
            if table.current_snapshot() is not None:
                _delete(tx, spec, placed, properties)
            tx.add_files(every, snapshot_properties=properties, check_duplicate_files=False)
        snapshot = table.current_snapshot()
        assert snapshot is not None
        return Committed(snapshot.snapshot_id, _at(snapshot.timestamp_ms))

    def _already(
        self, table: "Table", spec: TableSpec, placed: Sequence[Placed], files: list[str]
    ) -> Committed | None:
        """The commit of exactly these instances, if one was made and the table still shows their files
        (a publish repeated after a crash, or after a lost answer, commits nothing)."""
        ids = ",".join(sorted(p.instance_id or "" for p in placed))
        ours = [s for s in table.snapshots() if s.summary is not None and s.summary.get(INSTANCES) == ids]
        if not ours:
            return None
        shown = {
            task.file.file_path
            for task in table.scan(row_filter=_partitions_filter(spec, placed)).plan_files()
        }
        if shown != set(files):
            return None  # committed once, replaced or withdrawn since: it is to be shown again
        last = ours[-1]
        return Committed(last.snapshot_id, _at(last.timestamp_ms))

    def withdraw(self, spec: TableSpec, placed: Sequence[Placed], summary: Mapping[str, str]) -> Committed:
        table = self._load(spec)
        if table is None or table.current_snapshot() is None:
            return Committed(None, datetime.now(UTC))
        with table.transaction() as tx:
            _delete(tx, spec, placed, summary)
        snapshot = table.current_snapshot()
        assert snapshot is not None
        return Committed(snapshot.snapshot_id, _at(snapshot.timestamp_ms))

    def listed(self, spec: TableSpec) -> list[dict[str, str]]:
        table = self._load(spec)
        if table is None or table.current_snapshot() is None:
            return []
        partitions = table.inspect.partitions().column("partition").to_pylist()
        return [{column: str(values[column]) for column in spec.columns} for values in partitions]

    def describe(self, spec: TableSpec) -> TableState:
        table = self._load(spec)
        if table is None:
            return TableState(table=self.qualified(spec), catalog=self.shown, exists=False)
        snapshot = table.current_snapshot()
        return TableState(
            table=self.qualified(spec),
            catalog=self.shown,
            exists=True,
            snapshot_id=None if snapshot is None else snapshot.snapshot_id,
            committed_at=None if snapshot is None else _at(snapshot.timestamp_ms),
            location=table.location(),
            metadata=table.metadata_location,
        )

    def expire(self, spec: TableSpec, keep: set[int], older_than: datetime) -> list[int]:
        table = self._load(spec)
        if table is None or table.current_snapshot() is None:
            return []
        current = table.current_snapshot()
        assert current is not None
        cutoff = older_than.timestamp() * 1000
        gone = [
            s.snapshot_id
            for s in table.snapshots()
            if s.snapshot_id != current.snapshot_id and s.snapshot_id not in keep and s.timestamp_ms < cutoff
        ]
        if gone:
            table.maintenance.expire_snapshots().by_ids(gone).commit()
        return gone


def _distinct_schemas(footers: Mapping[str, Sequence["pq.FileMetaData"]]) -> list["pa.Schema"]:
    distinct: list[pa.Schema] = []
    for each in footers.values():
        for footer in each:
            schema = footer.schema.to_arrow_schema()
            if not any(schema.equals(seen) for seen in distinct):
                distinct.append(schema)
    return distinct


def _check_partition_values(table: str, spec: TableSpec, placed: Placed, footer: "pq.FileMetaData") -> None:
    """Each partition column of a file holds only its partition's value, by the file's statistics (an
    Iceberg table reads a file's partition from them)."""
    names = footer.schema.to_arrow_schema().names
    for column in spec.columns:
        expected = placed.values[column]
        if column not in names:
            raise TableSchemaError(
                f"table {table}: {placed.ref} was written without its partition column {column!r}; write it "
                "with ctx.write or ctx.write_partitioned, which add it"
            )
        index = names.index(column)
        for group in range(footer.num_row_groups):
            stats = footer.row_group(group).column(index).statistics
            if stats is None or not stats.has_min_max:
                continue
            if str(stats.min) != expected or str(stats.max) != expected:
                raise TableSchemaError(
                    f"table {table}: column {column!r} of {placed.ref} holds {stats.min} to {stats.max}, not only "
                    f"its partition's {expected}; write only the partition's rows, or leave the column out "
                    "(DataBuild writes it)"
                )


def _optional(schema: "pa.Schema") -> "pa.Schema":
    """``schema`` with every column optional, as the table keeps them: Spark marks a column that cannot be
    null in one instance's plan required, and a later instance's may well be null."""
    import pyarrow as pa

    return pa.schema([field.with_nullable(True) for field in schema], metadata=schema.metadata)


def _columns_of(table: "Table") -> tuple[dict[str, str], list[str]]:
    """The table's columns (name to Iceberg type) and its partition columns."""
    schema = table.schema()
    columns = {field.name: str(field.field_type) for field in schema.fields}
    partitioned_by = [schema.find_field(field.source_id).name for field in table.spec().fields]
    return columns, partitioned_by


def _iceberg_columns(table: str, schema: "pa.Schema") -> dict[str, str]:
    """The columns of a Parquet file's schema, as Iceberg types them; ``TableSchemaError`` for a type an
    Iceberg table cannot hold."""
    from pyiceberg.catalog import Catalog

    try:
        converted = Catalog._convert_schema_if_needed(schema)  # Iceberg's own mapping of Arrow types
    except (ValueError, TypeError) as error:
        raise TableSchemaError(
            f"table {table}: {str(error).splitlines()[0]}; cast the column to a type Iceberg holds in the job"
        ) from None
    return {field.name: str(field.field_type) for field in converted.fields}


def _delete(
    tx: "Transaction", spec: TableSpec, placed: Sequence[Placed], properties: Mapping[str, str]
) -> None:
    """Delete the partitions of ``placed`` in ``tx`` (whole files: each holds one partition)."""
    tx.delete(_partitions_filter(spec, placed), snapshot_properties=dict(properties))


def _partitions_filter(spec: TableSpec, placed: Sequence[Placed]) -> "BooleanExpression":
    """Rows of exactly the partitions of ``placed``."""
    from pyiceberg.expressions import And, EqualTo, In, Or

    # pydantic models whose own __init__ takes the term and value by position (mypy sees only the fields).
    def equal(column: str, value: str) -> "BooleanExpression":
        return EqualTo(column, value)  # type: ignore[call-arg]

    if len(spec.columns) == 1:
        (column,) = spec.columns
        values = sorted({p.values[column] for p in placed})
        return equal(column, values[0]) if len(values) == 1 else In(column, values)  # type: ignore[call-arg]
    each = [reduce(And, [equal(column, p.values[column]) for column in spec.columns]) for p in placed]
    return reduce(Or, each)


def _at(timestamp_ms: int) -> datetime:
    return datetime.fromtimestamp(timestamp_ms / 1000, UTC)
