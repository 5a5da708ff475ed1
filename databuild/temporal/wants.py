"""Wants on Temporal, from outside workflows: starting them, reconciling them with the BEL, cancelling
them, and signalling the wants subscribed to a job run's outputs."""

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, NamedTuple

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from databuild.bel.queries import BelQueries
from databuild.domain.wants import WantStart
from databuild.errors import (
    InvalidTransitionError,
)
from databuild.graph import Graph
from databuild.models import (
    JobRun,
    JobRunState,
    Subscription,
    Want,
    WantSpec,
    WantState,
    want_id_of_workflow,
)
from databuild.refs import validate_ref
from databuild.temporal.protocol import (
    SA_PARTITION_REF,
    SA_ROOT_WANT_ID,
    SA_SLA_MISSED,
    SA_WANT_STATE,
    SIGNAL_ANNOUNCE,
    SIGNAL_DEP_MISS,
    SIGNAL_PARTITION_AVAILABLE,
    SIGNAL_PARTITION_FAILED,
    SIGNAL_REDECIDE,
    UPSTREAM_WORKFLOW,
    WANT_WORKFLOW,
    WORKFLOW_VERSION,
    Announcement,
    DepMissNotice,
    PartitionAvailable,
    PartitionFailedNotice,
    RedecideNotice,
    UpstreamInput,
    WantEnding,
    WantInput,
    WantResult,
    upstream_workflow_id,
)
from databuild.temporal.upstream import check_announcement

log = logging.getLogger(__name__)


def want_search_attributes(spec: WantSpec, state: WantState = WantState.new) -> TypedSearchAttributes:
    pairs: list[SearchAttributePair[str] | SearchAttributePair[bool]] = [
        SearchAttributePair(SA_PARTITION_REF, spec.ref),
        SearchAttributePair(SA_WANT_STATE, state.value),
        SearchAttributePair(SA_SLA_MISSED, False),
        SearchAttributePair(SA_ROOT_WANT_ID, spec.root_want_id or spec.want_id),
    ]
    return TypedSearchAttributes(pairs)


def want_summary(spec: WantSpec) -> str:
    parts = [f"want {spec.ref} @ {spec.data_timestamp:%Y-%m-%d %H:%M}Z ({spec.source.value})"]
    if spec.sla_deadline:
        parts.append(f"SLA {spec.sla_deadline:%Y-%m-%d %H:%M}Z")
    if spec.ttl_deadline:
        parts.append(f"TTL {spec.ttl_deadline:%Y-%m-%d %H:%M}Z")
    return ", ".join(parts)


async def start_want(
    client: Client,
    spec: WantSpec,
    task_queue: str,
    bel: BelQueries,
    *,
    opening: int = 0,
    eager: bool = False,
) -> WorkflowHandle[object, WantResult]:
    """Start the want's workflow, or attach to it: one want, one workflow, however often it is asked for.
    A new run serves the want's ``opening`` (one that a retry has replaced since carries on as the newer).
    ``eager``: its first task goes straight to a worker of ``client``'s own when one has room (no task
    queue round trip); only for a want asked for alone, as wants started in numbers (a backfill's
    window, a dep-miss's derivatives) would then all go to the one worker that started them, and stay
    there (a workflow's later tasks follow its first), where adding workers should spread them.

    A want whose workflow ended without a final state in the BEL (terminated by an operator, or by
    Temporal at its history limit) is repaired: it gets a new run, which carries on from the BEL."""
    try:
        return await _start_want_run(
            client, spec, task_queue, WorkflowIDReusePolicy.REJECT_DUPLICATE, opening=opening, eager=eager
        )
    except WorkflowAlreadyStartedError:
        recorded = await bel.call(bel.wants.find, spec.want_id)
        if recorded is not None and recorded.state.is_final:
            return client.get_workflow_handle(
                spec.workflow_id, result_type=WantResult
            )  # ended: the same want
    log.warning("want %s: its workflow ended without a final state; starting a new run", spec.want_id)
    if recorded is not None:
        opening = recorded.opening
    return await _start_want_run(
        client, spec, task_queue, WorkflowIDReusePolicy.ALLOW_DUPLICATE, opening=opening
    )


