"""A want: a durable promise to get one partition built, with SLA and TTL timers."""

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from temporalio import workflow
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    FailureError,
    WorkflowAlreadyStartedError,
    is_cancelled_exception,
)
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    # Imported once and shared by every run, not again into each run's sandbox (cheaper starts).
    from activities.wants import WantActivities
    from databuild.domain.decisions import DependenciesStatus, Final, Live, Paused, WaitExternal
    from databuild.models import WantSource, WantSpec, WantState, job_run_workflow_id
    from databuild.temporal import protocol as p
    from databuild.temporal.job_runs import job_run_search_attributes, job_run_summary
    from workflows.calls import BEL_RETRY, BEL_TIMEOUT, bel, failure_message, remote, watch
    from workflows.changes import (
        FINISH_AFTER_RUN,
        FIRST_STEP_REGISTERS,
        RUN_STARTED_BY_DECISION,
        WATCH_AFTER_TIMER,
        patched,
    )
    from workflows.job_run import JobRunWorkflow  # its module keeps no state: one copy serves every run

# Its end follows its fan-out's first page within milliseconds, unless more wants wait on it than a page or the
# machine is loaded; the want's outcome is recorded before this wait either way.
RUN_ENDING_GRACE = timedelta(seconds=5)

Following = p.ExecuteOrder | p.DelegateOrder
Outcome = tuple[WantState, str | None, str | None]  # state, reason, instance id

# A run continues as new at its next decision once its history is this long (or the server suggests
# it), far below Temporal's 51,200-event limit: waiting adds no events, deciding and signals do.
HISTORY_LIMIT = 2_000


def ttl_reason(spec: WantSpec) -> str:
    return f"TTL passed at {spec.ttl_deadline:%Y-%m-%d %H:%M}Z"


