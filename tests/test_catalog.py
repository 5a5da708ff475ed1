"""Outputs as tables in the Spark catalog: after each build the table partition points at the live
instance, and another process queries it with beeline through the Thrift server the worker's JVM serves
(the test session's JVM holds the embedded metastore, as a `databuild dev` worker does)."""

import asyncio
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlparse

import pyspark
import pytest

from databuild.jobs.spark import SparkRuntime
from databuild.jobs.tables.hive import HiveTables, serve_sql
from databuild.jobs.tables.publisher import TablePublisher
from databuild.models import WantState
from tests.conftest import SQL_PORT, Stack
from tests.graphs import LEFT_AUDIT_FAILS
from tests.helpers import instance_dir, wide_days_built

pytestmark = pytest.mark.slow
BEELINE = Path(pyspark.__file__).parent / "bin" / "beeline"


@pytest.fixture(scope="module")
def sql_server(spark_runtime: SparkRuntime) -> Iterator[int]:
    serve_sql(spark_runtime)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", SQL_PORT), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "the Thrift server did not start"
            time.sleep(0.2)
    yield SQL_PORT


def beeline(port: int, sql: str) -> list[str]:
    """Rows of ``sql`` as CSV lines, from beeline in a process of its own."""
    command = [
        str(BEELINE),
        "-u",
        f"jdbc:hive2://127.0.0.1:{port}",
        "--silent=true",
        "--outputformat=csv2",
        "-e",
        sql,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return [line for line in result.stdout.splitlines() if line and not line.startswith(("0: jdbc", "WARN"))]


def path_of(uri: str) -> str:
    """The path of a location, however its scheme is written (`file:/x`, `file:///x`, `/x`)."""
    return os.path.normpath(urlparse(uri).path)


def in_process(stack: Stack, sql: str) -> str:
    """The row of ``sql`` as beeline's CSV shows it, from the worker's own session (the Thrift server's
    JVM and catalog), or the error."""
    try:
        (row,) = stack.parts.spark.session().sql(sql).collect()
    except Exception as error:  # e.g. the table is not there yet
        return str(error)[-300:]
    return ",".join(str(value) for value in row)


async def rows_become(stack: Stack, port: int, sql: str, expected: str, seconds: float = 60) -> None:
    """The catalog follows the BEL in the background: query until it answers ``expected``. The waiting
    is done in the worker's own session (a query there costs milliseconds, a beeline process seconds of
    a JVM's start-up); then beeline, in a process of its own, must answer the same."""
    deadline = time.monotonic() + seconds
    while (found := await asyncio.to_thread(in_process, stack, sql)) != expected:
        assert time.monotonic() < deadline, f"{sql} gives {found}, not {expected}"
        await asyncio.sleep(0.2)
    while True:
        try:
            found = (await asyncio.to_thread(beeline, port, sql))[-1]
        except AssertionError as error:
            found = str(error)[-300:]
        if found == expected:
            return
        assert time.monotonic() < deadline, f"{sql} gives {found} in beeline, not {expected}"
        await asyncio.sleep(0.5)


async def built(stack: Stack, ref: str) -> str:
    want = await asyncio.wait_for(stack.db.wait(await stack.db.want(ref)), timeout=120)
    assert want.state is WantState.successful, want.reason
    return stack.bel.partitions.get(ref).instance_id or ""


async def test_a_published_partition_is_queried_with_beeline_after_each_change_of_its_live_instance(
    make_stack, sql_server: int
) -> None:
    database = f"t_{uuid.uuid4().hex[:8]}"
    stack = await make_stack(graph="tests.graphs:lake", catalog="embedded", catalog_database=database)
    n = uuid.uuid4().hex[:6]
    first = await built(stack, f"left/{n}")
    count = f"SELECT count(*) FROM {database}.`left` WHERE n = '{n}'"
    await rows_become(stack, sql_server, count, "10")  # the catalog follows the commit in the background

    # A taint takes the instance out of service, and out of the table: no SQL reader reads it.
    await stack.db.taint(f"left/{n}", reason="late events")
    await rows_become(stack, sql_server, count, "0")
    second = await built(stack, f"left/{n}")
    assert second != first
    # The table follows the live instance; the sibling output is a table too (one beeline for both).
    right = f"SELECT count(*) FROM {database}.`right` WHERE n = '{n}'"
    await rows_become(stack, sql_server, f"SELECT ({count}), ({right})", "20,20")
    # The old instance is still there, beside the new one, readable by its UUID.
    old = stack.parts.spark.session().read.parquet(str(instance_dir(stack.settings, f"left/{n}", first)))
    assert old.count() == 10
    # A worker's repair re-points every partition from the BEL.
    hive = HiveTables(
        stack.parts.spark, database=database, root=stack.settings.storage_root, catalog="embedded"
    )
    catalog = TablePublisher(stack.bel, stack.graph, {"hive": hive}, "hive")
    # A worker killed between a commit and its catalog change leaves the table behind the BEL: the
    # next worker's repair points it again.
    stack.parts.spark.session().sql(f"ALTER TABLE {database}.`left` DROP PARTITION (n = '{n}')")
    assert beeline(sql_server, count)[-1] == "0"
    assert catalog.repair() == 1
    assert beeline(sql_server, count)[-1] == "20"

    # A re-check that fails a blocking check, and a skip, take the table partitions out too, though
    # neither is a build of the worker's: the worker follows the log.
    LEFT_AUDIT_FAILS.add(f"left/{n}")
    recheck = await stack.db.check(f"left/{n}")
    assert recheck.fail_locked
    await stack.db.skip(f"right/{n}")
    await rows_become(stack, sql_server, f"SELECT ({count}), ({right})", "0,0")
    # ... and so does the repair, for a change made while no worker followed (a partition the table
    # shows though the BEL has it out of service is dropped).
    other = uuid.uuid4().hex[:6]
    await built(stack, f"left/{other}")
    await rows_become(stack, sql_server, f"SELECT count(*) FROM {database}.`left` WHERE n = '{other}'", "10")
    catalog.follow([f"left/{n}"])  # nothing to drop: follow is idempotent
    session = stack.parts.spark.session()
    quoted = stack.bel.partitions.instance(second).location
    session.sql(f"ALTER TABLE {database}.`left` ADD PARTITION (n = '{n}') LOCATION '{quoted}'")
    assert catalog.repair() >= 1
    shown = {row[0] for row in session.sql(f"SHOW PARTITIONS {database}.`left`").collect()}
    assert f"n={other}" in shown and f"n={n}" not in shown


async def test_a_batch_written_as_one_dataframe_is_one_table_partition_per_day(
    make_stack, sql_server: int
) -> None:
    database = f"t_{uuid.uuid4().hex[:8]}"
    stack = await make_stack(
        graph="tests.graphs:lake",
        catalog="embedded",
        catalog_database=database,
        batch_window=timedelta(seconds=60),
    )
    days = await wide_days_built(stack.db)
    (run,) = stack.bel.job_runs.query(job_label="wide", limit=10)
    assert len(run.partitions or []) == 3  # one run, one partitionBy write

    # Each day is a partition of table `wide`, pointed at its own instance in the run's folder, and
    # beeline in another process counts each day's rows (day k has k + 1).
    counted = f"SELECT day, count(*) AS n FROM {database}.`wide` GROUP BY day"
    per_day = f"SELECT array_join(array_sort(collect_list(concat(day, '=', n))), ':') FROM ({counted})"
    await rows_become(stack, sql_server, per_day, ":".join(f"{day}={k + 1}" for k, day in enumerate(days)))
    session = stack.parts.spark.session()
    for day in days:
        instance = stack.bel.partitions.instance(stack.bel.partitions.get(f"wide/{day}").instance_id or "")
        assert instance.location is not None and instance.location.endswith(f"/~{run.job_run_id}-1/day={day}")
        (shown,) = session.sql(
            f"SHOW TABLE EXTENDED IN {database} LIKE 'wide' PARTITION (day = '{day}')"
        ).collect()
        (location,) = [line for line in shown.information.splitlines() if line.startswith("Location: ")]
        assert path_of(location.removeprefix("Location: ")) == path_of(instance.location)