async def start_wants(
    client: Client,
    starts: Sequence[WantStart],
    task_queue: str,
    bel: BelQueries,
    *,
    concurrency: int = 16,
    on_started: Callable[[int], object] = lambda _done: None,
) -> None:
    """``start_want`` each, ``concurrency`` at a time; ``on_started(done)`` after each."""
    gate = asyncio.Semaphore(concurrency)
    done = 0

    async def start(want: WantStart) -> None:
        nonlocal done
        async with gate:
            await start_want(client, want.spec, task_queue, bel, opening=want.opening)
        done += 1
        on_started(done)

    await asyncio.gather(*(start(want) for want in starts))


async def _start_want_run(
    client: Client,
    spec: WantSpec,
    task_queue: str,
    reuse: WorkflowIDReusePolicy,
    *,
    opening: int,
    ending: WantEnding | None = None,
    eager: bool = False,
) -> WorkflowHandle[object, WantResult]:
    return await client.start_workflow(
        WANT_WORKFLOW,
        WantInput(spec=spec, ending=ending, version=WORKFLOW_VERSION, opening=opening),
        id=spec.workflow_id,
        task_queue=task_queue,
        result_type=WantResult,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=reuse,
        search_attributes=want_search_attributes(spec),
        static_summary=want_summary(spec),
        request_eager_start=eager,
        static_details=(
            f"want id `{spec.want_id}`\n\nparent `{spec.parent_want_id or '-'}`, "
            f"root `{spec.root_want_id or spec.want_id}`"
        ),
    )


async def repair_wants(
    client: Client,
    bel: BelQueries,
    task_queue: str,
    quiet: timedelta = timedelta(minutes=1),
    closed_within: timedelta | None = None,
) -> int:
    """Reconcile every want on ``task_queue`` whose workflow closed while the BEL holds it open (whatever
    closed it: see ``reconcile_want``), and start every want the BEL has held ``new`` for ``quiet``
    without a workflow (recorded by a call that failed to start it; a want with a workflow decides
    within seconds). Returns how many wants were reconciled or started.

    Closed workflows are found through visibility: all of those whose search attributes still say the want
    is open, and, given ``closed_within``, every want workflow closed that recently, whatever its search
    attributes say (a run that ended believing its outcome recorded shows it final)."""
    open_states = ", ".join(f"'{state.value}'" for state in WantState if not state.is_final)
    closed = ", ".join(f"'{status}'" for status in CLOSED_STATUSES)
    query = (
        f"WorkflowType = '{WANT_WORKFLOW}' AND TaskQueue = '{task_queue}' AND ExecutionStatus IN ({closed})"
    )
    dead = {
        execution.id
        async for execution in client.list_workflows(f"{query} AND {SA_WANT_STATE.name} IN ({open_states})")
    }
    if closed_within is not None:
        since = (datetime.now(UTC) - closed_within).strftime("%Y-%m-%dT%H:%M:%SZ")
        dead |= {
            execution.id async for execution in client.list_workflows(f"{query} AND CloseTime > '{since}'")
        }
    still_open = await bel.call(bel.wants.open_among, [want_id_of_workflow(w) for w in dead])
    repaired = 0
    for want in sorted(await bel.call(bel.wants.by_id, sorted(still_open)), key=lambda w: w.want_id):
        if not want.state.is_final:  # it may have ended since
            done = await reconcile_want(client, bel, want, task_queue)
            repaired += done in (Reconciled.restarted, Reconciled.recorded)
    return repaired + await _start_unstarted(client, bel, task_queue, datetime.now(UTC) - quiet)


