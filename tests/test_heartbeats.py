"""`activities.heartbeats.heartbeating`: a call that ends within its first interval sends no heartbeat
(each is a write to the workflow's state on the server), a longer one beats at least every third of its
heartbeat timeout."""

import asyncio
import dataclasses
from datetime import timedelta

import pytest
from temporalio.testing import ActivityEnvironment

from activities.heartbeats import heartbeating

pytestmark = pytest.mark.unit


@heartbeating
async def takes(seconds: float) -> float:
    await asyncio.sleep(seconds)
    return seconds


def environment(heartbeat_timeout: timedelta) -> tuple[ActivityEnvironment, list[tuple[object, ...]]]:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=heartbeat_timeout)
    beats: list[tuple[object, ...]] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    return env, beats


async def test_a_short_call_sends_no_heartbeat() -> None:
    env, beats = environment(timedelta(seconds=15))
    assert await env.run(takes, 0.05) == 0.05
    assert beats == []


async def test_a_long_call_beats_within_a_third_of_its_heartbeat_timeout() -> None:
    env, beats = environment(timedelta(seconds=0.6))  # a beat every 0.2 s (at 5 s, none in 1 s)
    await env.run(takes, 1.0)
    assert 2 <= len(beats) <= 5  # a loaded machine may run a sleep late, never early
