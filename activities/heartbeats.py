"""Heartbeats for short activities, so a worker killed mid-call is noticed within the heartbeat
timeout rather than at the end of the start-to-close timeout."""

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from temporalio import activity

P = ParamSpec("P")
R = TypeVar("R")

EVERY = 5.0  # seconds; the calls that use this allow a heartbeat timeout of 15 s


def heartbeating(call: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Heartbeat every ``EVERY`` seconds while ``call`` runs."""

    @functools.wraps(call)
    async def beating(*args: P.args, **kwargs: P.kwargs) -> R:
        async def beat() -> None:
            while True:
                activity.heartbeat()
                await asyncio.sleep(EVERY)

        beats = asyncio.create_task(beat())
        try:
            return await call(*args, **kwargs)
        finally:
            beats.cancel()

    return beating
