"""Every branch of the want and job run workflows, in seconds: the real workflows on the time-skipping
test server, with their activities replaced by scripted doubles (tests/workflow_doubles.py), as the
temporalio samples test workflows. The end-to-end proof with the real activities, Spark and the BEL is
in the other tests (test_delegation, test_failures, test_time ...)."""

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowHistory,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

import workflows.want
from databuild.domain.decisions import Paused
from databuild.domain.events import ABANDONED_REASON as ABANDONED
from databuild.domain.events import CANCELLED_REASON as CANCELED
from databuild.models import JobRunCause, JobRunState, WantSpec, WantState, job_run_workflow_id
from databuild.temporal import protocol as p
from databuild.temporal.connection import ensure_search_attributes
from databuild.temporal.job_runs import start_job_run
from databuild.testing import skip_time
from tests.conftest import binary
from tests.workflow_doubles import (
    JOB_LABEL,
    WAIT,
    WATCHDOG,
    Held,
    Script,
    available,
    blocked_decision,
    delegate_decision,
    dep_miss_notice,
    dependencies,
    execute_decision,
    failed_notice,
    fails,
    final_decision,
    job_dep_miss,
    job_run_input,
    live_decision,
    needs_inputs,
    paused_decision,
    redecide_notice,
    replaced,
    signals,
    sla_missed_input,
    still_waiting,
    wait_external_decision,
)
from workflows.changes import FAN_OUT_FIRST_LOCAL, FIRST_STEP_REGISTERS, WATCH_AFTER_TIMER
from workflows.job_run import JobRunWorkflow
from workflows.want import WantWorkflow

DAY = datetime(2024, 1, 1, tzinfo=UTC)

WantHandle = WorkflowHandle[WantWorkflow, p.WantResult]


@pytest.fixture
async def env() -> AsyncIterator[WorkflowEnvironment]:
    """A time-skipping server per test (it starts in about 0.1 s): a workflow that ends while one of its
    activities runs (a want and its watch, say) leaves the server's time-skipping lock held for good
    (temporalio/sdk-java#1138), which would freeze virtual time for every test after it."""
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=binary("temporal-test-server"), data_converter=pydantic_data_converter
    )
    await ensure_search_attributes(env.client, env.client.namespace)
    yield env
    await env.shutdown()


@dataclass
class Harness:
    """A worker running the real workflows with ``script``'s doubles."""

    env: WorkflowEnvironment
    script: Script
    task_queue: str

    @property
    def client(self) -> Client:
        return self.env.client

    async def start_want(
        self, spec: WantSpec, version: int = p.WORKFLOW_VERSION, **options: Any
    ) -> WantHandle:
        return await self.client.start_workflow(
            WantWorkflow.run,
            p.WantInput(spec=spec, version=version),
            id=spec.workflow_id,
            task_queue=self.task_queue,
            search_attributes=TypedSearchAttributes([SearchAttributePair(p.SA_PARTITION_REF, spec.ref)]),
            **options,
        )

    async def start_job_run(self, input: p.JobRunInput) -> WorkflowHandle[JobRunWorkflow, p.JobOutcome]:
        return await self.client.start_workflow(
            JobRunWorkflow.run,
            input,
            id=job_run_workflow_id(input.job_label, input.job_run_id),
            task_queue=self.task_queue,
        )

    def job_run(self, job_run_id: str) -> WorkflowHandle[JobRunWorkflow, p.JobOutcome]:
        return self.client.get_workflow_handle_for(
            JobRunWorkflow.run, job_run_workflow_id(JOB_LABEL, job_run_id)
        )


@contextlib.asynccontextmanager
async def harnessed(
    env: WorkflowEnvironment, script: Script, runner: WorkflowRunner | None = None
) -> AsyncIterator[Harness]:
    harness = Harness(env, script, f"wf-{uuid.uuid4().hex[:8]}")
    script.client = env.client
    worker = Worker(
        env.client,
        task_queue=harness.task_queue,
        workflows=[WantWorkflow, JobRunWorkflow],
        activities=script.activities(),
        # A held job double hears its cancel within a tenth of a second.
        max_heartbeat_throttle_interval=timedelta(milliseconds=100),
        default_heartbeat_throttle_interval=timedelta(milliseconds=100),
        **({"workflow_runner": runner} if runner else {}),
    )
    async with worker:
        yield harness


@pytest.fixture
def script() -> Script:
    return Script()


@pytest.fixture
async def h(env: WorkflowEnvironment, script: Script) -> AsyncIterator[Harness]:
    async with harnessed(env, script) as harness:
        yield harness


def new_spec(data_timestamp: datetime = DAY, **extra: Any) -> WantSpec:
    return WantSpec(ref=f"t/{uuid.uuid4().hex[:8]}", data_timestamp=data_timestamp, **extra)


def new_run_id() -> str:
    return f"jr-{uuid.uuid4().hex[:8]}"


async def until_progress(handle: WantHandle, check: Callable[[p.WantProgress], bool]) -> p.WantProgress:
    async with asyncio.timeout(WAIT):
        while True:
            progress = await handle.query(WantWorkflow.progress)
            if check(progress):
                return progress
            await asyncio.sleep(0.02)


async def failure_of(handle: WorkflowHandle[Any, Any]) -> BaseException:
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    assert failure.value.cause is not None
    return failure.value.cause


def once(calls: list[Any]) -> list[Any]:
    """Calls of a local activity in the workflow task that ends a workflow, each once. That task is
    retried when news arrives as it completes (UNHANDLED_COMMAND), and its local activities run again:
    the BEL takes them as the no-ops they then are."""
    return list(dict.fromkeys(calls))


def finished(script: Script) -> p.FinishInput:
    """What the want recorded as its outcome."""
    (finish,) = once(script.inputs("finish_want"))
    assert isinstance(finish, p.FinishInput)
    return finish


# Deciding -------------------------------------------------------------------------------------------


