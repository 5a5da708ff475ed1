"""Checks on real Spark, without Temporal: the ready-made checks' edge cases, and checks of a batch's
partitioned write, each read back from its own partition folder."""

import threading
import uuid
from pathlib import Path

import pytest

from databuild.bel.store import BuildEventLog, new_job_run_id
from databuild.graph import Graph, accepted_values, not_null, row_count, unique
from databuild.jobs.checks import run_checks
from databuild.jobs.context import SparkJobContext
from databuild.jobs.spark import SparkRuntime
from databuild.jobs.storage import Storage

pytestmark = pytest.mark.slow


def test_ready_made_checks_on_written_data(spark_runtime: SparkRuntime, tmp_path: Path) -> None:
    spark = spark_runtime.session()
    rows = [(1, "a", "view"), (1, "b", None), (2, "a", "buy"), (2, "a", "oops"), (3, None, "view")]
    location = str(tmp_path / "t")
    spark.createDataFrame(rows, "id bigint, part string, kind string").write.parquet(location)
    checks = [
        unique("id", "part"),
        unique("id", name="id alone"),
        not_null("part", "kind"),
        accepted_values("kind", ["view", "buy"]),  # a null kind is not_null's business, not this one's
        row_count(min=6, severity="warning"),  # no facts: counted by Spark
    ]
    found = run_checks(
        spark,
        checks,
        ref="t/1",
        instance_id="i",
        params={},
        location=location,
        facts=None,
    )
    assert [(r.name, r.passed, r.message, r.metrics) for r in found] == [
        (
            "unique(id, part)",
            False,
            "1 values of (id, part) appear more than once, in 2 rows",
            {"duplicate_keys": 1, "duplicate_rows": 2},
        ),
        (
            "id alone",
            False,
            "2 values of (id) appear more than once, in 4 rows",
            {"duplicate_keys": 2, "duplicate_rows": 4},
        ),
        ("not_null(part, kind)", False, "1 null part, 1 null kind", {"nulls.part": 1, "nulls.kind": 1}),
        (
            "accepted_values(kind)",
            False,
            "1 rows have a kind not accepted, e.g. 'oops'",
            {"unexpected": 1},
        ),
        ("row_count(6..)", False, "5 rows (expected at least 6)", {"rows": 5}),
    ]


def test_a_partitioned_write_checks_each_partition_as_its_own_instance(
    spark_runtime: SparkRuntime, tmp_path: Path
) -> None:
    graph = Graph("batch_checks")
    graph.job("daily/{day}", batch=3, checks=[row_count(min=2), not_null("v")])(lambda ctx, partitions: None)
    days = ["2024-01-01", "2024-01-02"]
    instances = {f"daily/{day}": str(uuid.uuid4()) for day in days}
    bel = BuildEventLog.create(f"sqlite:///{tmp_path / 'bel.sqlite'}")
    ctx = SparkJobContext(
        spark=spark_runtime.session(),
        bel=bel,
        graph=graph,
        storage=Storage(tmp_path / "lake"),
        job_run_id=new_job_run_id(),
        job_label="<lambda>",
        instances=instances,
        params={"day": days[0]},
        partitions=[{"day": day} for day in days],
        cancelled=threading.Event(),
    )
    frame = ctx.spark.createDataFrame([(days[0], 1), (days[0], 2), (days[1], None)], "day string, v bigint")
    ctx.write_partitioned(frame)
    bel.dispose()
    found = {ref: {r.name: (r.passed, r.message) for r in results} for ref, results in ctx.checks.items()}
    assert found == {
        "daily/2024-01-01": {
            "row_count(2..)": (True, "2 rows (expected at least 2)"),
            "not_null(v)": (True, "no nulls in v"),
        },
        "daily/2024-01-02": {
            "row_count(2..)": (False, "1 rows (expected at least 2)"),
            "not_null(v)": (False, "1 null v"),
        },
    }
