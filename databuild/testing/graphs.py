"""The graphs the benchmarks run (and tests/test_event_loop.py, as bench_orchestration does): one trivial
Spark job and one external input pattern; a year's backfill one partition per run and 31 per run."""

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from databuild.graph import Graph

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from databuild.graph import JobContext

graph = Graph("bench")
graph.external("live/{n}")


@graph.job("trivial/{n}")
def trivial(ctx: "JobContext", n: str) -> None:
    """The smallest real Spark job: ten rows written as the output partition."""
    ctx.write(f"trivial/{n}", ctx.spark.range(10))


# A year's backfill (bench_backfill): the same two jobs one partition per run, and 31 per run.
ROWS_PER_DAY = 1_000


def events_of(spark: "SparkSession", day: str) -> "DataFrame":
    return spark.range(ROWS_PER_DAY).selectExpr(f"'{day}' as date", "id % 97 as user_id", "id % 13 as amount")


def events_of_days(spark: "SparkSession", days: list[str]) -> "DataFrame":
    """``events_of`` each of ``days``, as one DataFrame."""
    dates = F.array(*(F.lit(day) for day in days))
    return spark.range(ROWS_PER_DAY * len(days)).select(
        F.element_at(dates, (F.col("id") / ROWS_PER_DAY).cast("int") + 1).alias("date"),
        (F.col("id") % ROWS_PER_DAY % 97).alias("user_id"),
        (F.col("id") % ROWS_PER_DAY % 13).alias("amount"),
    )


def users_of(events: "DataFrame") -> "DataFrame":
    return events.groupBy("date", "user_id").agg(F.sum("amount").alias("spent"))


def year_graph(name: str, batch: int | None) -> Graph:
    year = Graph(name)
    users_read = lambda date: [f"raw_events/{date}"]  # noqa: E731
    if batch is None:

        def raw_events(ctx: "JobContext", date: str) -> None:
            ctx.write(f"raw_events/{date}", events_of(ctx.spark, date))

        def daily_users(ctx: "JobContext", date: str) -> None:
            ctx.write(f"daily_users/{date}", users_of(ctx.read(f"raw_events/{date}")))

    else:
        # A batch as Spark users write one: one DataFrame read, one partitionBy write.
        def raw_events(ctx: "JobContext", partitions: list[dict[str, str]]) -> None:  # type: ignore[misc]
            ctx.write_partitioned(events_of_days(ctx.spark, [p["date"] for p in partitions]))

        def daily_users(ctx: "JobContext", partitions: list[dict[str, str]]) -> None:  # type: ignore[misc]
            events = ctx.read_partitioned([f"raw_events/{p['date']}" for p in partitions])
            ctx.write_partitioned(users_of(events))

    year.job("raw_events/{date}", batch=batch)(raw_events)
    year.job("daily_users/{date}", batch=batch, inputs=users_read)(daily_users)
    return year


year_unbatched = year_graph("year", None)
year_batched = year_graph("year", 31)