async def test_live_partition_succeeds_at_once(h: Harness, script: Script) -> None:
    spec = new_spec()
    script.then("decide", live_decision("i-1"))

    result = await (await h.start_want(spec)).result()

    assert (result.state, result.instance_id, result.sla_missed) == (WantState.successful, "i-1", False)
    assert script.names() == ["register_want", "decide", "finish_want"]
    assert script.inputs("register_want") == [p.WantInput(spec=spec, version=p.WORKFLOW_VERSION)]
    assert script.inputs("decide") == [
        p.DecideInput(want_id=spec.want_id, seq=1, start_run=True, root_want_id=spec.want_id)
    ]
    assert finished(script) == p.FinishInput(
        want_id=spec.want_id, state=WantState.successful, instance_id="i-1", opening=0
    )


async def test_final_decision_ends_the_want_in_that_state(h: Harness, script: Script) -> None:
    spec = new_spec()
    script.then("decide", final_decision(WantState.expired, "expired earlier"))

    result = await (await h.start_want(spec)).result()

    assert (result.state, result.reason) == (WantState.expired, "expired earlier")
    assert finished(script).state is WantState.expired


async def test_a_decision_that_cannot_be_made_fails_the_want(h: Harness, script: Script) -> None:
    spec = new_spec()
    script.then("decide", fails("no job produces it", "GraphDefinitionError", non_retryable=True))

    error = await failure_of(await h.start_want(spec))

    assert isinstance(error, ApplicationError) and error.type == "WantFailed"
    assert "GraphDefinitionError: no job produces it" in error.message
    assert finished(script).state is WantState.failed


# Following a job run --------------------------------------------------------------------------------


def scripted_build(
    h: Harness, script: Script, spec: WantSpec, run_id: str, instance_id: str
) -> p.ExecuteOrder:
    """The want's decision queues run ``run_id``, whose fan-out tells it ``instance_id`` is live."""
    decision = execute_decision(run_id, [spec.ref])
    script.then("decide", decision)
    script.then(
        "fan_out",
        signals(
            h.client, spec.workflow_id, p.SIGNAL_PARTITION_AVAILABLE, available(spec.ref, instance_id, run_id)
        ),
    )
    return decision


async def test_execute_starts_the_job_run_and_succeeds_on_its_fan_out(h: Harness, script: Script) -> None:
    spec, run_id = new_spec(), new_run_id()
    decision = scripted_build(h, script, spec, run_id, "i-7")

    handle = await h.start_want(spec)
    result = await handle.result()

    assert (result.state, result.instance_id) == (WantState.successful, "i-7")
    # The decision started the run: no child of the want, nor any task its start and end would wake.
    events = [event.WhichOneof("attributes") for event in (await handle.fetch_history()).events]
    assert not [event for event in events if "child" in event]
    assert events.count("workflow_task_completed_event_attributes") == 2
    assert script.inputs("run_job") == [
        job_run_input(run_id, [spec.ref]).model_copy(update={"policy": decision.policy})
    ]
    assert script.inputs("fan_out") == [p.FanOutInput(job_run_id=run_id)]
    assert "fail_job_run" not in script.names()
    job_run = h.job_run(run_id)
    assert (await job_run.result()).state is JobRunState.succeeded
    described = await job_run.describe()
    assert described.parent_id is None
    attributes = described.typed_search_attributes
    assert attributes.get(p.SA_JOB_LABEL) == JOB_LABEL
    assert attributes.get(p.SA_ROOT_WANT_ID) == spec.want_id


async def test_a_decision_retried_after_starting_its_run_starts_it_once(h: Harness, script: Script) -> None:
    spec, run_id = new_spec(), new_run_id()
    decision = execute_decision(run_id, [spec.ref])

    async def started_then_lost(input: p.DecideInput) -> ApplicationError:
        # The run's workflow started, then the activity died before it could answer: it is retried.
        await start_job_run(h.client, h.task_queue, decision, input.want_id, spec.want_id)
        return fails("worker lost after starting the run", "ConnectionError")

    script.then("decide", started_then_lost, decision)
    script.then(
        "fan_out",
        signals(h.client, spec.workflow_id, p.SIGNAL_PARTITION_AVAILABLE, available(spec.ref, "i-8", run_id)),
    )

    result = await (await h.start_want(spec)).result()

    assert (result.state, result.instance_id) == (WantState.successful, "i-8")
    assert len(script.inputs("decide")) == 2
    assert len(script.inputs("run_job")) == 1  # one workflow, one job
    assert (await h.job_run(run_id).result()).state is JobRunState.succeeded


async def test_delegated_want_succeeds_when_the_run_signals(h: Harness, script: Script) -> None:
    spec, run_id = new_spec(), new_run_id()
    script.then("decide", delegate_decision(run_id, [spec.ref]))
    handle = await h.start_want(spec)

    progress = await until_progress(handle, lambda progress: progress.state is WantState.building)
    assert progress.job_run_id == run_id
    await handle.signal(p.SIGNAL_PARTITION_AVAILABLE, available(spec.ref, "i-2", run_id))

    result = await handle.result()
    assert (result.state, result.instance_id) == (WantState.successful, "i-2")
    assert "run_job" not in script.names()  # nothing started: another run builds it
    assert "watch" not in script.names()  # the signal came within a lease: no watch was dispatched


def patch_markers(history: WorkflowHistory) -> list[str]:
    """The workflow changes a run asked about (``workflow.patched``), as their markers in its history."""
    return [
        e.marker_recorded_event_attributes.details["patch-data"].payloads[0].data.decode()
        for e in history.events
        if e.HasField("marker_recorded_event_attributes")
        and e.marker_recorded_event_attributes.marker_name == "core_patch"
    ]