def replaced_by(error: BaseException) -> int | None:
    """The want's opening now, if ``error`` says this run's write was refused because a retry replaced it
    (``WantReplacedError``, from a local activity bare or from an activity wrapped)."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, ApplicationError) and cause.type == "WantReplacedError" and cause.details:
            return int(cause.details[0])
        cause = cause.__cause__
    return None


@workflow.defn(name=p.WANT_WORKFLOW)
class WantWorkflow:
    @workflow.init
    def __init__(self, input: p.WantInput) -> None:
        self._spec = input.spec
        self._version = input.version
        # Built before any signal of this run is handled, so signals land on what the last run knew.
        self._memory = input.carried or p.WantMemory()
        self._children: dict[str, workflow.ChildWorkflowHandle[Any, Any]] = {}  # runs this run started
        self._sla_timer: asyncio.Task[None] | None = None
        self._registering = False  # its first step records the want too (``first_step``)
        self._opening = input.opening
        if input.ending is not None:  # the run only records how the one before it ended, as it was then
            ending = input.ending
            self._memory = p.WantMemory(state=ending.was, job_run_id=ending.job_run_id)

    @workflow.run
    async def run(self, input: p.WantInput) -> p.WantResult:
        try:
            return await self._serve(input)
        except (ActivityError, ApplicationError) as error:
            opening = replaced_by(error)
            if opening is None:
                raise
        # A retry reopened the want since this run started, and a newer run serves it: a write of this one
        # was refused. Where this run still goes on (the retry attached to it, which a start for the old
        # opening that raced the retry leaves), it carries on as the want's new opening, from the BEL.
        workflow.logger.info(
            "want %s was reopened (opening %s): carrying on as it", self._spec.want_id, opening
        )
        workflow.continue_as_new(p.WantInput(spec=self._spec, opening=opening, version=p.WORKFLOW_VERSION))

    async def _serve(self, input: p.WantInput) -> p.WantResult:
        if input.ending is not None:
            return await self._finish(input.ending.state, input.ending.reason, input.ending.instance_id)
        spec = self._spec
        fulfil: asyncio.Task[Outcome | None] | None = None
        try:
            if input.carried is None:
                # A want that requires external partitions waits for them before its first decision.
                self._registering = not spec.requires and patched(FIRST_STEP_REGISTERS, self._version)
                if not self._registering:
                    self._memory.seq = await bel(WantActivities.register_want, input)
            if not self._registering:
                self._arm_sla()
            fulfil = asyncio.create_task(self._fulfil())
            outcome = await self._within_ttl(fulfil)
        except asyncio.CancelledError:
            await self._stop_fulfilling(fulfil, "canceled")
            await self._finish(WantState.canceled, "canceled on request", None)
            raise
        finally:
            if self._sla_timer is not None:
                self._sla_timer.cancel()
        if outcome is None:  # signal handlers are synchronous: nothing is left to finish
            workflow.continue_as_new(
                p.WantInput(
                    spec=spec, carried=self._memory, version=p.WORKFLOW_VERSION, opening=self._opening
                )
            )
        return await self._finish(*outcome)

    def _arm_sla(self) -> None:
        """Watch the SLA deadline (once the want is recorded: the watch reads it)."""
        if self._spec.sla_deadline and not self._memory.sla_missed:
            self._sla_timer = asyncio.create_task(self._watch_sla(self._spec.sla_deadline))

    async def _step(self) -> p.Decision:
        """The want's next decision; a new run's first records the want too, in the same local activity."""
        m = self._memory
        if self._registering:
            first = await bel(WantActivities.first_step, self._registration())
            self._registering = False
            m.seq = first.seq
            self._arm_sla()
            return first.decision
        m.seq += 1
        return await bel(WantActivities.decide, self._decide_input(m.seq))

    def _history_is_long(self) -> bool:
        info = workflow.info()
        return info.is_continue_as_new_suggested() or info.get_current_history_length() >= HISTORY_LIMIT

    async def _within_ttl(self, fulfil: "asyncio.Task[Outcome | None]") -> Outcome | None:
        remaining = self._until(self._spec.ttl_deadline)
        try:
            if remaining is not None and remaining <= 0:
                raise TimeoutError
            await workflow.wait_condition(fulfil.done, timeout=remaining)
        except TimeoutError:
            await self._stop_fulfilling(fulfil, "expired")
            return WantState.expired, ttl_reason(self._spec), None
        return fulfil.result()

    async def _stop_fulfilling(self, fulfil: "asyncio.Task[Outcome | None] | None", why: str) -> None:
        """Let the current step finish rather than cancel it: a decision the BEL has committed must
        be followed through (its job run started), or its build lock would be orphaned."""
        self._memory.stopping = why
        if fulfil is not None and not fulfil.done():
            await fulfil

    async def _fulfil(self) -> Outcome | None:
        """The want's outcome; None when this run should continue as new (between two decisions)."""
        spec, m = self._spec, self._memory
        if spec.requires and not m.requirements_met:
            await self._await_requirements()
        while not m.stopping:
            if m.paused:  # its backfill is paused: a run it already follows goes on, nothing new starts
                self._set(m.state, m.job_run_id, [], "paused with its backfill")
                await self._wait(lambda: not m.paused)
                continue
            if self._history_is_long():
                return None
            redecides = m.redecides  # a redecide signal from now on means: decide again
            resumes = m.resumes
            heard = frozenset(m.live) | frozenset(m.failed_refs)  # news of inputs from before this step
            try:
                decision = await self._step()
            # e.g. the graph no longer produces this ref. A local activity's failure arrives as the bare
            # ApplicationError (a regular activity's as an ActivityError around it).
            except (ActivityError, ApplicationError) as error:
                if replaced_by(error) is not None:
                    raise
                return WantState.failed, failure_message(error), None

            def redecide(seen: int = redecides) -> bool:
                return m.redecides != seen

            match decision:
                case Final():
                    return decision.final_state, decision.reason, decision.instance_id
                case Paused():  # a paused backfill reaches it, with no signal (e.g. derived after the pause)
                    m.paused = m.resumes == resumes
                case Live():
                    return WantState.successful, None, decision.instance_id
                case WaitExternal():
                    self._set(
                        WantState.upstream_building, None, [spec.ref], "waiting for an external publish of"
                    )
                    await self._wait(lambda: spec.ref in m.live or redecide())
                case p.BlockedOrder():
                    self._set(WantState.upstream_building, None, decision.blocked_refs, decision.reason)
                    # Woken by `resolve`/`skip`; the watch covers a signal that never came.
                    what = p.WatchInput(blocked_refs=decision.blocked_refs)
                    await self._wait_watching(
                        lambda: spec.ref in m.live or redecide(), what, decision.watchdog
                    )
                case p.NeedsInputsOrder():
                    failure = await self._await_inputs(None, decision.missing, decision.status, heard)
                    if failure is not None:
                        return self._inputs_failed(failure)
                case p.ExecuteOrder() | p.DelegateOrder():
                    outcome = await self._follow_run(decision, redecide)
                    if outcome is not None:
                        return outcome
            if spec.ref in m.live:
                return WantState.successful, None, m.live[spec.ref]
        return WantState.canceled, f"stopped: {m.stopping}", None

    def _decide_input(self, seq: int) -> p.DecideInput:
        if not patched(RUN_STARTED_BY_DECISION, self._version):
            return p.DecideInput(want_id=self._spec.want_id, seq=seq, opening=self._opening)
        return p.DecideInput.starting_runs(self._spec, seq, self._opening)

    def _registration(self) -> p.WantInput:
        """What the activities that record the want are given."""
        return p.WantInput(spec=self._spec, version=self._version, opening=self._opening)

    async def _follow_run(self, decision: Following, redecide: Callable[[], bool]) -> Outcome | None:
        """Wait for the job run the want executes or delegated to. None means: decide again."""
        ref, m = self._spec.ref, self._memory
        job_run_id = decision.job_run_id
        if isinstance(decision, p.ExecuteOrder) and job_run_id not in m.started:
            m.started.append(job_run_id)  # a decision can be given again (redecide): start it once
            if not decision.started:
                await self._start_job_run(decision)
        verb = "building" if isinstance(decision, p.ExecuteOrder) else "delegated to active build"
        self._set(WantState.building, job_run_id, [ref], f"{verb} {job_run_id} for")
        settled = partial(self._run_settled, ref, job_run_id)
        # Signals wake the want; the watch only guards against a run that ended unheard or is gone.
        what = p.WatchInput(job_run_id=job_run_id)
        if not await self._wait_watching(lambda: settled() or redecide(), what, decision.watchdog):
            return None
        if ref in m.live:
            return WantState.successful, None, m.live[ref]
        if job_run_id in m.failed_runs:
            return WantState.failed, f"job run {job_run_id} failed: {m.failed_runs[job_run_id]}", None
        if job_run_id not in m.dep_missed:
            return None  # told to decide again, or stopping
        failure = await self._await_inputs(job_run_id, m.dep_missed[job_run_id])
        return None if failure is None else self._inputs_failed(failure)

    def _inputs_failed(self, failure: str) -> Outcome:
        if self._until(self._spec.ttl_deadline) == 0:
            return WantState.expired, ttl_reason(self._spec), None  # its inputs expired with it
        return WantState.failed, failure, None

    async def _wait(self, condition: Callable[[], bool], within: timedelta | None = None) -> bool:
        """Wait until ``condition`` holds or the want is stopping; False if ``within`` passed first."""
        try:
            await workflow.wait_condition(lambda: condition() or bool(self._memory.stopping), timeout=within)
        except TimeoutError:
            return False
        return True

    async def _wait_watching(
        self, condition: Callable[[], bool], what: p.WatchInput, every: timedelta
    ) -> bool:
        """Wait until ``condition`` holds or the want is stopping, with the watch activity looking out
        for what no signal reports; False if the watch saw it first (then the want decides again)."""
        if patched(WATCH_AFTER_TIMER, self._version):
            # Most waits end with their signal well within a lease: a timer waits that long first, so
            # such a want never has the watch dispatched to a worker (its first attempt only waited).
            if await self._wait(condition, within=every):
                return True
            what = what.model_copy(update={"look_at_once": True})
        watching = watch(WantActivities.watch, what, every)
        await self._wait(lambda: condition() or watching.done())
        if not watching.done():
            watching.add_done_callback(lambda task: task.cancelled() or task.exception())  # retrieved
            watching.cancel()
            return True
        if not watching.cancelled() and (error := watching.exception()) is not None:
            workflow.logger.warning("watch of %s ended with %s; deciding again", what, error)
        return condition() or bool(self._memory.stopping)

    def _run_settled(self, ref: str, job_run_id: str) -> bool:
        m = self._memory
        return ref in m.live or job_run_id in m.failed_runs or job_run_id in m.dep_missed

    async def _await_requirements(self) -> None:
        """Hold the job back until the external partitions the want requires are available."""
        spec, m = self._spec, self._memory
        status = await bel(
            WantActivities.await_requirements, p.RequirementsInput(want_id=spec.want_id, refs=spec.requires)
        )
        for ref in status.live:
            m.live.setdefault(ref, "")

        def available() -> bool:
            m.waiting_for = [r for r in spec.requires if r not in m.live]
            return not m.waiting_for

        if not available():
            self._set(
                WantState.upstream_building, None, m.waiting_for, "waiting for required external partitions"
            )
            await self._wait(available)
        m.requirements_met = not m.stopping

    async def _await_inputs(
        self,
        job_run_id: str | None,
        missing: list[str],
        started: DependenciesStatus | None = None,
        heard: frozenset[str] = frozenset(),
    ) -> str | None:
        """Start derivative wants for the missing inputs (of a dep-miss of ``job_run_id``, or declared by
        the job when it is None) and wait until all are live (or one fails). ``started``: the decision
        started them already and read how they stood, after the news in ``heard`` came."""
        m = self._memory
        why = f"{job_run_id} dep-missed" if job_run_id else "declared inputs are not live"
        self._set(WantState.upstream_building, job_run_id, missing, f"{why}; derivative wants build")
        # Only news from after the BEL was read counts: an input heard live earlier and tainted since must
        # be waited for again.
        for ref in missing if started is None else heard.intersection(missing):
            m.failed_refs.pop(ref, None)
            m.live.pop(ref, None)
        status = started
        if status is None:
            status = await remote(
                WantActivities.await_dependencies,
                p.DependenciesInput(
                    want_id=self._spec.want_id, job_run_id=job_run_id, missing=missing, opening=self._opening
                ),
            )
        for ref in status.live:
            m.live.setdefault(ref, "")
        m.failed_refs.update(status.failed)

        def settled() -> bool:
            m.waiting_for = [ref for ref in missing if ref not in m.live]
            return not m.waiting_for or any(ref in m.failed_refs for ref in missing)

        await self._wait(settled)
        failed = [ref for ref in missing if ref in m.failed_refs and ref not in m.live]
        if failed:
            return "input(s) failed to build: " + "; ".join(f"{ref}: {m.failed_refs[ref]}" for ref in failed)
        return None

    async def _start_job_run(self, decision: p.ExecuteOrder) -> None:
        spec = self._spec
        try:
            child = await workflow.start_child_workflow(
                JobRunWorkflow.run,
                decision.job_run_input(),
                id=job_run_workflow_id(decision.job_label, decision.job_run_id),
                # A job run serves every want delegated to it, so it outlives the want that queued it.
                parent_close_policy=ParentClosePolicy.ABANDON,
                # One workflow per job run, ever: an ended one is never started again.
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                static_summary=job_run_summary(decision),
                search_attributes=job_run_search_attributes(decision, spec.root_want_id or spec.want_id),
            )
            child.add_done_callback(lambda task: task.cancelled() or task.exception())  # retrieved
            self._children[decision.job_run_id] = child
        except WorkflowAlreadyStartedError:
            # Started by an earlier run of this want (one that died and was started again): follow it.
            workflow.logger.info("job run %s was started before; following it", decision.job_run_id)

    async def _watch_sla(self, deadline: datetime) -> None:
        # A derivative want shares its root's deadline: the root's estimate covers it, and alerts once.
        if self._spec.source is not WantSource.derivative:
            await self._watch_sla_risk(deadline)
        remaining = self._until(deadline)
        if remaining:
            await workflow.sleep(remaining)
        if self._memory.state.is_final:
            return
        await bel(
            WantActivities.record_sla_missed, p.SlaMissedInput(want_id=self._spec.want_id, deadline=deadline)
        )
        self._memory.sla_missed = True
        workflow.upsert_search_attributes([p.SA_SLA_MISSED.value_set(True)])
        self._describe()

    async def _watch_sla_risk(self, deadline: datetime) -> None:
        """Before the deadline: ask whether the want is predicted to miss it (which alerts once) each
        time its state changes, and when the estimate says it would pass the deadline if nothing moved."""
        m = self._memory
        while not m.sla_at_risk and not m.state.is_final:
            now = workflow.now()
            if now >= deadline:
                return
            assessment = await bel(
                WantActivities.assess_sla,
                p.AssessSlaInput(want_id=self._spec.want_id, deadline=deadline, now=now),
            )
            if assessment.at_risk:
                m.sla_at_risk = True
                self._describe()
                return
            look_again = min(assessment.check_at or deadline, deadline)
            within = timedelta(seconds=max(self._until(look_again) or 0, 1.0))

            def changed(seen: int = m.changes) -> bool:
                return m.changes != seen

            await self._wait(changed, within=within)

    async def _finish(self, state: WantState, reason: str | None, instance: str | None) -> p.WantResult:
        spec, m = self._spec, self._memory
        if self._registering:  # stopped before its first step (a cancel or an expired TTL at once)
            m.seq = await bel(WantActivities.register_want, self._registration())
            self._registering = False
        following = m.job_run_id if m.state is WantState.building else None
        interrupted = await self._record_finish(
            p.FinishInput(
                want_id=spec.want_id, state=state, reason=reason, instance_id=instance, opening=self._opening
            )
        )
        self._set(state, m.job_run_id, [], reason or "")
        if interrupted is not None:  # cancelled while recording another outcome: that one is shown too
            raise interrupted
        if following and state in (WantState.successful, WantState.failed):
            await self._let_run_end(following)
        if following and state in (WantState.canceled, WantState.expired):
            await self._abandon_build(following)
        result = p.WantResult(
            want_id=spec.want_id, state=state, sla_missed=m.sla_missed, reason=reason, instance_id=instance
        )
        if state is WantState.failed:
            raise ApplicationError(
                f"want {spec.ref} failed: {reason}", result, type="WantFailed", non_retryable=True
            )
        return result

    async def _let_run_end(self, job_run_id: str) -> None:
        """A run this want started tells its wants it ended, then ends. Completing the want before the
        run's end reaches it fails the workflow task (UnhandledCommand: an event came meanwhile), which
        Temporal then retries: one failed task in every such want's history. So the want waits a moment
        for the run to end (not for a long fan-out: at most ``RUN_ENDING_GRACE``). Runs at version 1 or
        later start their job run from the decision, no child, and never wait here; wants 0.1.0 started
        still do (the ``want-finish-after-run`` history replays only with this wait)."""
        child = self._children.get(job_run_id)
        if child is None or child.done() or not patched(FINISH_AFTER_RUN, self._version):
            return
        await self._wait(child.done, within=RUN_ENDING_GRACE)

    async def _record_finish(self, finish: p.FinishInput) -> asyncio.CancelledError | None:
        """Record the outcome whatever ends this run. The write is shielded, so a cancellation of the
        workflow cannot reach it; a write cancelled all the same (seen after a workflow task timed out
        under load) is made again. Returns a cancellation that came meanwhile, for the caller to raise."""
        interrupted: asyncio.CancelledError | None = None
        while True:
            write = workflow.start_local_activity_method(
                WantActivities.finish_want, finish, start_to_close_timeout=BEL_TIMEOUT, retry_policy=BEL_RETRY
            )
            while not write.done():
                try:
                    await asyncio.shield(write)
                except asyncio.CancelledError as cancel:
                    interrupted = cancel
                except ActivityError:
                    pass  # looked at below
            error = None if write.cancelled() else write.exception()
            if not write.cancelled() and error is None:
                break
            if error is not None and not is_cancelled_exception(error):
                raise error
            workflow.logger.warning("recording want %s %s was cancelled; again", finish.want_id, finish.state)
        return interrupted

    async def _abandon_build(self, job_run_id: str) -> None:
        """A want that stops while a run builds for it stops the run too, unless another want waits on
        it (checked after this want is recorded as ended, so two wants stopping together both see it)."""
        run = await bel(WantActivities.abandon_build, p.AbandonBuildInput(job_run_id=job_run_id))
        if run.workflow_id is not None:
            try:
                await workflow.get_external_workflow_handle(run.workflow_id).signal(p.SIGNAL_ABANDON)
            except FailureError as error:  # it ended meanwhile
                workflow.logger.info("job run %s not told it is abandoned: %s", job_run_id, error)

    def _until(self, deadline: datetime | None) -> float | None:
        if deadline is None:
            return None
        return max((deadline - workflow.now()).total_seconds(), 0.0)

    def _set(self, state: WantState, job_run_id: str | None, waiting_for: list[str], note: str) -> None:
        m = self._memory
        if state is not m.state:
            workflow.upsert_search_attributes([p.SA_WANT_STATE.value_set(state.value)])
        if (state, job_run_id, waiting_for) != (m.state, m.job_run_id, m.waiting_for):
            m.changes += 1  # the SLA estimate is worth another look
        m.state, m.job_run_id, m.waiting_for, m.note = state, job_run_id, waiting_for, note
        self._describe()

    def _describe(self) -> None:
        m = self._memory
        flag = "  ⚠ SLA missed" if m.sla_missed else "  ⚠ SLA at risk" if m.sla_at_risk else ""
        lines = [f"**{m.state.value}**" + flag]
        if m.waiting_for:
            shown = ", ".join(f"`{r}`" for r in m.waiting_for[:10])
            more = f" (+{len(m.waiting_for) - 10} more)" if len(m.waiting_for) > 10 else ""
            lines.append(f"{m.note}: {shown}{more}")
        elif m.note:
            lines.append(m.note)
        workflow.set_current_details("\n\n".join(lines))

    @workflow.signal(name=p.SIGNAL_PARTITION_AVAILABLE)
    def partition_available(self, notice: p.PartitionAvailable) -> None:
        self._memory.live[notice.ref] = notice.instance_id

    @workflow.signal(name=p.SIGNAL_PARTITION_FAILED)
    def partition_failed(self, notice: p.PartitionFailedNotice) -> None:
        self._memory.failed_runs[notice.job_run_id] = notice.reason
        self._memory.failed_refs[notice.ref] = notice.reason

    @workflow.signal(name=p.SIGNAL_REDECIDE)
    def redecide(self, _notice: p.RedecideNotice) -> None:
        self._memory.redecides += 1

    @workflow.signal(name=p.SIGNAL_PAUSE)
    def pause(self) -> None:
        self._memory.paused = True

    @workflow.signal(name=p.SIGNAL_RESUME)
    def resume(self) -> None:
        self._memory.paused = False
        self._memory.resumes += 1

    @workflow.signal(name=p.SIGNAL_DEP_MISS)
    def dep_miss(self, notice: p.DepMissNotice) -> None:
        self._memory.dep_missed[notice.job_run_id] = notice.missing

    @workflow.query(name=p.QUERY_PROGRESS)
    def progress(self) -> p.WantProgress:
        m = self._memory
        return p.WantProgress(
            want_id=self._spec.want_id,
            ref=self._spec.ref,
            state=m.state,
            job_run_id=m.job_run_id,
            waiting_for=m.waiting_for,
            sla_missed=m.sla_missed,
        )
