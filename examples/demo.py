"""The demo graph: raw events -> daily users -> daily summary + top spenders (one job, two outputs).

``daily_summary/{date}`` reads the last 7 days of ``daily_users``, so one want for it needs 7
``daily_users`` and 7 ``raw_events`` partitions built first. ``graph`` declares each job's inputs, so
those derivative wants start before the first run; ``discovering`` is the same jobs without the
declarations, so each job finds its missing inputs at run time (a dep-miss, then derivative wants).
"""

from datetime import date, timedelta

from pyspark.sql import functions as F

from databuild.graph import Graph, JobContext, row_count, schema, unique

EVENTS_PER_DAY = 100_000
USERS = 20_000
WINDOW_DAYS = 7


def _day(text: str) -> date:
    return date.fromisoformat(text)


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


def week_of(date: str) -> list[str]:
    """The ``daily_users`` partitions a rollup for ``date`` reads: its day and the 6 before."""
    end = _day(date)
    return [
        f"daily_users/{(end - timedelta(days=back)).isoformat()}" for back in range(WINDOW_DAYS - 1, -1, -1)
    ]


def weekly_rollup(ctx: JobContext, date: str) -> None:
    frames = ctx.read_all(week_of(date))
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


# Checks run on each new instance before it goes live. A blocking one that fails keeps the instance
# from every reader and fail-locks the partition; a warning is recorded and alerted. The schema contract
# and the row counts read what the write recorded (no Spark job); `unique` is one aggregation.
RAW_EVENTS_CHECKS = [
    schema(
        {
            "event_id": "string",
            "user_id": "bigint",
            "event_type": "string",
            "amount": "decimal(10,2)",
            "ts": "timestamp",
        }
    ),
]
DAILY_USERS_CHECKS = [
    unique("user_id"),
    row_count(min=1_000, severity="warning", name="enough_users"),
]


def reads_nothing(date: str) -> list[str]:
    return []


def demo_graph(name: str, *, declare_inputs: bool) -> Graph:
    demo = Graph(name)
    # raw_events reads nothing: declared so, a plan knows every input of the graph before a run.
    demo.job("raw_events/{date}", inputs=reads_nothing if declare_inputs else None, checks=RAW_EVENTS_CHECKS)(
        raw_events
    )
    users_read = (lambda date: [f"raw_events/{date}"]) if declare_inputs else None
    demo.job("daily_users/{date}", inputs=users_read, checks=DAILY_USERS_CHECKS)(daily_users)
    rollup_reads = week_of if declare_inputs else None
    demo.job("daily_summary/{date}", "top_spenders/{date}", inputs=rollup_reads)(weekly_rollup)
    return demo


graph = demo_graph("demo", declare_inputs=True)
discovering = demo_graph("demo", declare_inputs=False)