@pytest.mark.parametrize("version", [0, p.WORKFLOW_VERSION], ids=["started before versions", "current"])
async def test_runs_at_the_current_version_take_its_changes_without_asking(
    h: Harness, script: Script, version: int
) -> None:
    """A want and its run started by today's code take every change folded into their version with no
    patch marker (nor the TemporalChangeVersion upsert that comes with each); a want started before input
    versions (its input has none) asks as it always did, so its history replays unchanged."""
    spec, run_id = new_spec(), new_run_id()
    scripted_build(h, script, spec, run_id, "i-3")
    handle = await h.start_want(spec, version=version)
    assert (await handle.result()).state is WantState.successful
    # The want's own run of ``run_id`` can still be ending (its want heard first): this run takes its id
    # once it has closed (seen under CI's load: "Workflow execution already started").
    await h.job_run(run_id).result()
    run = await h.start_job_run(job_run_input(run_id, [spec.ref]).model_copy(update={"version": version}))
    assert (await run.result()).state is JobRunState.succeeded

    want_markers = patch_markers(await handle.fetch_history())
    run_markers = patch_markers(await run.fetch_history())
    if version == 0:
        assert any(FIRST_STEP_REGISTERS in m for m in want_markers), want_markers
        assert any(WATCH_AFTER_TIMER in m for m in want_markers), want_markers
        assert any(FAN_OUT_FIRST_LOCAL in m for m in run_markers), run_markers
    else:
        assert (want_markers, run_markers) == ([], [])
        assert script.inputs("decide")[0].start_run  # the folded changes taken: the decision starts the run
        assert script.inputs("fan_out_first")  # and the run tells its first page locally


@pytest.mark.parametrize("when", ["with the start", "while deciding"])
async def test_a_signal_before_the_want_waits_is_not_lost(h: Harness, script: Script, when: str) -> None:
    spec, run_id = new_spec(), new_run_id()
    notice = available(spec.ref, "i-3", run_id)
    if when == "while deciding":

        async def decide(_input: p.DecideInput) -> p.Decision:
            await h.client.get_workflow_handle(spec.workflow_id).signal(p.SIGNAL_PARTITION_AVAILABLE, notice)
            return delegate_decision(run_id, [spec.ref])

        script.then("decide", decide)
        handle = await h.start_want(spec)
    else:
        script.then("decide", delegate_decision(run_id, [spec.ref]))
        handle = await h.start_want(
            spec, start_signal=p.SIGNAL_PARTITION_AVAILABLE, start_signal_args=[notice]
        )

    result = await handle.result()

    assert (result.state, result.instance_id) == (WantState.successful, "i-3")
    assert len(script.inputs("decide")) == 1


async def test_watch_seeing_the_run_ended_makes_the_want_decide_again(h: Harness, script: Script) -> None:
    spec, run_id = new_spec(), new_run_id()
    script.then("decide", delegate_decision(run_id, [spec.ref]), live_decision("i-4"))
    script.then("watch", still_waiting, None)  # the second look finds the run ended, unheard

    result = await (await h.start_want(spec)).result()

    assert (result.state, result.instance_id) == (WantState.successful, "i-4")
    assert [i.seq for i in script.inputs("decide")] == [1, 2]
    assert script.inputs("watch") == [p.WatchInput(job_run_id=run_id, look_at_once=True)] * 2


async def test_a_watch_that_tells_its_want_how_the_run_ended_settles_it_without_deciding_again(
    h: Harness, script: Script
) -> None:
    """The real watch tells its want how an ended run ended (the run's own notice may still be on its
    way), and waits: the want settles from that notice and cancels the watch, with one decision and no
    failed workflow task."""
    spec, run_id = new_spec(), new_run_id()
    script.then("decide", delegate_decision(run_id, [spec.ref]))

    async def look(input: p.WatchInput) -> ApplicationError:  # then it waits to be cancelled
        notice = available(spec.ref, "i-5", run_id)
        await h.client.get_workflow_handle(spec.workflow_id).signal(p.SIGNAL_PARTITION_AVAILABLE, notice)
        return still_waiting(input)

    script.then("watch", look)
    handle = await h.start_want(spec)
    result = await handle.result()

    assert (result.state, result.instance_id) == (WantState.successful, "i-5")
    assert len(script.inputs("decide")) == 1
    events = [event.WhichOneof("attributes") for event in (await handle.fetch_history()).events]
    assert "workflow_task_failed_event_attributes" not in events


async def test_time_skips_again_after_a_want_ends_while_its_watch_looks(h: Harness, script: Script) -> None:
    """The test server leaks the time-skipping lock of a watch still looking when its want ends
    (temporalio/sdk-java#1138); skip_time finds virtual time stuck at the wall clock's pace and releases
    it, instead of sleeping hours of wall time."""
    spec, run_id = new_spec(), new_run_id()
    script.then("decide", delegate_decision(run_id, [spec.ref]))
    looking = asyncio.Event()

    async def slow_look(_input: object) -> ApplicationError:
        looking.set()
        await asyncio.sleep(3)
        return still_waiting(_input)

    script.always("watch", slow_look)
    handle = await h.start_want(spec)
    await h.env.sleep(WATCHDOG)  # the watch starts once a lease passed without news
    async with asyncio.timeout(WAIT):
        await looking.wait()
    await handle.signal(p.SIGNAL_PARTITION_AVAILABLE, available(spec.ref, "i-2", run_id))
    assert (await handle.result()).state is WantState.successful

    before, started = await h.env.get_current_time(), time.monotonic()
    await skip_time(h.env, timedelta(hours=6), step=timedelta(hours=1), stuck_after=timedelta(seconds=2))
    assert await h.env.get_current_time() - before >= timedelta(hours=6)
    assert time.monotonic() - started < WAIT


