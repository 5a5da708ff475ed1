"""Steering a backfill under faults: pause, resume, cancel and retry it at moments drawn from a seed."""

import asyncio
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime
from functools import partial

from chaos.config import ChaosConfig
from chaos.stack import ChaosStack, retrying
from chaos.workload import backfill_refs, needed_refs
from databuild.backfill import BackfillRequest

STEERING_STEPS = ("pause", "resume", "cancel", "retry")


def steered_request(config: ChaosConfig) -> BackfillRequest:
    """A backfill of every daily_users the round's wants need (other wants than theirs: racing them)."""
    days = sorted(
        ref.partition("/")[2] for ref in needed_refs(backfill_refs(config)) if ref.startswith("daily_users/")
    )
    first, last = (
        datetime.combine(date.fromisoformat(day), datetime.min.time(), UTC) for day in (days[0], days[-1])
    )
    return BackfillRequest(pattern="daily_users/{date}", start=first, end=last)


async def steer_backfill(
    stack: ChaosStack, rng: random.Random, config: ChaosConfig, steering: Counter[str]
) -> None:
    """Register the steered backfill and, from its first recorded wants on, pause, resume, cancel and
    retry it, each after a pause drawn from ``rng`` and retried through faults; it ends retried and
    resumed, so every want of it must still end successful."""
    assert stack.db is not None
    db = stack.db
    request = steered_request(config)
    recorded = asyncio.Event()
    registering = asyncio.create_task(
        retrying(lambda: db.backfill(request, on_registered=lambda _done: recorded.set()), "backfill")
    )
    await recorded.wait()
    backfill_id = request.backfill_id

    async def cancel() -> str:
        return f"{await db.cancel_backfill(backfill_id)} want(s) cancelled"

    async def retry() -> str:
        return f"{(await db.retry_backfill(backfill_id)).reopened} want(s) reopened"

    async def pause(paused: bool) -> str:
        return f"{(await db.pause_backfill(backfill_id, paused=paused)).done} of its wants ended"

    steps: dict[str, Callable[[], Awaitable[str]]] = {
        "pause": partial(pause, True),
        "resume": partial(pause, False),
        "cancel": cancel,
        "retry": retry,
    }
    for step in STEERING_STEPS:
        await asyncio.sleep(rng.uniform(*config.steer_gap))
        said = await retrying(steps[step], f"backfill {step}")
        steering[step] += 1
        stack.log(f"backfill {backfill_id}: {step}: {said}")
    await registering
