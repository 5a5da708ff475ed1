"""Recorded workflow histories (tests/histories) and how to replay them against today's workflow code.

``python -m tests.replay.record`` records them; tests/test_replay.py replays them on every run."""

import json
from pathlib import Path

from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from worker.run import WORKFLOWS

HISTORY_DIR = Path(__file__).parent.parent / "histories"

# Each scenario of the recorder, and the histories it saves.
SCENARIOS: dict[str, tuple[str, ...]] = {
    "execute": ("want-execute", "job-run-success"),
    "delegate": ("want-delegate",),
    "watch-after-timer": ("want-watch-after-timer",),
    "fan-out-first-local": ("job-run-fan-out-first-local",),
    "finish-after-run": ("want-finish-after-run",),
    "run-started-by-decision": ("want-run-started-by-decision", "job-run-started-by-decision"),
    "input-version": ("want-input-version-1", "job-run-input-version-1"),
    "dep-miss-chain": ("want-dep-miss-chain", "want-derivative", "job-run-dep-miss"),
    "declared-inputs": ("want-declared-inputs",),
    "declared-inputs-in-decision": ("want-declared-inputs-in-decision",),
    "fail-lock": ("want-failed", "job-run-failed", "want-fail-lock-resolve"),
    "retry": ("job-run-retry",),
    "cancel": ("want-cancel",),
    "job-run-cancel": ("job-run-cancel",),
    "abandon": ("want-cancel-building", "job-run-abandon"),
    "upstream-pull": ("upstream-sync-pull",),
    "upstream-push": ("upstream-sync-push",),
    "scheduled": ("scheduled-want",),
    "sla-miss": ("want-sla-miss",),
    "ttl-expiry": ("want-ttl-expiry",),
    "continue-as-new": ("want-continue-as-new-1", "want-continue-as-new-2"),
    "alert": ("alert-queued", "alert-channel", "alert-channel-down"),
    "backfill-window": ("backfill-window",),
    "check": ("check",),
    "want-replaced": ("want-replaced",),
}


def history_path(name: str) -> Path:
    return HISTORY_DIR / f"{name}.json"


def load_history(name: str) -> WorkflowHistory:
    """A recorded history: ``{"workflow_id": ..., "history": <the JSON `temporal workflow show` writes>}``."""
    recorded = json.loads(history_path(name).read_text())
    return WorkflowHistory.from_json(recorded["workflow_id"], recorded["history"])


def replayer(*, sandboxed: bool = True) -> Replayer:
    """Today's workflows, as the worker registers them (worker/run.py): in Temporal's sandbox (its guard
    on workflow code) or not (as workers run them unless DATABUILD_WORKFLOW_SANDBOX is set)."""
    return Replayer(
        workflows=WORKFLOWS,
        data_converter=pydantic_data_converter,
        workflow_runner=SandboxedWorkflowRunner() if sandboxed else UnsandboxedWorkflowRunner(),
    )
