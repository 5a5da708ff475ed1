"""BEL activities of the want workflow."""

import asyncio
from datetime import UTC, datetime, timedelta

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.service import RPCError, RPCStatusCode

from activities.alerts import raise_alert
from activities.heartbeats import heartbeating
from databuild.bel import BuildEventLog
from databuild.client import DataBuild
from databuild.config import Settings
from databuild.domain import alerts
from databuild.domain.decisions import (
    Blocked,
    Delegate,
    DependenciesStatus,
    Execute,
    NeedsInputs,
    Replaced,
    Verdict,
)
from databuild.domain.endings import Finished
from databuild.domain.pools import pools_of
from databuild.errors import WantReplacedError
from databuild.graph import Graph
from databuild.models import (
    JobRun,
    JobRunCause,
    PartitionStatus,
    Subscription,
    Want,
    WantSource,
    WantSpec,
    WantState,
    job_run_workflow_id,
    want_id_of_workflow,
)
from databuild.operations.sla import sla_estimate
from databuild.temporal import protocol as p
from databuild.temporal.job_runs import start_job_run
from databuild.temporal.wants import notify_subscribers, settle_closing_runs, signal_for_run, start_wants
from databuild.views.staleness import freshness

BENIGN = ApplicationErrorCategory.BENIGN  # retried, and logged at debug level only
# A decision that finds at most this many declared inputs missing starts their derivative wants itself, in
# its local activity; more are started by the heartbeating ``await_dependencies`` activity, which may take a
# while and survives a worker that dies meanwhile.
DERIVATIVES_IN_DECISION = 64