async def test_failed_run_fails_the_want(h: Harness, script: Script) -> None:
    spec, run_id = new_spec(), new_run_id()
    script.then("decide", execute_decision(run_id, [spec.ref]))
    script.always("run_job", fails("bad rows", "ValueError"))
    reason = "ValueError: bad rows"
    script.then(
        "fan_out",
        signals(
            h.client, spec.workflow_id, p.SIGNAL_PARTITION_FAILED, failed_notice(spec.ref, run_id, reason)
        ),
    )

    error = await failure_of(await h.start_want(spec))

    assert isinstance(error, ApplicationError) and error.type == "WantFailed" and error.non_retryable
    assert error.message == f"want {spec.ref} failed: job run {run_id} failed: {reason}"
    assert script.inputs("fail_job_run") == [
        p.FailJobRunInput(job_run_id=run_id, reason=reason, cause=JobRunCause.error)
    ]
    finish = finished(script)
    assert (finish.state, finish.reason) == (WantState.failed, f"job run {run_id} failed: {reason}")
    assert (await h.job_run(run_id).result()).state is JobRunState.failed


# Dep-miss --------------------------------------------------------------------------------------------


async def test_dep_miss_waits_for_its_inputs_then_decides_again(h: Harness, script: Script) -> None:
    spec, run_id = new_spec(), new_run_id()
    inputs = ["in/a", "in/b"]
    script.then("decide", execute_decision(run_id, [spec.ref]), live_decision("i-5"))
    script.then("run_job", job_dep_miss(inputs))
    script.then(
        "fan_out", signals(h.client, spec.workflow_id, p.SIGNAL_DEP_MISS, dep_miss_notice(run_id, inputs))
    )
    script.then("await_dependencies", dependencies(live=["in/a"]))
    handle = await h.start_want(spec)

    asked = await script.called("await_dependencies")
    assert asked == p.DependenciesInput(want_id=spec.want_id, job_run_id=run_id, missing=inputs, opening=0)
    progress = await until_progress(handle, lambda progress: progress.waiting_for == ["in/b"])
    assert progress.state is WantState.upstream_building
    assert len(script.inputs("decide")) == 1  # not before its inputs are live
    await handle.signal(p.SIGNAL_PARTITION_AVAILABLE, available("in/b", "i-b"))

    result = await handle.result()
    assert (result.state, result.instance_id) == (WantState.successful, "i-5")
    assert [i.seq for i in script.inputs("decide")] == [1, 2]
    assert len(script.inputs("run_job")) == 1
    assert (await h.job_run(run_id).result()).state is JobRunState.dep_miss


@pytest.mark.parametrize("heard", ["from await_dependencies", "by signal"])
async def test_dep_miss_with_a_failed_input_fails_the_want(h: Harness, script: Script, heard: str) -> None:
    spec, run_id = new_spec(), new_run_id()
    reason = "derivative want w-1 failed: broken"
    script.then("decide", execute_decision(run_id, [spec.ref]))
    script.then("run_job", job_dep_miss(["in/a"]))
    script.then(
        "fan_out",
        signals(h.client, spec.workflow_id, p.SIGNAL_DEP_MISS, dep_miss_notice(run_id, ["in/a"])),
    )
    if heard == "from await_dependencies":
        script.then("await_dependencies", dependencies(failed={"in/a": reason}))
    handle = await h.start_want(spec)
    if heard == "by signal":
        await script.called("await_dependencies")
        await handle.signal(p.SIGNAL_PARTITION_FAILED, failed_notice("in/a", "want:w-1", reason))

    error = await failure_of(handle)

    assert isinstance(error, ApplicationError) and error.type == "WantFailed"
    assert finished(script).reason == f"input(s) failed to build: in/a: {reason}"
    assert len(script.inputs("decide")) == 1


# Declared inputs ----------------------------------------------------------------------------------------


async def test_declared_inputs_started_by_the_decision_need_no_activity(h: Harness, script: Script) -> None:
    spec = new_spec()
    inputs = ["in/a", "in/b"]
    script.then("decide", needs_inputs(inputs, dependencies(live=["in/a"])), live_decision("i-7"))
    handle = await h.start_want(spec)

    progress = await until_progress(handle, lambda progress: progress.waiting_for == ["in/b"])
    assert progress.state is WantState.upstream_building
    await handle.signal(p.SIGNAL_PARTITION_AVAILABLE, available("in/b", "i-b"))

    result = await handle.result()
    assert (result.state, result.instance_id) == (WantState.successful, "i-7")
    assert [i.seq for i in script.inputs("decide")] == [1, 2]
    assert script.inputs("await_dependencies") == []


async def test_declared_inputs_started_by_the_decision_forget_news_from_before_it(
    h: Harness, script: Script
) -> None:
    """An input heard live before the decision that found it missing (tainted since, say) is waited for
    again: only a notice that comes after the decision read the BEL counts."""
    spec = new_spec()
    script.then(
        "decide", wait_external_decision(), needs_inputs(["in/b"], dependencies()), live_decision("i-8")
    )
    handle = await h.start_want(spec)
    await until_progress(handle, lambda progress: progress.state is WantState.upstream_building)
    await handle.signal(p.SIGNAL_PARTITION_AVAILABLE, available("in/b", "i-old"))
    await handle.signal(p.SIGNAL_REDECIDE, redecide_notice(spec.ref, "tainted"))

    await until_progress(handle, lambda progress: progress.waiting_for == ["in/b"])
    assert len(script.inputs("decide")) == 2  # still waiting for in/b: the notice from before is dropped
    await handle.signal(p.SIGNAL_PARTITION_AVAILABLE, available("in/b", "i-new"))

    result = await handle.result()
    assert (result.state, result.instance_id) == (WantState.successful, "i-8")
    assert [i.seq for i in script.inputs("decide")] == [1, 2, 3]


async def test_declared_inputs_the_decision_left_are_started_by_the_activity(
    h: Harness, script: Script
) -> None:
    spec = new_spec()
    script.then("decide", needs_inputs(["in/a"]), live_decision("i-9"))
    script.then("await_dependencies", dependencies(live=["in/a"]))
    handle = await h.start_want(spec)

    result = await handle.result()
    assert result.state is WantState.successful
    assert script.inputs("await_dependencies") == [
        p.DependenciesInput(want_id=spec.want_id, job_run_id=None, missing=["in/a"], opening=0)
    ]


# Waiting without a run -------------------------------------------------------------------------------


