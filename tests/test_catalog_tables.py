"""Which tables a graph's outputs are in the Spark catalog, and which catalog a worker uses, without Spark:
patterns map to tables or say why not, and the embedded metastore is one worker process's at a time.
(Tables on the real stack: tests/test_catalog.py.)"""

from pathlib import Path

import pytest

from databuild.config import Settings
from databuild.errors import GraphDefinitionError
from databuild.graph import Graph, Pattern
from databuild.jobs.tables.hive import spark_catalog_conf
from databuild.jobs.tables.spec import TableSpec, graph_tables, table_of

pytestmark = pytest.mark.unit


def test_patterns_map_to_tables_or_say_why_not() -> None:
    assert table_of(Pattern.parse("daily_users/{date}")) == TableSpec(
        "daily_users", ("date",), "hive", "daily_users/{date}"
    )
    events = table_of(Pattern.parse("events/{region}/{date}"), format_="iceberg")
    assert events == TableSpec("events", ("region", "date"), "iceberg", "events/{region}/{date}")
    assert isinstance(events, TableSpec) and events.prefix == "events/"
    assert table_of(Pattern.parse("x/{d}"), "renamed") == TableSpec("renamed", ("d",), "hive", "x/{d}")
    assert "only `table/{column}/...` patterns" in str(table_of(Pattern.parse("raw/{date}/part")))
    assert "only `table/{column}/...` patterns" in str(table_of(Pattern.parse("single")))
    assert "is not a table name" in str(table_of(Pattern.parse("2024-data/{d}")))

    graph = Graph("tables")
    graph.job("a/{d}", "b/{d}", tables={"a/{d}": "alpha", "b/{d}": None})(lambda ctx, d: None)
    graph.job("c/{d}", "e/{d}", label="ce", table_format={"e/{d}": "iceberg"})(lambda ctx, d: None)
    assert graph_tables(graph) == {
        "a/{d}": TableSpec("alpha", ("d",), "hive", "a/{d}"),
        "b/{d}": "left out by the graph (tables={...: None})",
        "c/{d}": TableSpec("c", ("d",), "hive", "c/{d}"),
        "e/{d}": TableSpec("e", ("d",), "iceberg", "e/{d}"),
    }
    assert graph_tables(graph, "iceberg")["c/{d}"] == TableSpec("c", ("d",), "iceberg", "c/{d}")
    with pytest.raises(GraphDefinitionError, match="not outputs of this job"):
        graph.job("f/{d}", tables={"z/{d}": "zed"})
    with pytest.raises(GraphDefinitionError, match="table_format= names"):
        graph.job("g/{d}", table_format={"z/{d}": "iceberg"})
    with pytest.raises(GraphDefinitionError, match="delta is not a table format"):
        graph.job("h/{d}", table_format="delta")  # type: ignore[arg-type]


def test_the_embedded_catalog_is_held_by_one_worker_process_at_a_time(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    first = spark_catalog_conf(settings)
    assert first is not None and first["spark.sql.catalogImplementation"] == "hive"
    assert spark_catalog_conf(settings) is None  # another worker on this home: no catalog of its own
    assert spark_catalog_conf(Settings(home=tmp_path, catalog="none")) is None
    shared = spark_catalog_conf(Settings(home=tmp_path, catalog="thrift://meta:9083"))
    assert shared is not None and shared["spark.hadoop.hive.metastore.uris"] == "thrift://meta:9083"