class WantActivities:
    def __init__(self, bel: BuildEventLog, graph: Graph, client: Client, settings: Settings) -> None:
        self.bel = bel
        self.graph = graph
        self.client = client
        self.settings = settings
        self.db = DataBuild(client, bel, graph, settings)  # registers wants as clients do

    @activity.defn
    async def register_want(self, input: p.WantInput) -> int:
        """Record the want (once) and return its last decision step, which is not 0 when this is a
        new run of a want whose workflow died (see ``start_want``)."""
        return await self.bel.call(self._register, input.spec)

    @activity.defn
    async def first_step(self, input: p.WantInput) -> p.FirstStep:
        """A new run's first step, in one local activity and one BEL transaction: the want recorded (once),
        then decided from the step after the last one recorded (not 1 for a new run of a want whose
        workflow died). A fresh want is recorded first: its decision judges what is recorded of it."""
        spec, lease = input.spec, self.settings.job_lease
        if spec.fresh:
            seq = await self.register_want(input) + 1
            decide = p.DecideInput.starting_runs(spec, seq, input.opening)
            verdict = await self.bel.call(self._decide, decide, lease)
        else:
            resolution = self.graph.resolve(spec.ref)  # the graph may no longer produce it: not retryable
            seq, verdict = await self.bel.call(
                self.bel.decisions.first_step, spec, resolution, lease, opening=input.opening
            )
            decide = p.DecideInput.starting_runs(spec, seq, input.opening)
        return p.FirstStep(seq=seq, decision=await self._order(decide, verdict))

    def _register(self, spec: WantSpec) -> int:
        self.bel.wants.register(spec)
        return self.bel.wants.decision_seq(spec.want_id)

    @activity.defn
    async def decide(self, input: p.DecideInput) -> p.Decision:
        """The want's next step: the BEL's verdict, plus how to run and watch a job run it follows.
        WantReplacedError for a run that a retry has replaced (nothing is recorded)."""
        lease = self.settings.job_lease
        return await self._order(input, await self.bel.call(self._decide, input, lease))

    async def _order(self, input: p.DecideInput, verdict: Verdict) -> p.Decision:
        """What the worker's settings add to the BEL's verdict, and what it starts at once: the run it
        queued, a few derivative wants."""
        lease = self.settings.job_lease
        match verdict:
            case Replaced():
                raise WantReplacedError(input.want_id, input.opening, verdict.opening)
            case Execute():
                policy = p.JobPolicy.of(self.graph.job_by_label(verdict.job_label), self.settings)
                order = p.ExecuteOrder(
                    **verdict.model_dump(), policy=policy, watchdog=lease, admission=self._admission(verdict)
                )
                if not input.start_run:
                    return order
                # The run's workflow on the want's task queue (a local activity's is its workflow's).
                root = input.root_want_id or input.want_id
                await start_job_run(self.client, activity.info().task_queue, order, input.want_id, root)
                return order.model_copy(update={"started": True})
            case Delegate():
                if verdict.batch_full:  # the batch need not wait for more partitions
                    await self._signal_run(verdict, p.SIGNAL_BATCH_FULL)
                return p.DelegateOrder(**verdict.model_dump(), watchdog=lease)
            case Blocked():
                return p.BlockedOrder(**verdict.model_dump(), watchdog=lease)
            case NeedsInputs() if len(verdict.missing) <= DERIVATIVES_IN_DECISION:
                # A few derivatives are started here: no activity task, and no workflow task for its end.
                status = await self._start_dependencies(
                    p.DependenciesInput(
                        want_id=input.want_id, job_run_id=None, missing=verdict.missing, opening=input.opening
                    )
                )
                return p.NeedsInputsOrder(missing=verdict.missing, status=status)
            case NeedsInputs():
                return p.NeedsInputsOrder(missing=verdict.missing)
        return verdict

    def _admission(self, run: Execute) -> p.Admission | None:
        """What the new run waits for before it starts: partitions to join its batch, pool slots."""
        job = self.graph.job_by_label(run.job_label)
        slots = pools_of(job, self.settings.pools)
        if job.batch is None and not slots:
            return None
        return p.Admission(window=self.settings.batch_window if job.batch else timedelta(0), pools=slots)

    async def _signal_run(self, run: Delegate, signal: str) -> None:
        """Best effort: the run's own timers do the same a little later."""
        handle = self.client.get_workflow_handle(job_run_workflow_id(run.job_label, run.job_run_id))
        try:
            await handle.signal(signal)
        except RPCError as error:  # not started yet, or ended
            activity.logger.debug("job run %s not signalled %s: %s", run.job_run_id, signal, error)

    def _decide(self, input: p.DecideInput, lease: timedelta) -> Verdict:
        want = self.bel.wants.get(input.want_id)
        resolution = self.graph.resolve(want.ref)  # the graph may no longer produce it: not retryable
        # A fresh want's partition is judged stale or not with this worker's job versions.
        fresh = None if want.state.is_final else freshness(self.bel, self.graph, want)
        return self.bel.decisions.decide(
            input.want_id, input.seq, resolution, lease, fresh, opening=input.opening
        )

    @activity.defn
    @heartbeating
    async def watch(self, input: p.WatchInput) -> None:
        """Completes once the waiting want should decide again: the run it follows ended (perhaps
        unheard) or was lost, or the refs it is blocked on are no longer fail-locked. Until then each
        attempt fails benignly (logged at debug level) and Temporal retries it. A want waits a lease on a
        timer before it starts the watch, which then looks at once (``look_at_once``); for a want started
        before that, the first attempt only schedules the first look, a lease later."""
        if activity.info().attempt == 1 and not input.look_at_once:
            raise ApplicationError("first look after a lease", type="StillWaiting", category=BENIGN)
        if input.job_run_id is not None:
            run = await self.bel.call(self.bel.job_runs.get, input.job_run_id)
            health = await self._build_health(run)
            told = bool(activity.info().heartbeat_details)  # by an earlier attempt of this watch
            if health is p.BuildHealth.ended and not told and await self._hear_ended(run):
                # The want settles from the notice and cancels this watch (completing it now would race
                # the want's own completion: a failed workflow task). Should the want not settle, the
                # next look completes, and it decides again.
                activity.heartbeat("told")
                raise ApplicationError(
                    f"told how job run {input.job_run_id} ended", type="StillWaiting", category=BENIGN
                )
            if health is not p.BuildHealth.alive:
                return
            waiting = f"job run {input.job_run_id} is still building"
        else:
            partitions = await self.bel.call(self.bel.partitions.by_ref, input.blocked_refs)
            locked = {part.ref for part in partitions if part.status is PartitionStatus.failed}
            if locked != set(input.blocked_refs):
                return
            waiting = f"{', '.join(input.blocked_refs)} still fail-locked"
        raise ApplicationError(waiting, type="StillWaiting", category=BENIGN)

    async def _hear_ended(self, run: JobRun) -> bool:
        """Tell this want how the run it follows ended, as the run will; False if there is nothing to
        tell it. The job tells its wants just after the commit that ends the run: without this, a watch
        that looked in between had its want decide again (recording a skipped run) just before the notice
        came, and fail a workflow task on it. Heard twice, a notice changes nothing."""
        workflow_id = activity.info().workflow_id
        if workflow_id is None:  # not a want's activity: nobody to tell
            return False
        signal_for = signal_for_run(run)
        subscriptions = await self.bel.call(
            self.bel.wants.subscriptions_of, want_id_of_workflow(workflow_id), run.outputs
        )
        notices = [signal for sub in subscriptions if (signal := signal_for(sub)) is not None]
        for name, notice in notices:
            await self.client.get_workflow_handle(workflow_id).signal(name, notice)
        return bool(notices)

    async def _build_health(self, run: JobRun) -> p.BuildHealth:
        """Is the job run a want waits on still alive? A run whose lease lapsed and whose workflow is
        closed or gone is abandoned: its outputs are released and every subscribed want is told to
        decide again."""
        if (
            run.cause is JobRunCause.lost
        ):  # released before (perhaps by an attempt of this activity): tell everyone again
            await notify_subscribers(self.client, self.bel, run.outputs, signal_for_run(run))
            return p.BuildHealth.lost
        if run.state.is_final:
            return p.BuildHealth.ended
        if not await self.bel.call(self.bel.pools.lease_expired, run.job_run_id):
            return p.BuildHealth.alive
        try:
            status = (await self.client.get_workflow_handle(run.workflow_id).describe()).status
        except RPCError as error:
            if error.status != RPCStatusCode.NOT_FOUND:
                raise
            status = None
        if status is WorkflowExecutionStatus.RUNNING:
            return p.BuildHealth.alive  # queued behind other work, or between attempts: not lost
        why = "no such workflow" if status is None else f"its workflow is {status.name.lower()}"
        reason = f"lost: {why} and its lease lapsed"
        await self.bel.call(self.bel.job_runs.abandon, run.job_run_id, reason)
        lost = await self.bel.call(self.bel.job_runs.get, run.job_run_id)
        await notify_subscribers(self.client, self.bel, lost.outputs, signal_for_run(lost))
        return p.BuildHealth.lost

    @activity.defn
    @heartbeating
    async def await_dependencies(self, input: p.DependenciesInput) -> DependenciesStatus:
        """Start (idempotently) a derivative want for each missing input; how the inputs stand."""
        return await self._start_dependencies(input)

    async def _start_dependencies(self, input: p.DependenciesInput) -> DependenciesStatus:
        status, derivatives, reopened = await self.bel.call(
            self.bel.wants.await_dependencies,
            input.want_id,
            input.job_run_id,
            input.missing,
            opening=input.opening,
        )
        # A reopened derivative's cancelled run may still be closing: let it close (or end it), so that
        # starting it makes a new run and does not attach to the closing one.
        await settle_closing_runs(self.client, [d.spec.workflow_id for d in reopened])
        await start_wants(self.client, derivatives, self.settings.task_queue, self.bel)
        # A derivative that only a paused backfill needed waits for a resume; this want may need it now.
        # Each decides again whether it is still paused (``databuild.domain.reach``).
        paused = bool(derivatives) and await self.bel.call(self.bel.backfills.any_paused)
        if paused:
            await asyncio.gather(*(self._resume(d.spec.workflow_id) for d in derivatives))
        return status

    async def _resume(self, workflow_id: str) -> None:
        try:
            await self.client.get_workflow_handle(workflow_id).signal(p.SIGNAL_RESUME)
        except RPCError as error:  # ended meanwhile
            activity.logger.debug("want %s not told to resume: %s", workflow_id, error)

    @activity.defn
    async def await_requirements(self, input: p.RequirementsInput) -> p.RequirementsStatus:
        live = await self.bel.call(self.bel.wants.await_requirements, input.want_id, input.refs)
        return p.RequirementsStatus(live=live)

    @activity.defn
    @heartbeating
    async def register_scheduled_want(self, input: p.ScheduledWantRequest) -> str:
        """A schedule's run: the want for its time, with source `schedule` (so re-runs are one want)."""
        spec = await self.db.want(  # e.g. a backfill past the TTL raises InvalidInputError: not retried
            input.ref,
            data_timestamp=input.data_timestamp,
            sla=input.sla,
            ttl=input.ttl,
            source=WantSource.schedule,
        )
        return spec.want_id

    @activity.defn
    async def abandon_build(self, input: p.AbandonBuildInput) -> p.AbandonBuildResult:
        """Asked by a want that was canceled or expired (and recorded so) while following a run: the
        run is abandoned if it is still going and no other want waits on it."""
        run = await self.bel.call(self.bel.job_runs.get, input.job_run_id)
        if run.state.is_final:
            return p.AbandonBuildResult()
        if await self.bel.call(self.bel.wants.waiting_on, run.job_run_id) > 0:
            return p.AbandonBuildResult()
        return p.AbandonBuildResult(workflow_id=run.workflow_id)

    @activity.defn
    async def finish_want(self, input: p.FinishInput) -> None:
        """Record how the want ended, and what follows (its dependents told, alerts). WantReplacedError
        for a run that a retry has replaced: its outcome is history, and nothing is recorded or told."""
        want, finished = await self.bel.call(
            self.bel.wants.finish,
            input.want_id,
            input.state,
            input.reason,
            input.instance_id,
            opening=input.opening,
        )
        if finished is Finished.stale:
            raise WantReplacedError(want.want_id, input.opening or 0, want.opening)
        if want.state is not WantState.successful and want.source is WantSource.derivative:
            await self._tell_dependents(want)
        elif want.source is WantSource.derivative and want.fresh and want.instance_id is not None:
            await self._tell_fresh_dependents(want, want.instance_id)
        at = datetime.now(UTC)
        # A derivative want's failure shows in its root's alert (and its job's fail-lock alert).
        if want.state is WantState.failed and want.source is not WantSource.derivative:
            alert = alerts.want_failed(want, self._job_label(want.ref), at)
            await raise_alert(self.client, self.settings, alert)
        if want.source is not WantSource.backfill:  # only a backfill's own wants belong to it
            return
        # Read after the commit: the finish of the backfill's last want sees every other one's.
        for progress in await self.bel.call(self.bel.backfills.finished_of, want.want_id):
            await raise_alert(self.client, self.settings, alerts.backfill_finished(progress, at))

    async def _tell_dependents(self, want: Want) -> None:
        """A derivative want that ended without its partition fails the wants waiting on it, at every
        level up: each parent that derived it (same ref and data time) gets a failure notice."""
        notice = p.PartitionFailedNotice(
            ref=want.ref,
            job_run_id=f"want:{want.want_id}",
            reason=f"derivative want {want.want_id} {want.state.value}: {want.reason or 'no reason given'}",
        )

        def signal(subscription: Subscription) -> tuple[str, object] | None:
            depends = subscription.want_ref != want.ref
            if depends and subscription.data_timestamp == want.data_timestamp:
                return p.SIGNAL_PARTITION_FAILED, notice
            return None

        await notify_subscribers(self.client, self.bel, [want.ref], signal)

    async def _tell_fresh_dependents(self, want: Want, instance_id: str) -> None:
        """The wants waiting on a fresh derivative that succeeded hear that its partition is available.
        Its partition was live when they subscribed, so unlike a usual input they count it live only once
        the derivative ends; one that accepted its partition (not stale, or rebuilt once) built nothing
        that would tell them. (One that built it tells them twice: a second notice changes nothing.)"""
        notice = p.PartitionAvailable(ref=want.ref, instance_id=instance_id)

        def signal(subscription: Subscription) -> tuple[str, object] | None:
            depends = subscription.want_ref != want.ref
            if depends and subscription.data_timestamp == want.data_timestamp:
                return p.SIGNAL_PARTITION_AVAILABLE, notice
            return None

        await notify_subscribers(self.client, self.bel, [want.ref], signal)

    @activity.defn
    async def record_sla_missed(self, input: p.SlaMissedInput) -> None:
        want = await self.bel.call(self.bel.wants.mark_sla_missed, input.want_id, input.deadline)
        at = input.deadline  # its timer fired then (workflow time)
        if want.source is WantSource.derivative:
            return  # its root's alert covers it (they share the deadline)
        await raise_alert(self.client, self.settings, alerts.sla_missed(want, self._job_label(want.ref), at))
        estimate = await self.bel.call(sla_estimate, self.bel, self.graph, want, at)
        if estimate is not None and estimate.external:
            await raise_alert(self.client, self.settings, alerts.upstream_late(want, estimate.external, at))

    @activity.defn
    async def assess_sla(self, input: p.AssessSlaInput) -> p.SlaAssessment:
        """Is the want predicted to miss its SLA (``databuild.operations.sla``)? If so, flag it and alert once; if
        not, say when to look again. ``now`` is the workflow's time (the time-skipping server's in tests)."""
        now = input.now
        want = await self.bel.call(self.bel.wants.get, input.want_id)
        estimate = await self.bel.call(sla_estimate, self.bel, self.graph, want, now)
        if estimate is None:
            return p.SlaAssessment(at_risk=False)
        if not estimate.at_risk(input.deadline):
            return p.SlaAssessment(
                at_risk=False, eta=estimate.eta_p90, check_at=estimate.check_at(input.deadline, now)
            )
        want, _ = await self.bel.call(
            self.bel.wants.mark_sla_at_risk,
            want.want_id,
            input.deadline,
            estimate.eta_p90,
            estimate.slowest_step,
        )
        label = self._job_label(want.ref)
        await raise_alert(self.client, self.settings, alerts.sla_at_risk(want, label, estimate, now))
        if estimate.external:
            await raise_alert(self.client, self.settings, alerts.upstream_late(want, estimate.external, now))
        return p.SlaAssessment(at_risk=True, eta=estimate.eta_p90)

    def _job_label(self, ref: str) -> str | None:
        target = self.graph.resolve(ref).target
        return target.job.label if target is not None else None
