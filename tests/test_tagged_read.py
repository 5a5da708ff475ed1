"""Many instance folders read as one scan (``read_tagged``, what ``ctx.read_partitioned`` does for the
instances DataBuild wrote), on real Spark: every row gets its folder's values, whatever characters the
storage root has; a file outside the folders fails the job instead of getting no value."""

import uuid
from pathlib import Path

import pytest

from databuild.jobs.spark import SparkRuntime
from databuild.jobs.tagged_read import _bare, read_tagged

pytestmark = pytest.mark.slow


def scans(frame) -> int:  # type: ignore[no-untyped-def]
    return str(frame._jdf.queryExecution().optimizedPlan().toString()).count("Relation ")


def test_one_scan_tags_every_row_with_its_folders_values(spark_runtime: SparkRuntime, tmp_path: Path) -> None:
    spark = spark_runtime.session()
    root = tmp_path / "a root+with %20 odd=names"  # spaces, "+" and "%" in the root: Spark encodes them
    batch = root / "raw" / "~jr-1-1"
    spark.range(4).selectExpr("id", "if(id < 2, '2024-01-01', '2024-01-02') as date").write.partitionBy(
        "date"
    ).parquet(f"file://{batch}")
    alone = root / "raw" / "2024-01-03" / f"~{uuid.uuid4()}"  # a one-partition write, one column more
    spark.range(1).selectExpr("id + 10 as id", "'late' as note").write.parquet(f"file://{alone}")
    folders = {
        f"file://{batch}/date=2024-01-01": {"date": "2024-01-01"},
        f"file://{batch}/date=2024-01-02": {"date": "2024-01-02"},
        str(alone): {"date": "2024-01-03"},  # a bare path, no scheme: the same folder to Spark
    }
    frame = read_tagged(spark, folders)
    assert scans(frame) == 1
    rows = sorted((r.id, r.date, r.note) for r in frame.collect())
    assert rows == [
        (0, "2024-01-01", None),
        (1, "2024-01-01", None),
        (2, "2024-01-02", None),
        (3, "2024-01-02", None),
        (10, "2024-01-03", "late"),
    ]
    assert dict(frame.dtypes)["date"] == "string"

    # A column the data has keeps its own values.
    own = root / "own"
    spark.range(2).selectExpr("id", "'in the data' as date").write.parquet(f"file://{own}")
    assert {r.date for r in read_tagged(spark, {f"file://{own}": {"date": "x"}}).collect()} == {"in the data"}


def test_a_file_outside_the_folders_fails_the_job_naming_it(
    spark_runtime: SparkRuntime, tmp_path: Path
) -> None:
    spark = spark_runtime.session()
    nested = tmp_path / "nested"  # not flat: Spark also reads the folder inside it
    spark.range(2).selectExpr("id", "id as k").write.partitionBy("k").parquet(f"file://{nested}")
    frame = read_tagged(spark, {f"file://{nested}": {"day": "2024-01-01"}})
    with pytest.raises(Exception, match=r"read_partitioned read .*/nested/k=[01]/part-.*outside the folders"):
        frame.collect()


@pytest.mark.parametrize(
    ("location", "as_spark_names_it", "path"),
    [
        (
            "file:///data/raw/~jr-1-1/date=2024-01-01",
            "file:/data/raw/~jr-1-1/date=2024-01-01",
            "data/raw/~jr-1-1/date=2024-01-01",
        ),
        ("/data/raw/2024-01-01/~i", "file:/data/raw/2024-01-01/~i", "data/raw/2024-01-01/~i"),
        (
            "hdfs:///lake/raw/2024-01-01/~i",
            "hdfs://namenode:8020/lake/raw/2024-01-01/~i",
            "lake/raw/2024-01-01/~i",
        ),
        ("s3a://bucket/raw/2024-01-01/~i/", "s3a://bucket/raw/2024-01-01/~i", "raw/2024-01-01/~i"),
    ],
)
def test_a_folder_is_known_by_its_path_however_its_uri_is_written(
    location: str, as_spark_names_it: str, path: str
) -> None:
    assert _bare(location) == _bare(as_spark_names_it) == path
