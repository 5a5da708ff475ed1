"""The workload: the backfill's wants and concurrent ones racing it, rounds until they settle, late data."""

import asyncio
import random
import time
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from typing import Literal

from sqlalchemy import select
from temporalio.service import RPCError

from chaos.config import FINAL, FIRST_DAY, ChaosConfig
from chaos.graph import write_correction
from chaos.invariants import stuck_wants
from chaos.stack import ChaosStack, read, retrying
from databuild.bel import BuildEventLog
from databuild.bel import schema as s
from databuild.domain.late_data import LateReader
from databuild.models import WantSource, WantSpec
from databuild.temporal.protocol import backfill_window_workflow_id

# The harness runs the whole product as a user would: the demo graph.
from examples.demo import WINDOW_DAYS


def backfill_refs(config: ChaosConfig) -> list[str]:
    return [f"{config.backfill}/{FIRST_DAY + timedelta(days=d)}" for d in range(config.days)]


def corrected_days(config: ChaosConfig) -> list[str]:
    """The days whose user_totals the run keeps (an incremental job fed by late corrections): those of
    the daily_users the backfill needs."""
    needed = needed_refs(backfill_refs(config))
    return [ref.partition("/")[2] for ref in needed if ref.startswith("daily_users/")]


async def announce(stack: ChaosStack, day: str, version: int) -> None:
    """Version ``version`` of a day's corrections arrives: written by another tool, then announced as a
    new instance (idempotent by its id, so retried through faults)."""
    assert stack.db is not None
    db = stack.db
    folder = stack.settings.home / "incoming" / "corrections" / day / f"v{version}"
    await asyncio.to_thread(write_correction, folder, version)
    ref, instance_id = f"corrections/{day}", f"corrections-{day}-v{version}"
    await retrying(
        lambda: db.publish(ref, instance_id=instance_id, location=folder.as_uri()), f"publish {ref}"
    )


async def late_news(
    stack: ChaosStack, rng: random.Random, config: ChaosConfig, versions: Counter[str]
) -> None:
    """Late data: new corrections of ``config.news`` days, two versions of each back to back (a burst);
    each rebuilds that day's user_totals by itself, and the last must win."""
    days = rng.sample(corrected_days(config), k=min(config.news, len(corrected_days(config))))
    for day in sorted(days):
        for _ in range(2):
            versions[day] += 1
            await announce(stack, day, versions[day])
    stack.log(f"late corrections of {', '.join(sorted(days))} (to version {max(versions.values())})")


def demo_inputs(ref: str) -> list[str]:
    """What a demo partition is built from (and, for the rollup, its sibling output)."""
    name, _, day = ref.partition("/")
    end = date.fromisoformat(day)
    if name in ("daily_summary", "top_spenders"):
        sibling = "top_spenders" if name == "daily_summary" else "daily_summary"
        return [f"{sibling}/{day}", *(f"daily_users/{end - timedelta(days=b)}" for b in range(WINDOW_DAYS))]
    return [f"raw_events/{day}"] if name == "daily_users" else []


def needed_refs(refs: list[str]) -> list[str]:
    """``refs`` and every partition building them builds."""
    found: dict[str, None] = {}
    frontier = list(refs)
    while frontier:
        ref = frontier.pop()
        if ref not in found:
            found[ref] = None
            frontier += demo_inputs(ref)
    return sorted(found)


async def want(stack: ChaosStack, ref: str, offset: int = 0) -> WantSpec:
    """Register a want (idempotent, so retried through faults). ``offset`` > 0: the same partition at
    a data time ``offset`` minutes later, from the API: another want, racing the backfill's."""
    assert stack.db is not None
    db = stack.db
    day = datetime.combine(date.fromisoformat(ref.rpartition("/")[2]), datetime.min.time(), UTC)
    timestamp = day + timedelta(minutes=offset)
    source = WantSource.api if offset else WantSource.cli
    return await retrying(lambda: db.want(ref, data_timestamp=timestamp, source=source), f"want {ref}")


