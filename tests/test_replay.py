"""Recorded histories of every workflow type replay against today's workflow code (no server): a change
that would break the workflows already running (other commands, or in another order, without
``workflow.patched``) fails here. How to record them: docs/development-policy.md."""

import pytest

from tests.replay import HISTORY_DIR, SCENARIOS, load_history, replayer

pytestmark = pytest.mark.unit

HISTORIES = sorted(name for names in SCENARIOS.values() for name in names)


def test_the_recorder_has_a_scenario_for_each_listed() -> None:
    from tests.replay.record import RUNS

    assert sorted(RUNS) == sorted(SCENARIOS)


def test_every_recorded_history_is_present() -> None:
    recorded = sorted(path.stem for path in HISTORY_DIR.glob("*.json"))
    assert recorded == HISTORIES


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "unsandboxed"])
@pytest.mark.parametrize("name", HISTORIES)
async def test_history_replays(name: str, sandboxed: bool) -> None:
    await replayer(sandboxed=sandboxed).replay_workflow(load_history(name))