async def test_blocked_want_decides_again_on_redecide(h: Harness, script: Script) -> None:
    spec = new_spec()
    script.then("decide", blocked_decision([spec.ref]), live_decision("i-6"))
    handle = await h.start_want(spec)

    progress = await until_progress(handle, lambda progress: progress.state is WantState.upstream_building)
    assert progress.waiting_for == [spec.ref]
    await h.env.sleep(WATCHDOG)  # a lease without news: the watch looks at the fail-locks
    assert await script.called("watch") == p.WatchInput(blocked_refs=[spec.ref], look_at_once=True)
    await handle.signal(p.SIGNAL_REDECIDE, redecide_notice(spec.ref, "resolved"))

    result = await handle.result()
    assert (result.state, result.instance_id) == (WantState.successful, "i-6")
    assert [i.seq for i in script.inputs("decide")] == [1, 2]


async def test_external_want_succeeds_when_published(h: Harness, script: Script) -> None:
    spec = new_spec()
    script.then("decide", wait_external_decision())
    handle = await h.start_want(spec)

    progress = await until_progress(handle, lambda progress: progress.state is WantState.upstream_building)
    assert progress.waiting_for == [spec.ref]
    await handle.signal(p.SIGNAL_PARTITION_AVAILABLE, available(spec.ref, "ext-1"))

    result = await handle.result()
    assert (result.state, result.instance_id) == (WantState.successful, "ext-1")
    assert len(script.inputs("decide")) == 1


@pytest.mark.parametrize("resumed", ["after the verdict", "while it was decided"])
async def test_a_paused_verdict_holds_the_want_until_a_resume(
    h: Harness, script: Script, resumed: str
) -> None:
    """A want that a paused backfill reaches without having been signalled (a derivative started after
    the pause) hears it from its decision; a resume heard while that decision was made is not lost."""
    spec = new_spec()

    async def resumed_meanwhile(_input: p.DecideInput) -> Paused:
        await h.client.get_workflow_handle(spec.workflow_id).signal(p.SIGNAL_RESUME)
        # The decision (a local activity) outlasts a workflow task, so the want hears the resume first.
        await asyncio.sleep(1.5)
        return paused_decision()

    async def by_step(input: p.DecideInput) -> object:
        # Answered by step, not by call: under load a workflow task times out and its local activities
        # run again with the same step (the BEL answers a step it decided again the same way).
        if input.seq > 1:
            return live_decision("i-7")
        return await resumed_meanwhile(input) if resumed == "while it was decided" else paused_decision()

    script.always("decide", by_step)
    handle = await h.start_want(spec, task_timeout=timedelta(seconds=1))
    if resumed == "after the verdict":
        await script.called("decide")
        await asyncio.sleep(0.5)
        assert once([i.seq for i in script.inputs("decide")]) == [1]  # it waits, deciding nothing
        await handle.signal(p.SIGNAL_RESUME)

    result = await handle.result()
    assert (result.state, result.instance_id) == (WantState.successful, "i-7")
    assert once([i.seq for i in script.inputs("decide")]) == [1, 2]


async def test_required_partitions_hold_the_decision_back(h: Harness, script: Script) -> None:
    spec = new_spec(requires=["ext/x", "ext/y"])
    script.then("await_requirements", p.RequirementsStatus(live=["ext/x"]))
    script.then("decide", live_decision("i-8"))
    handle = await h.start_want(spec)

    asked = await script.called("await_requirements")
    assert asked == p.RequirementsInput(want_id=spec.want_id, refs=["ext/x", "ext/y"])
    progress = await until_progress(handle, lambda progress: progress.waiting_for == ["ext/y"])
    assert progress.state is WantState.upstream_building
    assert "decide" not in script.names()
    await handle.signal(p.SIGNAL_PARTITION_AVAILABLE, available("ext/y", "ext-y"))

    result = await handle.result()
    assert (result.state, result.instance_id) == (WantState.successful, "i-8")


# SLA and TTL (virtual time) -------------------------------------------------------------------------


async def test_sla_miss_is_recorded_once_while_the_want_keeps_working(h: Harness, script: Script) -> None:
    start = await h.env.get_current_time()
    spec = new_spec(data_timestamp=start, sla=timedelta(hours=9), ttl=timedelta(days=30))
    script.then("decide", wait_external_decision())
    handle = await h.start_want(spec)
    await until_progress(handle, lambda progress: progress.state is WantState.upstream_building)
    assert "record_sla_missed" not in script.names()

    await h.env.sleep(timedelta(hours=10))
    assert await script.called("record_sla_missed") == sla_missed_input(
        spec.want_id, start + timedelta(hours=9)
    )
    progress = await until_progress(handle, lambda progress: progress.sla_missed)
    assert progress.state is WantState.upstream_building  # late, but still working
    attributes = (await handle.describe()).typed_search_attributes
    assert attributes.get(p.SA_SLA_MISSED) is True
    await handle.signal(p.SIGNAL_PARTITION_AVAILABLE, available(spec.ref, "late-1"))

    result = await handle.result()
    assert (result.state, result.sla_missed) == (WantState.successful, True)
    assert len(script.inputs("record_sla_missed")) == 1


