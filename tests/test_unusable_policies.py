"""Job settings out of range, on the real stack: runs started before they were refused (their policy is in
the job run workflow's input) no longer hang. (A worker refuses to start with them, naming the setting:
tests/test_policies.py.)

An older worker is reproduced by patches: the policy its settings gave (`JobPolicy.of`), and no check of
it, neither in the job run workflow (`policy_problem` as the workflow module has it; a sandboxed worker
imports it again from `databuild.limits` for each run) nor when the worker starts."""

import asyncio
import contextlib
from collections.abc import Iterator

import pytest

import databuild.limits
import worker.run
import workflows.job_run
from databuild.models import JobRunCause, JobRunState, PartitionStatus, WantSource, WantState
from databuild.temporal import protocol as p
from tests.conftest import Stack
from tests.helpers import until
from worker.run import running_worker


@contextlib.contextmanager
def older_worker(monkeypatch: pytest.MonkeyPatch, **policy: object) -> Iterator[None]:
    """While in the block, wants start runs with ``policy`` and the job run workflow does not check it."""
    real = p.JobPolicy.of

    def of(job: object, settings: object) -> p.JobPolicy:
        return real(job, settings).model_copy(update=policy)  # type: ignore[arg-type]

    with monkeypatch.context() as patch:
        patch.setattr(p.JobPolicy, "of", of)
        # The workflow's check (unsandboxed, and as a sandbox imports it), the worker's at start.
        for module in (workflows.job_run, databuild.limits, worker.run):
            patch.setattr(module, "policy_problem", lambda _policy: None)
        yield


async def test_a_run_stuck_on_negative_attempts_is_released_and_built_by_a_fixed_worker(
    make_stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DATABUILD_JOB_ATTEMPTS=-1 on an older worker: its run stays queued and keeps its partition
    building, and the next want delegates to it. Once a fixed worker runs, the run is released and both
    wants get the partition from a new run."""
    stack: Stack = await make_stack(graph="tests.graphs:trio", worker=False)
    with older_worker(monkeypatch, attempts=-1):
        async with running_worker(stack.parts):
            first = await stack.db.want("a/stuck")
            await until(lambda: bool(stack.bel.job_runs.query()))
            await asyncio.sleep(3)  # its workflow tasks fail meanwhile
            [stuck] = stack.bel.job_runs.query()
            assert stuck.state is JobRunState.queued
            assert stack.bel.partitions.get("a/stuck").status is PartitionStatus.building
            second = await stack.db.want("b/stuck", source=WantSource.api)
            await until(lambda: bool(stack.bel.job_runs.of_want(second.want_id)))
            [(relation, followed)] = stack.bel.job_runs.of_want(second.want_id)
            assert (relation, followed.job_run_id) == ("delegated", stuck.job_run_id)

    async with running_worker(stack.parts):  # the setting fixed, the worker restarted
        done = await asyncio.wait_for(asyncio.gather(stack.db.wait(first), stack.db.wait(second)), 120)
    assert {w.state for w in done} == {WantState.successful}
    released = stack.bel.job_runs.get(stuck.job_run_id)
    assert released.cause is JobRunCause.lost
    assert released.reason == "lost: its policy cannot run (attempts -1 is not within 1 to 1000)"
    [built] = stack.bel.job_runs.query(state=JobRunState.succeeded)
    assert stack.bel.partitions.get("a/stuck").status is PartitionStatus.live
    for want in done:
        assert built.job_run_id in {run.job_run_id for _, run in stack.bel.job_runs.of_want(want.want_id)}


async def test_a_run_retrying_for_ever_gives_up_after_the_configured_attempts(
    make_stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DATABUILD_JOB_ATTEMPTS=0 on an older worker is Temporal's "retry for ever": the job activity now
    gives up after DATABUILD_JOB_ATTEMPTS attempts, so the run fails and fail-locks its outputs."""
    stack: Stack = await make_stack(graph="tests.graphs:flaky", job_attempts=2)
    with older_worker(monkeypatch, attempts=0):
        want = await asyncio.wait_for(stack.db.wait(await stack.db.want("fails/forever")), 60)
    assert want.state is WantState.failed
    [run] = stack.bel.job_runs.query()
    assert run.state is JobRunState.failed and run.attempts == 2
    assert "AttemptsExhausted: gave up after 2 attempts (DATABUILD_JOB_ATTEMPTS)" in (run.reason or "")
    assert stack.bel.partitions.get("fails/forever").status is PartitionStatus.failed
