"""Small graphs for tests."""

import logging
import os
import threading
import time
import warnings
from datetime import timedelta
from functools import partial, reduce
from typing import TYPE_CHECKING

from databuild.graph import (
    CheckContext,
    Graph,
    JobContext,
    Verdict,
    accepted_values,
    custom,
    not_null,
    row_count,
    schema,
    unique,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# report/{date} reads an external feed that someone else publishes.
late = Graph("late")
late.external("feed/{date}")


@late.job("report/{date}")
def report(ctx: JobContext, date: str) -> None:
    ctx.write(
        f"report/{date}", ctx.read(f"feed/{date}").limit(0).unionByName(ctx.spark.range(3).selectExpr("id"))
    )


# slow/{n}: a Spark job whose tasks sleep, for kill and cancellation tests.
slow = Graph("slow")
SLOW_SECONDS = float(os.environ.get("DATABUILD_TEST_SLOW_SECONDS", "6"))


def _nap(row: int, seconds: float) -> int:
    time.sleep(seconds)
    return row


@slow.job("slow/{n}")
def slow_job(ctx: JobContext, n: str) -> None:
    ctx.progress("sleeping in Spark tasks")
    # The sleep is read on the driver, so a test can lengthen it for an in-process worker.
    # The tasks sleep while they write: a kill lands mid-write, with files in the instance location.
    rows = ctx.spark.sparkContext.parallelize(range(2), 2).map(partial(_nap, seconds=SLOW_SECONDS))
    ctx.write(f"slow/{n}", ctx.spark.createDataFrame(rows.map(lambda r: (r,)), "id long"))


# fails/{n}: always raises; pair/{n}: one job, two outputs built from one input.
flaky = Graph("flaky")
flaky.external("input/{n}")


FIXED: set[str] = set()  # n whose fails/{n} a test has "fixed" (in-process worker)


@flaky.job("fails/{n}")
def always_fails(ctx: JobContext, n: str) -> None:
    if n not in FIXED:
        raise RuntimeError(f"boom {n}")
    ctx.write(f"fails/{n}", ctx.spark.range(1))


@flaky.job("mid/{n}")
def mid(ctx: JobContext, n: str) -> None:
    ctx.write(f"mid/{n}", ctx.read(f"fails/{n}"))


@flaky.job("top/{n}")
def top(ctx: JobContext, n: str) -> None:
    ctx.write(f"top/{n}", ctx.read(f"mid/{n}"))


@flaky.job("typo/{n}")
def typo(ctx: JobContext, n: str) -> None:
    ctx.write(f"typo/{n}", ctx.read(f"nowhere/{n}"))


@flaky.job("left/{n}", "right/{n}")
def pair(ctx: JobContext, n: str) -> None:
    frame = ctx.read(f"input/{n}")
    ctx.write(f"left/{n}", frame)
    ctx.write(f"right/{n}", frame)


# trio: one job, three outputs. BROKEN and FLAKY let a test make its builds fail (in-process worker).
trio = Graph("trio")
BROKEN: set[str] = set()  # fails until the test "fixes the bug" by removing n
FLAKY: dict[str, int] = {}  # n -> how many more attempts fail before one succeeds


@trio.job("a/{n}", "b/{n}", "c/{n}")
def abc(ctx: JobContext, n: str) -> None:
    if n in BROKEN:
        time.sleep(2)  # fails after doing some work, so other wants can join the build first
        raise RuntimeError(f"bad input data for {n}")
    if FLAKY.get(n, 0) > 0:
        FLAKY[n] -= 1
        raise RuntimeError(f"transient failure for {n}")
    frame = ctx.spark.range(3)
    for out in ctx.outputs:
        ctx.write(out, frame)


# chain: derived/{n} reads base/{n}, so a want for derived/{n} dep-misses once and builds base/{n} first.
# gate/{n} is built elsewhere: wants may require it.
chain = Graph("chain")
chain.external("gate/{n}")


@chain.job("base/{n}")
def base(ctx: JobContext, n: str) -> None:
    ctx.write(f"base/{n}", ctx.spark.range(3))


@chain.job("derived/{n}", checks=[row_count(min=1, name="rows")])  # run in the job's process, any executor
def derived(ctx: JobContext, n: str) -> None:
    ctx.write(f"derived/{n}", ctx.read(f"base/{n}"))


# feeds: an upstream graph that builds feed/{date}, which `late` (downstream) declares external.
feeds = Graph("feeds")


@feeds.job("feed/{date}")
def feed(ctx: JobContext, date: str) -> None:
    ctx.write(f"feed/{date}", ctx.spark.range(5))


# spin/{n}: DataFrame work that runs for hours unless cancelled. No RDDs and no Python UDFs, so it
# runs unchanged on every executor, Spark Connect included.
spin = Graph("spin")


@spin.job("spin/{n}")
def spin_job(ctx: JobContext, n: str) -> None:
    ctx.progress("spinning")
    # Small tasks (10M rows each), so progress shows within seconds even on a slow JIT; hours in all.
    rows = ctx.spark.range(0, 10**12, numPartitions=100_000)
    ctx.write(f"spin/{n}", rows.selectExpr("sum(id % 3) AS total"))


# lake: instances side by side. Each build of left/right has 10 more rows than the one before; held/{n}
# reads left/{n}, says so (READING), and takes its rows only when the test releases it (RELEASE). The
# audit of left/{n} fails for the refs in LEFT_AUDIT_FAILS (`databuild check` after a build).
lake = Graph("lake")
BUILDS: dict[str, int] = {}
READING: dict[str, threading.Event] = {}
RELEASE: dict[str, threading.Event] = {}
LEFT_AUDIT_FAILS: set[str] = set()


def left_audit(ctx: CheckContext, frame: "DataFrame") -> bool:
    return ctx.ref not in LEFT_AUDIT_FAILS


@lake.job("left/{n}", "right/{n}", checks=[custom(left_audit, output="left/{n}")])
def sides(ctx: JobContext, n: str) -> None:
    BUILDS[n] = BUILDS.get(n, 0) + 1
    frame = ctx.spark.range(BUILDS[n] * 10)
    ctx.write(f"left/{n}", frame)
    ctx.write(f"right/{n}", frame)


# wide/{day}: a batch of three days written as one DataFrame (ctx.write_partitioned), each day its own
# instance and its own table partition; day k of the batch has k + 1 rows.
@lake.job("wide/{day}", batch=3)
def wide(ctx: JobContext, partitions: list[dict[str, str]]) -> None:
    days = sorted(p["day"] for p in partitions)
    frames = [ctx.spark.range(k + 1).selectExpr("id", f"'{day}' AS day") for k, day in enumerate(days)]
    ctx.write_partitioned(reduce(lambda a, b: a.unionByName(b), frames))


@lake.job("held/{n}")
def held(ctx: JobContext, n: str) -> None:
    frame = ctx.read(f"left/{n}")  # resolved now to the live instance; its files are read below
    READING.setdefault(n, threading.Event()).set()
    if not RELEASE.setdefault(n, threading.Event()).wait(120):
        raise RuntimeError("the test never released held/{n}")
    ctx.write(f"held/{n}", frame)


# shape/{n}: its columns are SHAPE's (a test changes them between builds: a new job version).
SHAPE = ["id", "label"]


@lake.job("shape/{n}")
def shape(ctx: JobContext, n: str) -> None:
    columns = {"id": "id", "label": "concat('row ', id) AS label", "score": "id * 1.5 AS score"}
    ctx.write(f"shape/{n}", ctx.spark.range(3).selectExpr(*(columns[c] for c in SHAPE)))


# declared: top/{n} declares that it reads base/{n}; stage/{n} declares base/{n} but also reads extra/{n},
# which it does not declare (runtime discovery still finds it).
declared = Graph("declared")


@declared.job("base/{n}")
def declared_base(ctx: JobContext, n: str) -> None:
    ctx.write(f"base/{n}", ctx.spark.range(3))


@declared.job("extra/{n}")
def declared_extra(ctx: JobContext, n: str) -> None:
    ctx.write(f"extra/{n}", ctx.spark.range(2))


@declared.job("top/{n}", inputs=lambda n: [f"base/{n}"])
def declared_top(ctx: JobContext, n: str) -> None:
    ctx.write(f"top/{n}", ctx.read(f"base/{n}"))


@declared.job("stage/{n}", inputs=lambda n: [f"base/{n}"])
def declared_stage(ctx: JobContext, n: str) -> None:
    base, extra = ctx.read_all([f"base/{n}", f"extra/{n}"])
    ctx.write(f"stage/{n}", base.union(extra))


declared_broken = Graph("declared_broken")


def _unlistable(n: str) -> list[str]:
    raise ValueError("not a ref I can name")


declared_broken.job("bad/{n}", label="bad", inputs=_unlistable)(lambda ctx, n: None)


# Batches and pools: daily/{day} builds up to 10 days in one run, in pool "etl"; its inputs are declared
# (so each output's lineage is its own feed). undeclared/{day} batches 5 days and discovers its reads.
# paced/{day} holds one run at a time cluster-wide, for priority tests.
batches = Graph("batches")
batches.external("feed/{day}")


def _stamp(frame: "DataFrame", day: str) -> "DataFrame":
    return frame.selectExpr("id", f"'{day}' as day")


@batches.job("daily/{day}", batch=10, pool="etl", inputs=lambda day: [f"feed/{day}"])
def daily_batch(ctx: JobContext, partitions: list[dict[str, str]]) -> None:
    days = [p["day"] for p in partitions]
    feeds = ctx.read_all([f"feed/{day}" for day in days])
    ctx.write_all({f"daily/{day}": _stamp(feed, day) for day, feed in zip(days, feeds, strict=True)})


@batches.job("undeclared/{day}", batch=5)
def undeclared_batch(ctx: JobContext, partitions: list[dict[str, str]]) -> None:
    days = [p["day"] for p in partitions]
    feeds = ctx.read_all([f"feed/{day}" for day in days])
    ctx.write_all({f"undeclared/{day}": _stamp(feed, day) for day, feed in zip(days, feeds, strict=True)})


# partitioned/{day} reads its batch's feeds as one DataFrame and writes them as one (ctx.write_partitioned);
# it leaves out the rows of the days in DROPPED and adds rows for the days in STRAYS.
DROPPED: set[str] = set()
STRAYS: set[str] = set()


@batches.job("partitioned/{day}", batch=5, inputs=lambda day: [f"feed/{day}"])
def partitioned_batch(ctx: JobContext, partitions: list[dict[str, str]]) -> None:
    from pyspark.sql import functions as F

    feeds = ctx.read_partitioned([f"feed/{p['day']}" for p in partitions])
    rows = feeds.where(~F.col("day").isin(*DROPPED)) if DROPPED else feeds
    for day in STRAYS:
        rows = rows.unionByName(ctx.spark.range(1).selectExpr("id", f"'{day}' as day"))
    ctx.write_partitioned(rows.withColumn("doubled", F.col("id") * 2))


PACED_SECONDS = 1.5


@batches.job("paced/{day}", max_running=1)
def paced(ctx: JobContext, day: str) -> None:
    time.sleep(PACED_SECONDS)
    ctx.write(f"paced/{day}", ctx.spark.range(2).selectExpr("id", f"'{day}' as day"))


# gated/{day}: one run at a time cluster-wide; a day in GATES holds its slot until the test opens its gate.
GATES: dict[str, threading.Event] = {}


@batches.job("gated/{day}", max_running=1)
def gated(ctx: JobContext, day: str) -> None:
    if day in GATES and not GATES[day].wait(timeout=120):
        raise RuntimeError(f"the gate of gated/{day} was never opened")
    ctx.write(f"gated/{day}", ctx.spark.range(2).selectExpr("id", f"'{day}' as day"))


# logs: jobs that log (ctx.log, logging, warnings) and fail, for attempt logs; shaped/{n} writes the columns
# SHAPES[n] names, for instance facts. Two chatty attempts of one tag meet at MEET[tag] before each line,
# so they log at the same time on threads of one worker.
logs = Graph("logs")
MEET: dict[str, threading.Barrier] = {}
SHAPES: dict[str, str] = {}
NOISY_LINES = 400
_logger = logging.getLogger("tests.graphs.logs")


@logs.job("chatty/{tag}/{n}")
def chatty(ctx: JobContext, tag: str, n: str) -> None:
    ctx.log("chatty %s starts", n)
    meeting = MEET.get(tag)
    for line in range(3):
        if meeting is not None:
            meeting.wait(60)
        _logger.warning("chatty %s line %d", n, line)
    warnings.warn(f"chatty {n} warns", UserWarning, stacklevel=1)
    ctx.write(
        f"chatty/{tag}/{n}", ctx.spark.range(int(n)).selectExpr("id", "CAST(id AS DOUBLE) / 2 AS score")
    )


@logs.job("crash/{n}")
def crash(ctx: JobContext, n: str) -> None:
    from pyspark.sql import functions as F

    ctx.log("about to fail on %s", n)
    ctx.spark.range(1).select(F.toDegrees("id"))  # a deprecated pyspark function: pyspark warns
    raise ValueError(f"bad row in {n}")


@logs.job("noisy/{n}")
def noisy(ctx: JobContext, n: str) -> None:
    for line in range(NOISY_LINES):
        ctx.log("noisy %s line %04d %s", n, line, "." * 80)
    raise RuntimeError(f"noisy {n} gave up")


@logs.job("shaped/{n}")
def shaped(ctx: JobContext, n: str) -> None:
    ctx.write(f"shaped/{n}", ctx.spark.range(4).selectExpr(*SHAPES.get(n, "id").split(";")))


# reach: report/{day} declares daily/{day}, which declares the external feed/{day} and builds in batches
# of 5. A backfill of report/{day} derives a want for each daily/{day}, which derives one for its feed
# that waits for the feed's publish. tick/{n} reads nothing: a trivial job, for big backfills.
reach = Graph("reach")
reach.external("feed/{day}")


@reach.job("daily/{day}", batch=5, inputs=lambda day: [f"feed/{day}"])
def reach_daily(ctx: JobContext, partitions: list[dict[str, str]]) -> None:
    days = [p["day"] for p in partitions]
    feeds = ctx.read_all([f"feed/{day}" for day in days])
    ctx.write_all({f"daily/{day}": feed for day, feed in zip(days, feeds, strict=True)})


@reach.job("report/{day}", inputs=lambda day: [f"daily/{day}"])
def reach_report(ctx: JobContext, day: str) -> None:
    ctx.write(f"report/{day}", ctx.read(f"daily/{day}"))


@reach.job("tick/{n}")
def tick(ctx: JobContext, n: str) -> None:
    ctx.write(f"tick/{n}", ctx.spark.range(1))


# events/{n}: checks of every kind; tally/{n} reads it. Until a test "fixes" n, events/{n} has a null user,
# a repeated id and an unknown kind, which its blocking checks refuse.
CLEAN: set[str] = set()


def has_buys(ctx: CheckContext, frame: "DataFrame") -> Verdict:
    buys = frame.where("kind = 'buy'").count()
    return Verdict(passed=buys > 0, message=f"{buys} buys in {ctx.ref}", metrics={"buys": buys})


AUDIT_FAILS: set[str] = set()  # refs whose audit a test makes fail (in-process worker): `databuild check`
AUDIT_HANGS: dict[str, threading.Event] = {}  # refs whose audit waits until the test sets the event


def audit(ctx: CheckContext, frame: "DataFrame") -> bool:
    if (release := AUDIT_HANGS.get(ctx.ref)) is not None:
        release.wait(120)
    return ctx.ref not in AUDIT_FAILS


checked = Graph("checked")


@checked.job(
    "events/{n}",
    checks=[
        schema({"id": "bigint", "user_id": "long", "kind": "string"}),
        not_null("user_id"),
        unique("id"),
        accepted_values("kind", ["view", "buy"]),
        row_count(min=1, max=10),
        row_count(max=3, severity="warning", name="small"),
        custom(has_buys, severity="warning"),
        custom(audit),
    ],
)
def checked_events(ctx: JobContext, n: str) -> None:
    rows: list[tuple[int, int | None, str]] = [
        (1, 10, "view"),
        (2, 11, "buy"),
        (3, 12, "view"),
        (4, 13, "view"),
    ]
    if n not in CLEAN:
        rows.append((4, None, "oops"))
    ctx.write(f"events/{n}", ctx.spark.createDataFrame(rows, "id bigint, user_id bigint, kind string"))


@checked.job("tally/{n}")
def tally(ctx: JobContext, n: str) -> None:
    ctx.write(f"tally/{n}", ctx.read(f"events/{n}").groupBy("kind").count())


# chain_v2: the chain graph with a new version of base (the same functions): what a deploy that changed
# base's code looks like to the BEL.
chain_v2 = Graph("chain")
chain_v2.external("gate/{n}")
chain_v2.job("base/{n}", version="2")(base)
chain_v2.job("derived/{n}", checks=[row_count(min=1, name="rows")])(derived)


def layered(mid_version: str) -> Graph:
    """ext/{n} -> up/{n} -> mid/{n} -> down/{n}; side/{n} reads up/{n} too (tests/test_staleness.py)."""
    g = Graph("layered")
    g.external("ext/{n}")
    for label in ("up", "down", "side"):
        g.job(f"{label}/{{n}}", label=label, version="1")(lambda ctx, n: None)
    g.job("mid/{n}", label="mid", version=mid_version)(lambda ctx, n: None)
    return g


layered_v1 = layered("1")
layered_v2 = layered("2")  # the same graph but mid's code


# costs: a job with real Spark work (a scan, a shuffle, a write), whose cost Spark's accounting shows.
costs = Graph("costs")


@costs.job("sums/{n}")
def sums(ctx: JobContext, n: str) -> None:
    rows = ctx.spark.range(0, 2_000_000, numPartitions=4).selectExpr("id % 1000 AS k", "id AS v")
    ctx.write(f"sums/{n}", rows.groupBy("k").sum("v"))


@costs.job("broken/{n}")
def broken(ctx: JobContext, n: str) -> None:
    ctx.spark.range(0, 1_000_000, numPartitions=2).selectExpr("sum(id)").collect()  # work, then a failure
    raise RuntimeError(f"broken {n}")


# lookback: late data. feed/{date} arrives from outside, and may arrive again (a newer instance); mid,
# top and total rebuild the partitions of the last two days that read an older instance, once each.
lookback = Graph("lookback")
lookback.external("feed/{date}")


# A test holds the next build of mid/{date} after its read: (read, release) events, used once.
MID_HELD: dict[str, tuple[threading.Event, threading.Event]] = {}


@lookback.job("mid/{date}", rebuild_on_new_inputs="2d")
def lookback_mid(ctx: JobContext, date: str) -> None:
    feed = ctx.read(f"feed/{date}")
    if (held := MID_HELD.pop(date, None)) is not None:
        held[0].set()
        if not held[1].wait(120):
            raise RuntimeError("the test never released mid/{date}")
    ctx.write(f"mid/{date}", feed)


@lookback.job("top/{date}", rebuild_on_new_inputs=timedelta(days=2))
def lookback_top(ctx: JobContext, date: str) -> None:
    ctx.write(f"top/{date}", ctx.read(f"mid/{date}"))


# An incremental job: each build adds the feed's rows to what its previous instance held (a cumulative
# table). Its rebuild supersedes the instance it read, which must not make it late or stale.
@lookback.job("total/{date}", rebuild_on_new_inputs="2d")
def lookback_total(ctx: JobContext, date: str) -> None:
    feed = ctx.read(f"feed/{date}")
    previous = ctx.read_previous(f"total/{date}")
    ctx.write(f"total/{date}", feed if previous is None else previous.unionByName(feed))


# priced: runs whose costs tests/test_cost.py records by hand.
priced_graph = Graph("priced")
priced_graph.job("left/{n}", "right/{n}", label="pair")(lambda ctx, n: None)
priced_graph.job("far/{n}", label="remote")(lambda ctx, n: None)


# outage: a job that, once its output is written, takes the BEL's PostgreSQL database away for a few
# seconds (every connection terminated, new ones refused), as a failover would, just before its publish
# commit. Which database, and for how long: tests/test_bel_outages.py says, in the environment.
outage = Graph("outage")
OUTAGE_DATABASE = "DATABUILD_TEST_OUTAGE_URL"


@outage.job("survived/{n}")
def survived(ctx: JobContext, n: str) -> None:
    from databuild.testing import POSTGRES_ADMIN_URL, cut_off

    ctx.write(f"survived/{n}", ctx.spark.range(1))
    cut_off(
        POSTGRES_ADMIN_URL, os.environ[OUTAGE_DATABASE], float(os.environ.get("DATABUILD_TEST_OUTAGE_S", "4"))
    )


# filler: fill/{n} writes about 150 MB of Parquet, more than the small disk of tests/test_full_disk.py.
filler = Graph("filler")


@filler.job("fill/{n}")
def fill(ctx: JobContext, n: str) -> None:
    ctx.write(f"fill/{n}", ctx.spark.range(3_000_000).selectExpr("id", "uuid() AS u", "uuid() AS v"))