async def test_sla_at_risk_is_assessed_when_the_estimate_says_and_alerted_once(
    h: Harness, script: Script
) -> None:
    start = await h.env.get_current_time()
    deadline = start + timedelta(hours=9)
    spec = new_spec(data_timestamp=start, sla=timedelta(hours=9), ttl=timedelta(days=30))
    script.then("decide", wait_external_decision())
    risky = start + timedelta(hours=8)  # the p90 estimate passes the deadline then if nothing moves

    def assess(input: p.AssessSlaInput) -> p.SlaAssessment:
        if input.now >= risky:
            return p.SlaAssessment(at_risk=True, eta=start + timedelta(hours=10))
        return p.SlaAssessment(at_risk=False, check_at=risky)

    script.always("assess_sla", assess)
    handle = await h.start_want(spec)
    await until_progress(handle, lambda progress: progress.state is WantState.upstream_building)

    await h.env.sleep(timedelta(hours=10))
    looks = script.inputs("assess_sla")
    assert looks[0].deadline == deadline and looks[0].now - start < timedelta(minutes=1)
    # It looked again when the state changed (new -> upstream_building), then at 8h, before the deadline.
    assert abs(looks[-1].now - risky) < timedelta(seconds=2)
    assert len(looks) <= 3  # no polling: once at the start, once per change, once at 8h
    assert len(script.inputs("record_sla_missed")) == 1  # the miss is still recorded at the deadline
    await handle.signal(p.SIGNAL_PARTITION_AVAILABLE, available(spec.ref, "late-1"))
    assert (await handle.result()).state is WantState.successful
    assert len(script.inputs("assess_sla")) == len(looks)  # at risk once: never asked again


async def test_past_sla_is_recorded_at_once(h: Harness, script: Script) -> None:
    start = await h.env.get_current_time()
    spec = new_spec(data_timestamp=start - timedelta(days=1), sla=timedelta(hours=1))
    script.then("decide", wait_external_decision())
    handle = await h.start_want(spec)

    await script.called("record_sla_missed")
    await until_progress(handle, lambda progress: progress.sla_missed)
    assert await h.env.get_current_time() - start < timedelta(minutes=1)


@pytest.mark.parametrize("waiting", ["for a publish", "on a build"])
async def test_ttl_expiry_stops_the_want(h: Harness, script: Script, waiting: str) -> None:
    start = await h.env.get_current_time()
    spec = new_spec(data_timestamp=start, sla=timedelta(hours=9), ttl=timedelta(days=2))
    run_id = new_run_id()
    building = waiting == "on a build"
    script.then("decide", delegate_decision(run_id, [spec.ref]) if building else wait_external_decision())

    result = await (await h.start_want(spec)).result()

    assert (result.state, result.sla_missed) == (WantState.expired, True)
    assert result.reason == f"TTL passed at {start + timedelta(days=2):%Y-%m-%d %H:%M}Z"
    assert await h.env.get_current_time() >= start + timedelta(days=2)
    assert finished(script).state is WantState.expired
    assert len(script.inputs("record_sla_missed")) == 1
    expected = [p.AbandonBuildInput(job_run_id=run_id)] if building else []
    assert once(script.inputs("abandon_build")) == expected
    # The watch looks every watchdog (1 h), backing off to ten times that: nine looks in two days.
    assert len(script.inputs("watch")) <= (9 if building else 0)


async def test_a_want_whose_ttl_passed_before_it_started_is_recorded_then_expires(
    h: Harness, script: Script
) -> None:
    """Its first step (the want recorded with its first decision) never comes: it is recorded all the
    same before its end is, so the BEL never finishes a want it does not hold."""
    start = await h.env.get_current_time()
    spec = new_spec(data_timestamp=start - timedelta(days=3), ttl=timedelta(days=1))

    result = await (await h.start_want(spec)).result()

    assert result.state is WantState.expired
    assert script.names() == ["register_want", "finish_want"]
    assert finished(script).state is WantState.expired


# Cancel ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("waiting", ["for a publish", "on a build"])
async def test_cancel_records_the_want_canceled(h: Harness, script: Script, waiting: str) -> None:
    spec, run_id = new_spec(), new_run_id()
    building = waiting == "on a build"
    script.then("decide", delegate_decision(run_id, [spec.ref]) if building else wait_external_decision())
    handle = await h.start_want(spec)
    await until_progress(handle, lambda progress: progress.state is not WantState.new)

    await handle.cancel()

    assert isinstance(await failure_of(handle), CancelledError)
    finish = finished(script)
    assert (finish.state, finish.reason) == (WantState.canceled, "canceled on request")
    expected = [p.AbandonBuildInput(job_run_id=run_id)] if building else []
    assert once(script.inputs("abandon_build")) == expected


# Replaced by a retry ---------------------------------------------------------------------------------


def openings(script: Script, name: str) -> list[int | None]:
    return [call.opening for call in once(script.inputs(name))]


async def test_a_run_whose_outcome_is_refused_as_replaced_carries_on_as_the_new_opening(
    h: Harness, script: Script
) -> None:
    """A retry reopened the want while this run finished (the retry attached to it, as a start for the
    old opening that raced the retry leaves it): its write is refused, and it carries on as the new one."""
    spec = new_spec()
    script.then("decide", live_decision("i-1"), live_decision("i-2"))
    script.then("finish_want", replaced(spec.want_id, 0, 1))

    handle = await h.start_want(spec)
    result = await handle.result()

    assert (result.state, result.instance_id) == (WantState.successful, "i-2")
    assert openings(script, "decide") == [0, 1] and openings(script, "finish_want") == [0, 1]
    assert script.inputs("register_want")[-1] == p.WantInput(spec=spec, version=p.WORKFLOW_VERSION, opening=1)
    assert (await handle.describe()).run_id != handle.first_execution_run_id  # a new run, not a loop


async def test_a_run_replaced_before_it_decides_carries_on_as_the_new_opening(
    h: Harness, script: Script
) -> None:
    spec = new_spec()
    script.then("decide", replaced(spec.want_id, 0, 2), live_decision("i-3"))

    result = await (await h.start_want(spec)).result()

    assert (result.state, result.instance_id) == (WantState.successful, "i-3")
    assert openings(script, "decide") == [0, 2] and openings(script, "finish_want") == [2]


