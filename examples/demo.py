"""The demo graph: raw events -> daily users -> daily summary + top spenders (one job, two outputs).

``daily_summary/{date}`` reads the last 7 days of ``daily_users``, so one want for it discovers, at
run time, 7 ``daily_users`` and 7 ``raw_events`` partitions to build first.
"""

from datetime import date, timedelta

from pyspark.sql import functions as F

from databuild.graph import Graph
from databuild.job_context import JobContext

graph = Graph("demo")

EVENTS_PER_DAY = 100_000
USERS = 20_000
WINDOW_DAYS = 7


def _day(text: str) -> date:
    return date.fromisoformat(text)


@graph.job("raw_events/{date}")
def raw_events(ctx: JobContext, date: str) -> None:
    """Deterministic synthetic events: ids and amounts are hashes of (date, row number)."""
    seed = F.lit(date)
    rows = ctx.spark.range(EVENTS_PER_DAY, numPartitions=4)
    h = F.xxhash64(seed, F.col("id"))
    events = rows.select(
        F.concat_ws("-", seed, F.col("id").cast("string")).alias("event_id"),
        (F.abs(h) % USERS).alias("user_id"),
        F.when(F.abs(F.xxhash64(h)) % 10 < 7, "view").otherwise("purchase").alias("event_type"),
        ((F.abs(F.xxhash64(h, F.lit("amount"))) % 20_000) / 100).cast("decimal(10,2)").alias("amount"),
        (F.to_timestamp(seed) + F.make_interval(secs=(F.col("id") * 86_400 / EVENTS_PER_DAY))).alias("ts"),
    )
    ctx.write(f"raw_events/{date}", events)


@graph.job("daily_users/{date}")
def daily_users(ctx: JobContext, date: str) -> None:
    events = ctx.read(f"raw_events/{date}")
    users = (
        events.groupBy("user_id")
        .agg(
            F.count("*").alias("events"),
            F.sum(F.when(F.col("event_type") == "purchase", F.col("amount")).otherwise(0)).alias("spent"),
        )
        .withColumn("date", F.lit(date).cast("date"))
    )
    ctx.write(f"daily_users/{date}", users)


@graph.job("daily_summary/{date}", "top_spenders/{date}")
def weekly_rollup(ctx: JobContext, date: str) -> None:
    end = _day(date)
    days = [(end - timedelta(days=back)).isoformat() for back in range(WINDOW_DAYS - 1, -1, -1)]
    frames = ctx.read_all([f"daily_users/{day}" for day in days])
    ctx.progress(f"read {len(frames)} days of daily_users")
    week = frames[0]
    for frame in frames[1:]:
        week = week.unionByName(frame)
    week = week.cache()
    summary = week.agg(
        F.countDistinct("user_id").alias("weekly_active_users"),
        F.sum("events").alias("events"),
        F.sum("spent").alias("revenue"),
    ).withColumn("date", F.lit(date).cast("date"))
    top = (
        week.groupBy("user_id")
        .agg(F.sum("spent").alias("spent"))
        .orderBy(F.col("spent").desc(), F.col("user_id"))
        .limit(10)
        .withColumn("date", F.lit(date).cast("date"))
    )
    ctx.write(f"daily_summary/{date}", summary)
    ctx.write(f"top_spenders/{date}", top)
    week.unpersist()
