"""The pure rules of tables: which schema changes a table takes, and which snapshots and files retention
keeps. (Tables on the real stack: tests/test_iceberg.py.)"""

from datetime import UTC, datetime, timedelta

import pytest

from databuild.domain.retention import TableHolding, Verdict, held_by_snapshots, retained_snapshots
from databuild.domain.table_schemas import SchemaChange, schema_change, widens
from databuild.errors import ConfigurationError, TableSchemaError
from databuild.jobs.tables.iceberg import rest_catalog_properties

pytestmark = pytest.mark.unit

TABLE = {"id": "long", "label": "string", "score": "float", "day": "string"}


def test_a_table_takes_new_columns_and_wider_types_and_refuses_what_loses_data() -> None:
    same = schema_change("db.t", TABLE, ["day"], TABLE, ["day"])
    assert same == SchemaChange() and not same.evolves
    grown = schema_change("db.t", TABLE, ["day"], {**TABLE, "extra": "int", "score": "double"}, ["day"])
    assert grown == SchemaChange(added=("extra",), widened=("score",)) and grown.evolves
    assert widens("int", "long") and widens("decimal(10, 2)", "decimal(12, 2)")
    assert not widens("long", "int") and not widens("decimal(10, 2)", "decimal(12, 3)")

    dropped = {k: v for k, v in TABLE.items() if k != "label"}
    with pytest.raises(
        TableSchemaError, match=r"^table db\.t: the new instance has no column 'label'.*new table$"
    ):
        schema_change("db.t", TABLE, ["day"], dropped, ["day"])
    with pytest.raises(TableSchemaError, match=r"column 'id' is long in the table and int .* narrows it"):
        schema_change("db.t", TABLE, ["day"], {**TABLE, "id": "int"}, ["day"])
    with pytest.raises(
        TableSchemaError, match=r"column 'label' is string in the table and long .* changes its type"
    ):
        schema_change("db.t", TABLE, ["day"], {**TABLE, "label": "long"}, ["day"])
    with pytest.raises(
        TableSchemaError, match="partitioned by day, and the job now writes it by day, region"
    ):
        schema_change("db.t", TABLE, ["day"], {**TABLE, "region": "string"}, ["day", "region"])


def at(minutes: int) -> datetime:
    return datetime(2024, 1, 1, tzinfo=UTC) + timedelta(minutes=minutes)


def test_retention_keeps_the_snapshots_the_bel_keeps_and_every_file_they_read() -> None:
    # a1 committed at 1 and taken out at 3 (tainted); b1 at 2 (its snapshot reads a1 too); a2 at 4.
    holdings = [
        TableHolding("a1", "db.t", 1, at(1), at(3)),
        TableHolding("b1", "db.t", 2, at(2), None),
        TableHolding("a2", "db.t", 4, at(4), None),
        TableHolding("x", "db.other", None, at(1), at(2)),  # Hive: no snapshots
    ]
    gone = Verdict(None, "past the retention")
    verdicts = {"a1": gone, "b1": Verdict("live", "live"), "a2": Verdict("live", "live"), "x": gone}
    week = timedelta(days=7)
    # Long after: nothing but the current snapshot is kept, and a1's files may go.
    late = retained_snapshots(holdings, verdicts, now=at(60 * 24 * 30), keep=week)
    assert late == {} and held_by_snapshots(holdings, late) == {"b1", "a2"}
    # b1 pinned: its snapshot stays, and with it the files it reads (a1's).
    pinned = retained_snapshots(
        holdings, {**verdicts, "b1": Verdict("pinned", "pinned")}, now=at(10**5), keep=week
    )
    assert pinned == {"db.t": {2}} and held_by_snapshots(holdings, pinned) == {"a1", "b1", "a2"}
    # a1 retired within the retention: its own snapshot stays (time travel to it works).
    recent = retained_snapshots(
        holdings, {**verdicts, "a1": Verdict("within retention", "")}, now=at(10**5), keep=week
    )
    assert recent == {"db.t": {1}} and "a1" in held_by_snapshots(holdings, recent)
    # Within the retention of their commits, every snapshot stays.
    assert retained_snapshots(holdings, verdicts, now=at(5), keep=week) == {"db.t": {1, 2, 4}}


def test_a_rest_catalogs_url_carries_its_warehouse_and_credentials() -> None:
    url, properties = rest_catalog_properties(
        "https://polaris:8181/api/catalog?warehouse=prod&credential=id:s"
    )
    assert (url, properties) == (
        "https://polaris:8181/api/catalog",
        {"warehouse": "prod", "credential": "id:s"},
    )
    assert rest_catalog_properties("http://nessie:19120/iceberg") == ("http://nessie:19120/iceberg", {})
    with pytest.raises(ConfigurationError, match="not password"):
        rest_catalog_properties("https://catalog/api?password=x")
