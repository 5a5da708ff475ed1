"""The table formats a process has, from its settings."""

from databuild.bel.store import BuildEventLog
from databuild.config import Settings, masked_url
from databuild.graph import Graph
from databuild.jobs.spark import SparkRuntime
from databuild.jobs.storage import Storage
from databuild.jobs.tables.base import TableFormat
from databuild.jobs.tables.hive import HiveTables
from databuild.jobs.tables.iceberg import IcebergTables
from databuild.jobs.tables.publisher import TablePublisher
from databuild.models import TableFormatName


def iceberg_tables(settings: Settings, storage: Storage) -> IcebergTables:
    """The Iceberg tables of the settings' catalog (by default a SQL catalog in the BEL's database)."""
    url = settings.iceberg_catalog.get_secret_value() or settings.database_url.get_secret_value()
    return IcebergTables(url, namespace=settings.catalog_database, storage=storage, shown=masked_url(url))


def table_formats(
    settings: Settings, storage: Storage, spark: SparkRuntime | None
) -> dict[TableFormatName, TableFormat]:
    """Every format this process can publish in: Iceberg always (its catalog is opened at first use),
    Hive when its Spark session has a metastore (``spark.catalog``: none for `DATABUILD_CATALOG=none`, or an
    embedded metastore another worker process holds)."""
    formats: dict[TableFormatName, TableFormat] = {"iceberg": iceberg_tables(settings, storage)}
    if spark is not None and spark.catalog is not None and settings.catalog != "none":
        formats["hive"] = HiveTables(
            spark, database=settings.catalog_database, root=settings.storage_root, catalog=settings.catalog
        )
    return formats


def table_publisher(
    settings: Settings, bel: BuildEventLog, graph: Graph, storage: Storage, spark: SparkRuntime | None
) -> TablePublisher | None:
    """What publishes the graph's outputs to their tables, if any output maps to a table this process can
    publish (without a Spark session, a Hive table cannot be)."""
    publisher = TablePublisher(bel, graph, table_formats(settings, storage, spark), settings.table_format)
    return publisher if publisher.specs else None