CLOSED_STATUSES = ("Completed", "Failed", "Canceled", "Terminated", "TimedOut")  # not ContinuedAsNew


class Outcome(NamedTuple):
    state: WantState
    reason: str | None = None
    instance_id: str | None = None


CANCELED_ON_REQUEST = Outcome(WantState.canceled, "canceled on request")


class Reconciled(StrEnum):
    untouched = "untouched"  # its workflow runs, or the BEL changed after it closed
    restarted = "restarted"  # a new run carries on from the BEL
    recorded = "recorded"  # a new run records the outcome the closed one reached
    gone = "gone"  # no workflow, and no task queue to start one on


async def reconcile_want(
    client: Client,
    bel: BelQueries,
    want: Want,
    task_queue: str | None = None,
    *,
    otherwise: Outcome | None = None,
) -> Reconciled:
    """Bring an open want in line with its workflow when that closed without recording how it ended.

    A run closed canceled, completed or failed has an outcome: a new run records it as that run would
    have (telling the wants that depend on it, alerting). One terminated or timed out, or whose history
    is gone, has none: it is started again, or, given ``otherwise``, ends so (a cancel of a want whose
    workflow is dead). Nothing is done while it runs, or when the BEL changed after it closed (a retry
    reopened it)."""
    handle = client.get_workflow_handle(want.workflow_id)
    try:
        described = await handle.describe()
    except RPCError as error:
        if error.status != RPCStatusCode.NOT_FOUND:
            raise
        described = None
    if described is not None and (
        described.status is WorkflowExecutionStatus.RUNNING
        or (described.close_time is not None and want.updated_at > described.close_time)
    ):
        return Reconciled.untouched
    queue = described.task_queue if described is not None else task_queue
    if queue is None:
        log.warning("want %s is open, and its workflow is gone; register it again", want.want_id)
        return Reconciled.gone
    outcome = await _outcome_of(handle, described.status if described else None) or otherwise
    if outcome is None:
        log.warning("want %s: its workflow ended without a final state; starting a new run", want.want_id)
        await _start_want_run(
            client, want.spec, queue, WorkflowIDReusePolicy.ALLOW_DUPLICATE, opening=want.opening
        )
        return Reconciled.restarted
    ending = WantEnding(**outcome._asdict(), was=want.state, job_run_id=want.job_run_id)
    log.warning("want %s: its workflow ended %s unrecorded; recording it", want.want_id, ending.state.value)
    await _start_want_run(
        client, want.spec, queue, WorkflowIDReusePolicy.ALLOW_DUPLICATE, opening=want.opening, ending=ending
    )
    return Reconciled.recorded


async def _outcome_of(
    handle: WorkflowHandle[Any, Any], status: WorkflowExecutionStatus | None
) -> Outcome | None:
    """The outcome a closed want workflow reached (None: it reached none)."""
    if status is WorkflowExecutionStatus.CANCELED:
        return CANCELED_ON_REQUEST
    if status is WorkflowExecutionStatus.COMPLETED:
        result = WantResult.model_validate(await handle.result(follow_runs=False))
        return Outcome(result.state, result.reason, result.instance_id)
    if status is WorkflowExecutionStatus.FAILED:
        try:
            await handle.result(follow_runs=False)
        except WorkflowFailureError as failure:
            return Outcome(WantState.failed, str(failure.cause or failure))
    return None