async def test_a_cancel_while_the_outcome_is_recorded_cannot_stop_the_write(
    h: Harness, script: Script
) -> None:
    """The final write is shielded. A write that outlasts the workflow task timeout (the worker then
    completes the task to keep it alive, so news can arrive meanwhile) hears a cancel in the middle:
    the write must neither be cancelled nor lost; the run then ends cancelled, the outcome recorded."""
    spec = new_spec()
    writes: list[str] = []

    async def slow_write(_input: p.FinishInput) -> None:
        writes.append("started")
        try:
            await asyncio.sleep(4)  # past the 2 s task timeout: the worker heartbeats the task
        except asyncio.CancelledError:
            writes.append("cancelled")
            raise
        writes.append("done")

    script.then("decide", live_decision("i-7")).always("finish_want", slow_write)
    handle = await h.start_want(spec, task_timeout=timedelta(seconds=2))
    await script.called("finish_want")
    await asyncio.sleep(2.5)
    await handle.cancel()

    assert isinstance(await failure_of(handle), CancelledError)
    assert "cancelled" not in writes and writes[-1] == "done"
    assert once(script.inputs("finish_want")) == [
        p.FinishInput(want_id=spec.want_id, state=WantState.successful, instance_id="i-7", opening=0)
    ]


async def test_canceled_want_abandons_the_run_it_started(h: Harness, script: Script) -> None:
    spec, run_id = new_spec(), new_run_id()
    job = Held()
    script.then("decide", execute_decision(run_id, [spec.ref]))
    script.then("run_job", job)
    script.then("abandon_build", p.AbandonBuildResult(workflow_id=job_run_workflow_id(JOB_LABEL, run_id)))
    handle = await h.start_want(spec)
    await script.called("run_job")

    await handle.cancel()

    assert isinstance(await failure_of(handle), CancelledError)
    outcome = await h.job_run(run_id).result()
    assert (outcome.state, outcome.cause, outcome.reason) == (
        JobRunState.cancelled,
        JobRunCause.abandoned,
        ABANDONED,
    )
    assert job.cancelled
    assert script.inputs("fail_job_run") == [
        p.FailJobRunInput(job_run_id=run_id, reason=ABANDONED, cause=JobRunCause.abandoned)
    ]
    assert script.inputs("fan_out") == [p.FanOutInput(job_run_id=run_id)]
    assert finished(script).state is WantState.canceled


# Continue-as-new -------------------------------------------------------------------------------------


async def test_long_history_continues_as_new_carrying_its_state(
    env: WorkflowEnvironment, script: Script, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The want module passes through the sandbox, so the worker sees the lowered limit.
    monkeypatch.setattr(workflows.want, "HISTORY_LIMIT", 10)
    runner = SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules("workflows.want")
    )
    start = await env.get_current_time()
    spec = new_spec(data_timestamp=start - timedelta(days=1), sla=timedelta(hours=1))
    script.then("decide", blocked_decision([spec.ref]), live_decision("i-9"))
    async with harnessed(env, script, runner) as h:
        handle = await h.start_want(spec)
        await h.env.sleep(WATCHDOG)
        await script.called("watch")
        await until_progress(handle, lambda progress: progress.sla_missed)
        await handle.signal(p.SIGNAL_REDECIDE, redecide_notice(spec.ref))

        # The test server's long poll for a result does not wake at a continue-as-new: ask the latest
        # run for it once the want has finished.
        await script.called("finish_want")
        latest = h.client.get_workflow_handle_for(WantWorkflow.run, spec.workflow_id)
        result = await latest.result()

        assert (result.state, result.instance_id, result.sla_missed) == (WantState.successful, "i-9", True)
        first_run = h.client.get_workflow_handle(spec.workflow_id, run_id=handle.first_execution_run_id)
        assert (await first_run.describe()).status is WorkflowExecutionStatus.CONTINUED_AS_NEW
        assert (await latest.describe()).run_id != handle.first_execution_run_id
    # Registered once, the SLA miss recorded once, and the decision steps go on counting.
    assert len(script.inputs("register_want")) == 1
    assert len(script.inputs("record_sla_missed")) == 1
    assert [i.seq for i in script.inputs("decide")] == [1, 2]


# Job runs --------------------------------------------------------------------------------------------


async def test_job_run_succeeds_and_tells_the_wants(h: Harness, script: Script) -> None:
    run_id = new_run_id()

    outcome = await (await h.start_job_run(job_run_input(run_id, ["out/a"]))).result()

    assert outcome == p.JobOutcome(job_run_id=run_id, state=JobRunState.succeeded)
    assert script.names() == ["run_job", "fan_out_first", "fan_out"]


@pytest.mark.parametrize("first", ["all", "a page of more"])
async def test_a_run_tells_its_first_page_of_wants_locally_and_the_rest_from_the_cursor(
    h: Harness, script: Script, first: str
) -> None:
    run_id = new_run_id()
    done = first == "all"
    script.then("fan_out_first", p.FanOutResult(heard=200, after_id=7, done=done))

    outcome = await (await h.start_job_run(job_run_input(run_id, ["out/a"]))).result()

    assert outcome.state is JobRunState.succeeded
    assert script.inputs("fan_out_first") == [p.FanOutInput(job_run_id=run_id)]
    # A run with few wants tells them without a second activity; a longer fan-out goes on after the page.
    assert script.inputs("fan_out") == ([] if done else [p.FanOutInput(job_run_id=run_id, after_id=7)])


@pytest.mark.parametrize("failing", [False, True], ids=["first page", "its first page failing"])
async def test_a_run_whose_job_told_its_wants_fans_out_after_them(
    h: Harness, script: Script, failing: bool
) -> None:
    run_id = new_run_id()
    told = p.JobOutcome(job_run_id=run_id, state=JobRunState.succeeded, told_after_id=12)
    script.then("run_job", told)
    if failing:
        script.always("fan_out_first", fails("database down", "OperationalError"))
    else:
        script.then("fan_out_first", p.FanOutResult(heard=0, after_id=12, done=True))

    outcome = await (await h.start_job_run(job_run_input(run_id, ["out/a"]))).result()

    assert outcome == told
    resumed = p.FanOutInput(job_run_id=run_id, after_id=12)  # nobody is told twice
    assert set(script.inputs("fan_out_first")) == {resumed}
    assert script.inputs("fan_out") == ([resumed] if failing else [])


