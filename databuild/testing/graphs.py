"""The graphs the benchmarks run (and tests/test_event_loop.py, as bench_orchestration does): one trivial
Spark job and one external input pattern; a year's backfill one partition per run and 31 per run; a
small graph of 15 builds, the interactive case."""

from datetime import date as Date
from datetime import timedelta
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


# The interactive case (bench_graph): a week of a raw job and of a daily job, and a two-output weekly
# rollup, every input declared, every write one row.
WEEK = 7


def one_row(spark: "SparkSession", date: str) -> "DataFrame":
    return spark.range(1).selectExpr(f"'{date}' as date", "1 as n")


def days_before(date: str, days: int) -> list[str]:
    """``date`` and the ``days - 1`` days before it, oldest first (ISO dates)."""
    end = Date.fromisoformat(date)
    return [(end - timedelta(days=back)).isoformat() for back in range(days - 1, -1, -1)]


def day_of(frame: "DataFrame") -> "DataFrame":
    return frame.withColumn("n", F.col("n") + 1)


def rollup_of(frames: "list[DataFrame]", date: str) -> "tuple[DataFrame, DataFrame]":
    """The week's one-row total and its one-row latest day, from its days' frames."""
    week = frames[0]
    for frame in frames[1:]:
        week = week.unionByName(frame)
    total = week.agg(F.sum("n").alias("n")).withColumn("date", F.lit(date))
    latest = week.orderBy(F.col("date").desc()).limit(1)
    return total, latest


def small_graph(days: int = WEEK) -> Graph:
    small = Graph("small")

    @small.job("raw/{date}", inputs=lambda date: [])
    def raw(ctx: "JobContext", date: str) -> None:
        ctx.write(f"raw/{date}", one_row(ctx.spark, date))

    @small.job("daily/{date}", inputs=lambda date: [f"raw/{date}"])
    def daily(ctx: "JobContext", date: str) -> None:
        ctx.write(f"daily/{date}", day_of(ctx.read(f"raw/{date}")))

    def week_read(date: str) -> list[str]:
        return [f"daily/{day}" for day in days_before(date, days)]

    @small.job("weekly/{date}", "weekly_latest/{date}", inputs=week_read)
    def weekly(ctx: "JobContext", date: str) -> None:
        total, latest = rollup_of(ctx.read_all(week_read(date)), date)
        ctx.write(f"weekly/{date}", total)
        ctx.write(f"weekly_latest/{date}", latest)

    return small


small = small_graph()
small_two_days = small_graph(2)  # the benchmark's small size, which a test runs