async def settle_closing_runs(
    client: Client,
    workflow_ids: Sequence[str],
    *,
    concurrency: int = 16,
    within: timedelta = timedelta(seconds=10),
) -> None:
    """Let the runs of wants that ended in the BEL close before the wants are reopened, so that each new
    run is a new one: a retry must not attach to a closing run. ``concurrency`` at a time (a cancelled
    backfill's retry settles up to 100,000); a run still open after ``within`` is terminated, its outcome
    recorded already. A want whose workflow never started (a backfill's, cancelled before its window
    reached it) or has closed has nothing to settle."""
    gate = asyncio.Semaphore(concurrency)

    async def settle(workflow_id: str) -> None:
        async with gate:
            handle = client.get_workflow_handle(workflow_id)
            try:
                if (await handle.describe()).status is not WorkflowExecutionStatus.RUNNING:
                    return
                with contextlib.suppress(TimeoutError, WorkflowFailureError):
                    await asyncio.wait_for(handle.result(follow_runs=False), within.total_seconds())
                if (await handle.describe()).status is WorkflowExecutionStatus.RUNNING:
                    await handle.terminate("its want was reopened by a retry; a new run takes over")
            except RPCError as error:
                if error.status != RPCStatusCode.NOT_FOUND:
                    raise

    await asyncio.gather(*(settle(workflow_id) for workflow_id in dict.fromkeys(workflow_ids)))


async def cancel_want(client: Client, bel: BelQueries, want: Want) -> None:
    """Ask an open want's workflow to cancel. One whose workflow has closed without recording it is
    reconciled: it ends with the outcome its workflow reached, or canceled."""
    try:
        await client.get_workflow_handle(want.workflow_id).cancel()
        return
    except RPCError as error:
        if error.status != RPCStatusCode.NOT_FOUND:
            raise
    await reconcile_want(client, bel, want, otherwise=CANCELED_ON_REQUEST)


async def _start_unstarted(client: Client, bel: BelQueries, task_queue: str, quiet_since: datetime) -> int:
    started = 0
    for want in await bel.call(bel.wants.unstarted, quiet_since):
        try:
            await client.get_workflow_handle(want.workflow_id).describe()
        except RPCError as error:
            if error.status != RPCStatusCode.NOT_FOUND:
                raise
            await start_want(client, want.spec, task_queue, bel, opening=want.opening)
            started += 1
    return started


# What a subscriber is told (signal name, payload), or None to skip it. Pure: it runs on the event loop
# for every subscription, so anything it needs comes with the subscription.
SignalFor = Callable[[Subscription], tuple[str, object] | None]


@dataclass(frozen=True)
class Notified:
    heard: int  # wants that heard
    cursor: int  # the last subscription signalled
    done: bool  # no subscription is left after the cursor


async def notify_subscribers(
    client: Client,
    bel: BelQueries,
    refs: list[str],
    signal_for: SignalFor,
    *,
    after_id: int = 0,
    page_size: int = 200,
    on_page: Callable[[int], None] = lambda _cursor: None,
    max_pages: int | None = None,
    first_page: tuple[list[Subscription], int] | None = None,
) -> Notified:
    """Signal every want subscribed to any of ``refs``, a page at a time, starting after ``after_id``, for
    at most ``max_pages`` pages (all when None).

    ``signal_for(subscription)`` returns (signal name, payload) or None to skip. ``on_page`` receives
    the cursor after each full page so a retried caller resumes where it stopped; ``first_page``: the
    first page, read already, and the limit it was read with. Returns how far it got:
    how many wants heard (running workflows signalled, and wants repaired, see ``_signal``; finished ones
    do not count), the cursor, and whether any subscription is left after it."""
    heard: set[str] = set()
    pages = 0
    while max_pages is None or pages < max_pages:
        limit = page_size
        if first_page is not None:
            (page, limit), first_page = first_page, None
        else:
            page = await bel.call(bel.wants.subscriptions, refs, after_id, page_size)
        targets = [
            (sub.want_id, sub.workflow_id, sig) for sub in page if (sig := signal_for(sub)) is not None
        ]
        delivered = await asyncio.gather(*(_signal(client, bel, w, wf, sig) for w, wf, sig in targets))
        heard.update(want_id for (want_id, _, _), ok in zip(targets, delivered, strict=True) if ok)
        if len(page) < limit:  # the last page: nothing after it
            return Notified(len(heard), after_id if not page else page[-1].id, done=True)
        after_id = page[-1].id
        on_page(after_id)
        pages += 1
    return Notified(len(heard), after_id, done=False)