async def test_a_run_whose_job_fanned_out_leaves_nothing_to_its_workflow(h: Harness, script: Script) -> None:
    run_id = new_run_id()
    done = p.JobOutcome(job_run_id=run_id, state=JobRunState.succeeded, told_after_id=3, fanned_out=True)
    script.then("run_job", done)

    outcome = await (await h.start_job_run(job_run_input(run_id, ["out/a"]))).result()

    assert outcome == done
    assert script.names() == ["run_job"]  # no fan-out: its job told every want and did what follows


async def test_a_failing_first_page_leaves_the_whole_fan_out_to_the_activity(
    h: Harness, script: Script
) -> None:
    run_id = new_run_id()
    script.always("fan_out_first", fails("database down", "OperationalError"))

    outcome = await (await h.start_job_run(job_run_input(run_id, ["out/a"]))).result()

    assert outcome.state is JobRunState.succeeded
    assert len(script.inputs("fan_out_first")) == 3  # its attempts
    assert script.inputs("fan_out") == [p.FanOutInput(job_run_id=run_id)]


@pytest.mark.parametrize(
    ("error_type", "non_retryable", "attempts_made"),
    [("SparkError", False, 2), ("JobContractError", True, 1)],
    ids=["retried", "not retryable"],
)
async def test_job_run_failing_beyond_its_retries_records_the_failure(
    h: Harness, script: Script, error_type: str, non_retryable: bool, attempts_made: int
) -> None:
    run_id = new_run_id()
    script.always("run_job", fails("executor lost", error_type, non_retryable=non_retryable))

    outcome = await (await h.start_job_run(job_run_input(run_id, ["out/a"], attempts=2))).result()

    reason = f"{error_type}: executor lost"
    assert (outcome.state, outcome.cause, outcome.reason) == (JobRunState.failed, JobRunCause.error, reason)
    assert len(script.inputs("run_job")) == attempts_made
    assert script.inputs("fail_job_run") == [
        p.FailJobRunInput(job_run_id=run_id, reason=reason, cause=JobRunCause.error)
    ]
    assert script.inputs("fan_out") == [p.FanOutInput(job_run_id=run_id)]


async def test_a_batch_run_waits_its_window_then_for_a_pool_slot(h: Harness, script: Script) -> None:
    run_id = new_run_id()
    script.then("request_admission", False)  # the pool is full: it waits in line
    admission = p.Admission(window=timedelta(minutes=5), pools={"etl": 2})

    handle = await h.start_job_run(job_run_input(run_id, ["out/a"], admission=admission))
    await script.called("batch_is_full")  # not yet: it waits up to its window for more partitions
    await handle.signal(p.SIGNAL_BATCH_FULL)  # the last partition with room joined
    await script.called("await_admission")  # its own watch, in case the wake-up is lost
    assert "run_job" not in script.names()
    await handle.signal(p.SIGNAL_ADMITTED)  # the run that freed a slot gave it this one
    outcome = await handle.result()

    assert outcome.state is JobRunState.succeeded
    request = p.AdmissionInput(job_run_id=run_id, pools={"etl": 2})
    assert script.inputs("batch_is_full") == [request]
    assert script.inputs("request_admission") == [request, request]
    assert script.names()[-3:] == ["run_job", "fan_out_first", "fan_out"]


async def test_a_run_abandoned_while_it_waits_for_a_slot_never_runs(h: Harness, script: Script) -> None:
    run_id = new_run_id()
    script.always("request_admission", False)

    handle = await h.start_job_run(job_run_input(run_id, ["out/a"], admission=p.Admission(pools={"etl": 1})))
    await script.called("request_admission")
    await handle.signal(p.SIGNAL_ABANDON)
    outcome = await handle.result()

    assert (outcome.state, outcome.cause) == (JobRunCause.abandoned.state, JobRunCause.abandoned)
    assert "run_job" not in script.names()
    assert script.inputs("fail_job_run")[0].cause is JobRunCause.abandoned


async def test_job_run_dep_miss_is_an_outcome_not_a_failure(h: Harness, script: Script) -> None:
    run_id = new_run_id()
    script.then("run_job", job_dep_miss(["in/a"]))

    outcome = await (await h.start_job_run(job_run_input(run_id, ["out/a"]))).result()

    assert (outcome.state, outcome.missing) == (JobRunState.dep_miss, ["in/a"])
    assert script.names() == ["run_job", "fan_out_first", "fan_out"]


async def test_canceled_job_run_stops_its_job_and_tells_the_wants(h: Harness, script: Script) -> None:
    run_id, job = new_run_id(), Held()
    script.then("run_job", job)
    handle = await h.start_job_run(job_run_input(run_id, ["out/a"]))
    await script.called("run_job")

    await handle.cancel()

    assert isinstance(await failure_of(handle), CancelledError)
    assert job.cancelled
    assert script.inputs("fail_job_run") == [
        p.FailJobRunInput(job_run_id=run_id, reason=CANCELED, cause=JobRunCause.cancelled)
    ]
    assert script.inputs("fan_out") == [p.FanOutInput(job_run_id=run_id)]


async def test_abandoned_job_run_stops_its_job_and_releases_its_outputs(h: Harness, script: Script) -> None:
    run_id, job = new_run_id(), Held()
    script.then("run_job", job)
    handle = await h.start_job_run(job_run_input(run_id, ["out/a"]))
    await script.called("run_job")

    await handle.signal(p.SIGNAL_ABANDON)

    outcome = await handle.result()
    assert (outcome.state, outcome.cause, outcome.reason) == (
        JobRunState.cancelled,
        JobRunCause.abandoned,
        ABANDONED,
    )
    assert job.cancelled
    assert script.inputs("fail_job_run") == [
        p.FailJobRunInput(job_run_id=run_id, reason=ABANDONED, cause=JobRunCause.abandoned)
    ]
    assert script.inputs("fan_out") == [p.FanOutInput(job_run_id=run_id)]