async def register_round(stack: ChaosStack, rng: random.Random, config: ChaosConfig, refs: list[str]) -> None:
    """The round's wants and ``config.extra_wants`` concurrent ones for partitions the backfill needs
    (other data times, so other wants), all at once."""
    pool = needed_refs(backfill_refs(config))
    extras = [(rng.choice(pool), 1 + i) for i in range(config.extra_wants)]
    await asyncio.gather(*(want(stack, ref) for ref in refs), *(want(stack, ref, n) for ref, n in extras))


def open_wants(bel: BuildEventLog) -> Counter[str]:
    """Wants that are not final, by state."""
    with bel.reader.connect() as conn:
        rows = conn.execute(select(s.wants.c.state).where(s.wants.c.state.not_in(FINAL))).all()
    return Counter(state for (state,) in rows)


Settled = Literal["final", "stuck", "timeout"]


async def until_settled(stack: ChaosStack, seconds: float, every: float = 15.0) -> Settled:
    """Until every want has ended ("final"), or no open want has a running workflow any more, so
    nothing can move them ("stuck"), or ``seconds`` have passed ("timeout"). Says what is open every
    ``every`` seconds."""
    started = time.monotonic()
    shown = started
    while True:
        open_now = await read(stack, open_wants)
        if not open_now:
            return "final"
        now = time.monotonic()
        if now - started > seconds:
            return "timeout"
        if now - shown >= every:
            shown = now
            stack.log(f"open wants: {dict(open_now)}")
            if not stack.paused and await all_open_wants_dead(stack):
                stack.log(f"no open want has a running workflow: {sum(open_now.values())} stuck")
                return "stuck"
        await asyncio.sleep(1.0)


def backfill_ids(bel: BuildEventLog) -> list[str]:
    with bel.reader.connect() as conn:
        return list(conn.execute(select(s.backfills.c.backfill_id)).scalars())


async def all_open_wants_dead(stack: ChaosStack) -> bool:
    """No open want has a running workflow, and no backfill's window runs (it starts its wants in turn;
    a step lost with a killed worker is retried once its heartbeat times out)."""
    try:
        for backfill_id in await read(stack, backfill_ids):
            if await stack.workflow_running(backfill_window_workflow_id(backfill_id)):
                return False
        return len(await stuck_wants(stack)) == sum((await read(stack, open_wants)).values())
    except RPCError:  # Temporal went down meanwhile: look again later
        return False


async def taint_round(stack: ChaosStack, rng: random.Random, config: ChaosConfig) -> list[str]:
    """Late data: taint a few raw_events (cascading to everything built from them); the backfill's
    wants built from them are new wants now (a new generation), so they rebuild."""
    backfill = backfill_refs(config)
    raws = [ref for ref in needed_refs(backfill) if ref.startswith("raw_events/")]
    tainted = set(rng.sample(raws, k=min(3, len(raws))))
    for ref in sorted(tainted):
        await read(stack, _taint, ref)
    stack.log(f"tainted {', '.join(sorted(tainted))} (cascading)")
    return [ref for ref in backfill if tainted & set(needed_refs([ref]))]


def _taint(bel: BuildEventLog, ref: str) -> None:
    bel.partitions.taint(ref, reason="chaos: late data", cascade=True)


def _late_readers(bel: BuildEventLog, feeds: list[str]) -> list[LateReader]:
    return bel.lineage.late_readers(feeds)


async def until_caught_up(stack: ChaosStack, days: list[str], seconds: float) -> bool:
    """Until every user_totals read the last corrections of its day (its late rebuilds, started by the
    announcements, are done), or ``seconds`` have passed; whether it caught up."""
    feeds = [f"corrections/{day}" for day in days]
    deadline = time.monotonic() + seconds
    while await read(stack, _late_readers, feeds):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(1.0)
    return True
