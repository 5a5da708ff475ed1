"""Scripted doubles of the activities the want and job run workflows call, for fast workflow tests on
the time-skipping server (tests/test_workflows.py). The workflows are the real ones; each activity
answers what the test scripted for it and records what it was asked.

The activities' answers are built only here (``live_decision``, ``job_succeeded`` ...), so a change
of the protocol is adapted in one place. An activity asked for what nobody scripted (``decide``) fails
non-retryably, naming the call."""

import asyncio
import inspect
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from activities.errors import application_error
from databuild.domain.decisions import DependenciesStatus, Final, Live, Paused, WaitExternal
from databuild.errors import WantReplacedError
from databuild.models import JobRunState, WantState
from databuild.temporal import protocol as p
from databuild.temporal.job_runs import start_job_run

WAIT = 10.0  # seconds a test waits for a workflow to get somewhere: everything here takes well under one

# An answer is a value to return, an exception to raise, or a function of the activity's input that
# returns (or raises) one, sync or async.
Answer = Any


@dataclass(frozen=True)
class Call:
    name: str
    input: Any


class Script:
    """Answers for the activities, per name: the queued ones first, one per call, then the default.
    Every call is recorded, in order, with its input."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._queued: dict[str, deque[Answer]] = defaultdict(deque)
        self._defaults: dict[str, Answer] = dict(DEFAULTS)
        self._changed = asyncio.Condition()
        self.client: Client | None = None  # given, ``decide`` starts the runs it is asked to, as the real one

    def then(self, name: str, *answers: Answer) -> "Script":
        """The answers to the next calls of ``name``, in order; after them the default answers."""
        self._queued[name].extend(answers)
        return self

    def always(self, name: str, answer: Answer) -> "Script":
        self._defaults[name] = answer
        return self

    def names(self) -> list[str]:
        return [call.name for call in self.calls]

    def inputs(self, name: str) -> list[Any]:
        return [call.input for call in self.calls if call.name == name]

    async def called(self, name: str, times: int = 1) -> Any:
        """Wait (up to ``WAIT`` seconds) until ``name`` was called ``times`` times; the input of that call."""
        async with asyncio.timeout(WAIT), self._changed:
            await self._changed.wait_for(lambda: len(self.inputs(name)) >= times)
        return self.inputs(name)[times - 1]

    async def answer(self, name: str, input: Any) -> Any:
        async with self._changed:
            self.calls.append(Call(name, input))
            self._changed.notify_all()
        queued = self._queued[name]
        answer = queued.popleft() if queued else self._defaults[name]
        if callable(answer) and not isinstance(answer, type):
            answer = answer(input)
            if inspect.isawaitable(answer):
                answer = await answer
        if isinstance(answer, BaseException):
            raise answer
        return answer

    # The doubles, typed like the real activities so the data converter builds their inputs.
    @activity.defn
    async def register_want(self, input: p.WantInput) -> int:
        result: int = await self.answer("register_want", input)
        return result

    @activity.defn
    async def decide(self, input: p.DecideInput) -> p.Decision:
        result: p.Decision = await self.answer("decide", input)
        if isinstance(result, p.ExecuteOrder) and input.start_run and self.client is not None:
            root = input.root_want_id or input.want_id
            await start_job_run(self.client, activity.info().task_queue, result, input.want_id, root)
            return result.model_copy(update={"started": True})
        return result

    @activity.defn
    async def first_step(self, input: p.WantInput) -> p.FirstStep:
        """As the real one: the want registered, then its first step decided (each recorded as its call)."""
        seq = await self.register_want(input) + 1
        decide = p.DecideInput.starting_runs(input.spec, seq, input.opening)
        return p.FirstStep(seq=seq, decision=await self.decide(decide))

    @activity.defn
    async def await_dependencies(self, input: p.DependenciesInput) -> DependenciesStatus:
        result: DependenciesStatus = await self.answer("await_dependencies", input)
        return result

    @activity.defn
    async def await_requirements(self, input: p.RequirementsInput) -> p.RequirementsStatus:
        result: p.RequirementsStatus = await self.answer("await_requirements", input)
        return result

    @activity.defn
    async def finish_want(self, input: p.FinishInput) -> None:
        await self.answer("finish_want", input)

    @activity.defn
    async def record_sla_missed(self, input: p.SlaMissedInput) -> None:
        await self.answer("record_sla_missed", input)

    @activity.defn
    async def assess_sla(self, input: p.AssessSlaInput) -> p.SlaAssessment:
        result: p.SlaAssessment = await self.answer("assess_sla", input)
        return result

    @activity.defn
    async def watch(self, input: p.WatchInput) -> None:
        await self.answer("watch", input)

    @activity.defn
    async def abandon_build(self, input: p.AbandonBuildInput) -> p.AbandonBuildResult:
        result: p.AbandonBuildResult = await self.answer("abandon_build", input)
        return result

    @activity.defn
    async def run_job(self, input: p.JobRunInput) -> p.JobOutcome:
        result: p.JobOutcome = await self.answer("run_job", input)
        return result

    @activity.defn
    async def request_admission(self, input: p.AdmissionInput) -> bool:
        result: bool = await self.answer("request_admission", input)
        return result

    @activity.defn
    async def batch_is_full(self, input: p.AdmissionInput) -> bool:
        result: bool = await self.answer("batch_is_full", input)
        return result

    @activity.defn
    async def await_admission(self, input: p.AdmissionInput) -> None:
        await self.answer("await_admission", input)

    @activity.defn
    async def fail_job_run(self, input: p.FailJobRunInput) -> None:
        await self.answer("fail_job_run", input)

    @activity.defn
    async def fan_out(self, input: p.FanOutInput) -> int:
        result: int = await self.answer("fan_out", input)
        return result

    @activity.defn
    async def fan_out_first(self, input: p.FanOutInput) -> p.FanOutResult:
        result: p.FanOutResult = await self.answer("fan_out_first", input)
        return result

    def activities(self) -> list[Callable[..., Any]]:
        return [
            self.register_want,
            self.first_step,
            self.decide,
            self.await_dependencies,
            self.await_requirements,
            self.finish_want,
            self.record_sla_missed,
            self.assess_sla,
            self.watch,
            self.abandon_build,
            self.run_job,
            self.request_admission,
            self.batch_is_full,
            self.await_admission,
            self.fail_job_run,
            self.fan_out,
            self.fan_out_first,
        ]


# Answers -------------------------------------------------------------------------------------------
WATCHDOG = timedelta(hours=1)  # how often a waiting want's watch looks (virtual time)
JOB_LABEL = "job"


def policy(attempts: int = 1) -> p.JobPolicy:
    return p.JobPolicy(
        heartbeat_timeout=timedelta(seconds=10),
        start_to_close_timeout=timedelta(minutes=10),
        attempts=attempts,
    )


def live_decision(instance_id: str) -> Live:
    return Live(instance_id=instance_id)


def execute_decision(
    job_run_id: str, outputs: list[str], job_label: str = JOB_LABEL, attempts: int = 1
) -> p.ExecuteOrder:
    return p.ExecuteOrder(
        job_run_id=job_run_id,
        job_label=job_label,
        outputs=outputs,
        params={},
        policy=policy(attempts),
        watchdog=WATCHDOG,
    )


def delegate_decision(job_run_id: str, outputs: list[str], job_label: str = JOB_LABEL) -> p.DelegateOrder:
    return p.DelegateOrder(
        job_run_id=job_run_id, job_label=job_label, outputs=outputs, params={}, watchdog=WATCHDOG
    )


def needs_inputs(missing: list[str], started: DependenciesStatus | None = None) -> p.NeedsInputsOrder:
    """Inputs the job declares are missing; ``started``: the decision started their wants (more than
    ``DERIVATIVES_IN_DECISION`` are left to the ``await_dependencies`` activity: None)."""
    return p.NeedsInputsOrder(missing=missing, status=started)


def wait_external_decision() -> WaitExternal:
    return WaitExternal()


def paused_decision() -> Paused:
    return Paused()


def blocked_decision(refs: list[str], reason: str = "fail-locked") -> p.BlockedOrder:
    return p.BlockedOrder(blocked_refs=refs, reason=reason, watchdog=WATCHDOG)


def final_decision(state: WantState, reason: str) -> Final:
    return Final(final_state=state, reason=reason)


def job_run_input(
    job_run_id: str, outputs: list[str], attempts: int = 1, admission: p.Admission | None = None
) -> p.JobRunInput:
    return p.JobRunInput(
        job_run_id=job_run_id,
        job_label=JOB_LABEL,
        outputs=outputs,
        params={},
        policy=policy(attempts),
        admission=admission,
        version=p.WORKFLOW_VERSION,
    )


def job_succeeded(input: p.JobRunInput) -> p.JobOutcome:
    return p.JobOutcome(job_run_id=input.job_run_id, state=JobRunState.succeeded)


def job_dep_miss(missing: list[str]) -> Callable[[p.JobRunInput], p.JobOutcome]:
    def outcome(input: p.JobRunInput) -> p.JobOutcome:
        return p.JobOutcome(job_run_id=input.job_run_id, state=JobRunState.dep_miss, missing=missing)

    return outcome


def dependencies(live: list[str] | None = None, failed: dict[str, str] | None = None) -> DependenciesStatus:
    return DependenciesStatus(live=live or [], failed=failed or {})


def available(ref: str, instance_id: str, job_run_id: str | None = None) -> p.PartitionAvailable:
    return p.PartitionAvailable(ref=ref, instance_id=instance_id, job_run_id=job_run_id)


def failed_notice(ref: str, job_run_id: str, reason: str) -> p.PartitionFailedNotice:
    return p.PartitionFailedNotice(ref=ref, job_run_id=job_run_id, reason=reason)


def dep_miss_notice(job_run_id: str, missing: list[str]) -> p.DepMissNotice:
    return p.DepMissNotice(job_run_id=job_run_id, missing=missing)


def redecide_notice(ref: str, reason: str = "resolved") -> p.RedecideNotice:
    return p.RedecideNotice(ref=ref, reason=reason)


def sla_missed_input(want_id: str, deadline: datetime) -> p.SlaMissedInput:
    return p.SlaMissedInput(want_id=want_id, deadline=deadline)


def fails(message: str, type: str = "Boom", *, non_retryable: bool = False) -> ApplicationError:
    return ApplicationError(message, type=type, non_retryable=non_retryable)


def replaced(want_id: str, run_opening: int, opening: int) -> ApplicationError:
    """What a BEL write of a run that a retry replaced raises, as the worker's interceptor turns it."""
    return application_error(WantReplacedError(want_id, run_opening, opening))


