"""Heartbeats for short activities, so a worker killed mid-call is noticed within the heartbeat
timeout rather than at the end of the start-to-close timeout."""

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from temporalio import activity

P = ParamSpec("P")
R = TypeVar("R")

EVERY = 5.0  # seconds, at most: a third of a shorter heartbeat timeout (a job's can be 4 s)


def heartbeating(call: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Heartbeat every ``EVERY`` seconds while ``call`` runs (every third of the activity's heartbeat
    timeout, if that is shorter). The first beat comes after the first interval, not at once: Temporal
    counts the timeout from the activity's start (or its last beat), and every beat is a write to the
    workflow's state on the server, which a call that ends within seconds (most do) never needs."""

    @functools.wraps(call)
    async def beating(*args: P.args, **kwargs: P.kwargs) -> R:
        timeout = activity.info().heartbeat_timeout
        every = min(EVERY, timeout.total_seconds() / 3) if timeout else EVERY

        async def beat() -> None:
            while True:
                await asyncio.sleep(every)
                activity.heartbeat()

        beats = asyncio.create_task(beat())
        try:
            return await call(*args, **kwargs)
        finally:
            beats.cancel()

    return beating