async def _signal(
    client: Client, bel: BelQueries, want_id: str, workflow_id: str, signal: tuple[str, object]
) -> bool:
    """Signal a want's workflow. One that is closed has finished, or closed without recording how it
    ended: that want is reconciled (``reconcile_want``). False if it finished."""
    try:
        await client.get_workflow_handle(workflow_id).signal(signal[0], signal[1])
        return True
    except RPCError as error:
        if error.status != RPCStatusCode.NOT_FOUND:
            raise
    want = await bel.call(bel.wants.find, want_id)
    if want is None or want.state.is_final:
        return False
    # Started again, or running again meanwhile: it decides afresh, so it needs no signal.
    return await reconcile_want(client, bel, want) in (Reconciled.restarted, Reconciled.untouched)


def signal_for_run(run: JobRun) -> SignalFor:
    """What each want subscribed to a finished run's outputs is told."""
    instances = {w.ref: w.instance_id for w in run.writes}

    def signal(subscription: Subscription) -> tuple[str, object] | None:
        ref = subscription.ref
        if run.state is JobRunState.succeeded and instances.get(ref):
            notice = PartitionAvailable(ref=ref, instance_id=instances[ref] or "", job_run_id=run.job_run_id)
            return SIGNAL_PARTITION_AVAILABLE, notice
        if run.state is JobRunState.dep_miss:
            # A batch member waits only for the inputs its own partition misses (JobRun.missing_for).
            missing = run.missing if run.missing_for is None else run.missing_for.get(ref, run.missing)
            return SIGNAL_DEP_MISS, DepMissNotice(job_run_id=run.job_run_id, missing=missing)
        if run.cause is not None and run.cause.releases_outputs:
            # Nothing is wrong with the partition: whoever still wants it decides again (and builds).
            return SIGNAL_REDECIDE, RedecideNotice(ref=ref, reason=run.reason or "build lost")
        if run.state in (JobRunState.failed, JobRunState.cancelled):
            failed = PartitionFailedNotice(ref=ref, job_run_id=run.job_run_id, reason=run.reason or "failed")
            return SIGNAL_PARTITION_FAILED, failed
        return None

    return signal


async def start_upstream(client: Client, task_queue: str, input: UpstreamInput) -> None:
    """Start following an upstream graph. Refused if one of that name is already followed."""
    try:
        await client.start_workflow(
            UPSTREAM_WORKFLOW,
            input,
            id=upstream_workflow_id(task_queue, input.name),
            task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            static_summary=f"upstream {input.name}: {input.url or 'push only'}",
        )
    except WorkflowAlreadyStartedError:
        raise InvalidTransitionError(
            f"upstream {input.name!r} is already followed; `databuild upstream remove {input.name}` first"
        ) from None


async def announce(
    client: Client, task_queue: str, announcement: Announcement, *, graph: Graph | None = None
) -> None:
    """Push "partition X is available" to the graph served on ``client``/``task_queue``: a signal to its
    workflow for ``announcement.graph``, started if it does not run yet (it then only takes pushes).
    The receiving worker applies only refs its graph declares external, within the patterns that
    upstream is followed for, and logs the rest. Give the receiving ``graph`` when you have it: an
    announcement it would refuse then raises AnnouncementRefusedError here, and nothing is sent."""
    if graph is None:
        validate_ref(announcement.ref)
    else:
        check_announcement(graph, announcement.ref)
    await client.start_workflow(
        UPSTREAM_WORKFLOW,
        UpstreamInput(name=announcement.graph),
        id=upstream_workflow_id(task_queue, announcement.graph),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        start_signal=SIGNAL_ANNOUNCE,
        start_signal_args=[announcement],
    )
