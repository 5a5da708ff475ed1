"""Running an output's checks on one instance, read back from its location in the given Spark session:
by the job context right after the instance is written, and by `databuild check` on a live instance."""

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from databuild.graph.checks import Check, CheckContext
from databuild.models import CheckResult, InstanceFacts

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def run_checks(
    spark: "SparkSession",
    checks: Sequence[Check],
    *,
    ref: str,
    instance_id: str,
    params: dict[str, str],
    location: str,
    facts: InstanceFacts | None,
) -> list[CheckResult]:
    """Each check's result, in declaration order. What a check raises propagates: a check that cannot
    run (Spark lost an executor, a custom check has a bug) says nothing about the data, so it fails the
    attempt as any job error would, and the run's retry policy applies."""
    if not checks:
        return []
    # Read back, not the DataFrame the job wrote: the checks test what readers will read. Only if one of
    # them looks at the data (listing the files and reading their footers takes a Spark session ~60 ms).
    data = functools.cache(lambda: spark.read.parquet(location))
    context = CheckContext(spark=spark, ref=ref, instance_id=instance_id, params=params, facts=facts)
    return [check.result(context, data) for check in checks]