def still_waiting(_input: object) -> ApplicationError:
    """What the real watch raises while nothing changed: the server retries it at the want's watchdog."""
    return ApplicationError("nothing changed", type="StillWaiting", category=ApplicationErrorCategory.BENIGN)


def signals(
    client: Client, workflow_id: str, signal: str, payload: object
) -> Callable[[object], Awaitable[int]]:
    """An answer (for ``fan_out``, say) that signals one workflow, as the real fan-out signals wants."""

    async def send(_input: object) -> int:
        await client.get_workflow_handle(workflow_id).signal(signal, payload)
        return 1

    return send


class Held:
    """An answer (for ``run_job``) that runs until the activity is cancelled, heartbeating as the real
    job activity does so the cancel reaches it."""

    def __init__(self) -> None:
        self.cancelled = False

    async def __call__(self, _input: object) -> object:
        try:
            while True:
                activity.heartbeat()
                await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            self.cancelled = True
            raise


def unscripted(name: str) -> Callable[[object], ApplicationError]:
    def refuse(input: object) -> ApplicationError:
        return ApplicationError(
            f"no answer scripted for {name}({input})", type="Unscripted", non_retryable=True
        )

    return refuse


DEFAULTS: dict[str, Answer] = {
    "register_want": 0,
    "decide": unscripted("decide"),
    "await_dependencies": dependencies(),
    "await_requirements": p.RequirementsStatus(live=[]),
    "finish_want": None,
    "record_sla_missed": None,
    "assess_sla": p.SlaAssessment(at_risk=False),
    "watch": still_waiting,
    "abandon_build": p.AbandonBuildResult(),
    "run_job": job_succeeded,
    "request_admission": True,
    "batch_is_full": False,
    "await_admission": still_waiting,
    "fail_job_run": None,
    "fan_out": 0,
    # The first page left the rest to ``fan_out`` (scripted above): a run's wants hear from it.
    "fan_out_first": p.FanOutResult(heard=0, after_id=0, done=False),
}
