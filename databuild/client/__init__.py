"""The Python SDK: register wants (idempotently), await them, query the build event log."""

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence, Set
from datetime import UTC, datetime, timedelta

from temporalio.client import Client, WorkflowFailureError
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.service import RPCError

from databuild.backfill import BackfillProgress, BackfillRequest, BackfillRetry, cancel_reason
from databuild.bel import BuildEventLog
from databuild.client.calls import called, cancel_workflow, gathered, recheck, signal_workflow
from databuild.client.retries import fail_locked, retryable
from databuild.client.specs import backfill_specs, build_spec, stale_only
from databuild.config import Settings
from databuild.domain import checks as check_rules
from databuild.domain.backfills import backfill_partitions
from databuild.domain.checks import Recheck
from databuild.domain.cost import CostBy, CostReport
from databuild.domain.plans import Plan, Root
from databuild.domain.staleness import StalePartition
from databuild.domain.wants import WantStart
from databuild.domain.workers import Environment, refuse_unconverging
from databuild.errors import (
    InvalidTransitionError,
    TemporalUnavailableError,
)
from databuild.failures import MISSING_SEARCH_ATTRIBUTE
from databuild.graph import Graph, load_graph
from databuild.models import (
    Instance,
    Partition,
    TaintImpact,
    TaintResult,
    Want,
    WantSource,
    WantSpec,
)
from databuild.refs import ref_uri, validate_ref
from databuild.temporal.connection import connect, ensure_search_attributes
from databuild.temporal.late_data import rebuild_late_readers
from databuild.temporal.protocol import (
    BACKFILL_WINDOW_WORKFLOW,
    SIGNAL_ABANDON,
    SIGNAL_PARTITION_AVAILABLE,
    SIGNAL_PAUSE,
    SIGNAL_REDECIDE,
    SIGNAL_RESUME,
    SIGNAL_WAKE,
    BackfillWindowInput,
    PartitionAvailable,
    RedecideNotice,
    backfill_window_workflow_id,
)
from databuild.temporal.upstream import check_announcement
from databuild.temporal.wants import (
    cancel_want,
    notify_subscribers,
    settle_closing_runs,
    start_want,
    start_wants,
)
from databuild.temporal.workers import environment
from databuild.views.cost import cost_report
from databuild.views.lineage import FamilyProgress, WantView, family_progress, want_view
from databuild.views.plans import plan_wants
from databuild.views.staleness import fresh_basis, stale_partitions
from databuild.views.tables import TableView, tables_view
from databuild.views.why import Why
from databuild.views.why import why as why_view

__all__ = ["BACKFILL_CHUNK", "DataBuild", "build_spec"]


BACKFILL_CHUNK = 500  # wants recorded in one transaction (and between two reports of progress)


class DataBuild:
    """An async client. ``async with await DataBuild.connect() as db: await db.want("daily_summary/2024-01-07")``.

    Every change of state goes through it: wants, taints, resolve, skip, publish. ``client`` and
    ``graph`` may be None: then the first call that needs Temporal connects, and the first that needs
    the graph loads it, so calls that only touch the BEL (taints) work while Temporal is down."""

    def __init__(
        self, client: Client | None, bel: BuildEventLog, graph: Graph | None, settings: Settings
    ) -> None:
        self._temporal = client
        self._graph = graph
        self._connecting = asyncio.Lock()
        self.bel = bel
        self.settings = settings

    @classmethod
    async def connect(
        cls, settings: Settings | None = None, *, lazy: bool = False, reads_only: bool = False
    ) -> "DataBuild":
        """A client over the configured BEL, connected to Temporal (``lazy``: on first need). One that
        ``reads_only`` (plans, views) reads a SQLite BEL that does not exist yet as empty, creating nothing."""
        settings = settings or Settings.from_env()
        # The user's module first: a graph that does not load is refused before anything is created.
        graph = None if lazy else await asyncio.to_thread(load_graph, settings.graph)
        url = settings.database_url.get_secret_value()
        opening = BuildEventLog.create_to_read if reads_only else BuildEventLog.create
        bel = await asyncio.to_thread(opening, url)  # migrates: off the loop
        if lazy:
            return cls(None, bel, None, settings)
        return cls(await connect(settings), bel, graph, settings)

    @property
    def temporal(self) -> Client:
        """The Temporal client of a connected DataBuild (``await db.temporal_client()`` connects one)."""
        if self._temporal is None:
            raise TemporalUnavailableError("this DataBuild has not connected to Temporal yet")
        return self._temporal

    async def temporal_client(self) -> Client:
        """The Temporal client, connecting it first if this DataBuild was made without one."""
        if self._temporal is not None:
            return self._temporal
        async with self._connecting:
            if self._temporal is None:
                self._temporal = await connect(self.settings)
            return self._temporal

    @property
    def graph(self) -> Graph:
        if self._graph is None:
            self._graph = load_graph(self.settings.graph)
        return self._graph

    async def loaded_graph(self) -> Graph:
        """The graph, imported off the event loop the first time (a user's module may import Spark)."""
        if self._graph is None:
            self._graph = await asyncio.to_thread(load_graph, self.settings.graph)
        return self._graph

    async def __aenter__(self) -> "DataBuild":
        return self

    async def __aexit__(self, *_exc: object) -> None:
        self.bel.dispose()

    def spec(
        self,
        ref: str,
        *,
        data_timestamp: datetime | None = None,
        sla: timedelta | None = None,
        ttl: timedelta | None = None,
        source: WantSource = WantSource.cli,
        requires: Sequence[str] = (),
        fresh: bool = False,
    ) -> WantSpec:
        validate_ref(ref)
        # After a taint the same request is a new want (a new generation), so it rebuilds.
        generation = self.bel.partitions.generations([ref])[ref]
        return build_spec(
            self.graph,
            ref,
            data_timestamp=data_timestamp,
            sla=sla,
            ttl=ttl,
            source=source,
            generation=generation,
            requires=requires,
            fresh=fresh,
            # A fresh want asked again once its partition was rebuilt, or is stale for another reason, is new.
            fresh_of=fresh_basis(self.bel, self.graph, ref) if fresh else None,
        )

    async def want(
        self,
        ref: str,
        *,
        data_timestamp: datetime | None = None,
        sla: timedelta | None = None,
        ttl: timedelta | None = None,
        source: WantSource = WantSource.cli,
        requires: Sequence[str] = (),
        fresh: bool = False,
    ) -> WantSpec:
        """Register a want. Asking again for the same want attaches to the same workflow. ``requires``:
        external partitions that must be available before its job is dispatched. ``fresh``: if the
        partition is live but stale, rebuild it and the stale inputs it needs (by default a want accepts
        any live partition); refused (ConfigurationError) when the workers serving now disagree on the
        version of its job, as the rebuild could never be fresh for all of them."""
        if fresh and (target := (await self.loaded_graph()).resolve(ref).target) is not None:
            refuse_unconverging(target.job.label, ref, (await self.envs())[0].workers)
        spec = await self.bel.call(
            self.spec,
            ref,
            data_timestamp=data_timestamp,
            sla=sla,
            ttl=ttl,
            source=source,
            requires=requires,
            fresh=fresh,
        )
        await self._register(spec)
        return spec

    async def envs(self) -> list[Environment]:
        """The environments (production alone, for now) with the workers serving each and the version of
        each job they run, and the jobs whose versions differ among them."""
        client = await self.temporal_client()
        return [await environment(client, self.bel, self.settings.namespace, self.settings.task_queue)]

    async def _register(self, spec: WantSpec) -> None:
        client = await self.temporal_client()
        # Eager: in a worker's process (`databuild dev`, a graph's own code) its first task runs at once.
        try:
            await start_want(client, spec, self.settings.task_queue, self.bel, eager=True)
        except RPCError as error:
            if MISSING_SEARCH_ATTRIBUTE not in error.message:
                raise
            # A namespace no worker has prepared yet (the first seconds of `databuild dev`): prepare it.
            await ensure_search_attributes(client, self.settings.namespace)
            await start_want(client, spec, self.settings.task_queue, self.bel, eager=True)
        # The workflow records the want too; doing it here as well (idempotently) means the want is
        # visible in the BEL as soon as this returns, and only once its workflow exists.
        await self.bel.call(self.bel.wants.register, spec)

    async def backfill(
        self,
        request: BackfillRequest,
        *,
        on_registered: Callable[[int], Awaitable[None] | None] | None = None,
    ) -> BackfillProgress:
        """Register one want per partition of the range (source `backfill`), idempotently: asking again
        registers nothing new. Every want is checked before anything is recorded (bad input raises
        InvalidInputError). The wants are recorded in bulk; the backfill's window (a workflow, started
        with the first of them) starts their workflows in the order of the range, never more than
        ``DATABUILD_BACKFILL_WINDOW`` open at once. ``on_registered(done)`` follows the registration
        (of ``partitions`` wants). ``request.stale_only``: only the partitions stale now, as fresh wants;
        with none, nothing is recorded and the progress returned has 0 partitions."""
        graph = await self.loaded_graph()
        partitions = backfill_partitions(request, graph)
        fresh_of: dict[str, str] | None = None
        if request.stale_only:  # exactly the stale partitions of the range, as fresh wants
            request, partitions, fresh_of = await self.bel.call(
                stale_only, self.bel, graph, request, partitions
            )
            if not partitions:  # nothing is stale: nothing is recorded
                return BackfillProgress(
                    backfill_id=request.backfill_id,
                    request=request,
                    partitions=0,
                    registered=0,
                    by_state={},
                    created_at=datetime.now(UTC),
                )
            if (target := graph.resolve(partitions[0][0]).target) is not None:  # one job: the pattern's
                refuse_unconverging(target.job.label, request.pattern, (await self.envs())[0].workers)
        # The wants are built a chunk at a time, so the first are recorded (and shown) at once. What could
        # make one invalid (a TTL already past, a deadline past the calendar) moves with the data time,
        # so checking the first and the last checks them all before anything is recorded.
        backfill_specs(graph, request, [partitions[0], partitions[-1]], {}, fresh_of)
        await self.bel.call(self.bel.backfills.record, request, len(partitions), [])
        for first in range(0, len(partitions), BACKFILL_CHUNK):
            chunk = partitions[first : first + BACKFILL_CHUNK]
            generations = await self.bel.call(self.bel.partitions.generations, [ref for ref, _ in chunk])
            # Recorded in the transaction that reads whether the backfill was cancelled meanwhile (then
            # they are recorded cancelled, and none starts).
            specs = backfill_specs(graph, request, chunk, generations, fresh_of)
            await self.bel.call(self.bel.backfills.record, request, len(partitions), specs, first)
            if first == 0:
                await self._run_window(request.backfill_id)
            if on_registered is not None:
                await called(on_registered, first + len(chunk))
        await self._run_window(request.backfill_id)  # it steps at once: every want is there
        return await self.backfill_progress(request.backfill_id)

    async def plan(
        self,
        ref: str,
        *,
        data_timestamp: datetime | None = None,
        sla: timedelta | None = None,
        ttl: timedelta | None = None,
        requires: Sequence[str] = (),
        fresh: bool = False,
    ) -> Plan:
        """What wanting ``ref`` would do now (``databuild.domain.plans``): the partitions it would build
        (``fresh``: stale ones too), the runs, how long, and whether it would miss its SLA. Records
        nothing; bad input raises as ``want`` does."""
        graph = await self.loaded_graph()
        spec = build_spec(
            graph, ref, data_timestamp=data_timestamp, sla=sla, ttl=ttl, requires=requires, fresh=fresh
        )
        root = Root(ref=spec.ref, deadline=spec.sla_deadline, requires=spec.requires)
        return await self.bel.call(plan_wants, self.bel, graph, [root], datetime.now(UTC), fresh=fresh)

    async def plan_backfill(self, request: BackfillRequest) -> Plan:
        """What the backfill ``request`` would do now (as ``plan`` for each of its partitions; stale-only:
        for the stale ones, fresh). Records nothing; bad input raises as ``backfill`` does."""
        graph = await self.loaded_graph()
        partitions = backfill_partitions(request, graph)
        for ref, at in (partitions[0], partitions[-1]):  # as `backfill` checks them (see there)
            build_spec(
                graph, ref, data_timestamp=at, sla=request.sla, ttl=request.ttl, source=WantSource.backfill
            )
        if request.stale_only:
            _, partitions, _ = await self.bel.call(stale_only, self.bel, graph, request, partitions)
        roots = [Root(ref=ref, deadline=at + request.sla if request.sla else None) for ref, at in partitions]
        fresh = request.stale_only
        return await self.bel.call(plan_wants, self.bel, graph, roots, datetime.now(UTC), fresh=fresh)

    async def stale(self, pattern: str | None = None) -> list[StalePartition]:
        """The stale live partitions (of refs matching the glob ``pattern``), with their reasons
        (``databuild.domain.staleness``). Reads only."""
        graph = await self.loaded_graph()
        return await self.bel.call(stale_partitions, self.bel, graph, pattern)

    async def cost(
        self, pattern: str | None = None, *, since: datetime | None = None, by: CostBy = "job"
    ) -> CostReport:
        """Builds run and avoided, task-seconds spent and saved, per job, day or partition (of refs
        matching the glob ``pattern``, from ``since`` on); see ``databuild.domain.cost``. Reads only."""
        return await self.bel.call(cost_report, self.bel, by, pattern, since)

    async def tables(self) -> list[TableView]:
        """Each output pattern's table and how far it is behind the BEL (``databuild.views.tables``)."""
        return await self.bel.call(tables_view, self.bel, await self.loaded_graph(), self.settings)

    async def why(self, ref: str) -> Why:
        """Why ``ref`` is in its state: the chain of recorded facts (``databuild.views.why``). Reads only."""
        graph = await self.loaded_graph()
        return await self.bel.call(why_view, self.bel, graph, ref)

    async def _run_window(self, backfill_id: str) -> None:
        """Start the backfill's window, or wake it (it then steps at once)."""
        await (await self.temporal_client()).start_workflow(
            BACKFILL_WINDOW_WORKFLOW,
            BackfillWindowInput(backfill_id=backfill_id),
            id=backfill_window_workflow_id(backfill_id),
            task_queue=self.settings.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            start_signal=SIGNAL_WAKE,
            static_summary=f"backfill {backfill_id}: starts its wants in a sliding window",
        )

    async def cancel(self, want_id: str) -> Want:
        """Cancel a want that has not ended: it records `canceled`, and its build stops unless another
        want needs it. A want that has ended is returned as it is."""
        want = await self.bel.call(self.bel.wants.get, want_id)  # NotFoundError for an unknown id
        if not want.state.is_final:
            await cancel_want(await self.temporal_client(), self.bel, want)
        return want

    async def want_view(self, want_id: str) -> WantView:
        """The want's fulfilment tree, with its SLA estimate (see ``databuild.views.lineage.want_view``)."""
        return await self.bel.call(want_view, self.bel, want_id, await self.loaded_graph())

    async def retry(self, want_id: str) -> Want:
        """Decide again now. A want that has not ended is told to (e.g. after fixing an input or a cause
        outside DataBuild). One that ended failed or canceled is opened again, with the wants it derived
        that ended so, and each gets a new workflow run. Raises InvalidTransitionError, naming what to do,
        for a want that succeeded or expired, or whose partition (or a derived one) is still fail-locked."""
        want = await self.bel.call(self.bel.wants.get, want_id)  # NotFoundError for an unknown id
        client = await self.temporal_client()
        if not want.state.is_final:
            handle = client.get_workflow_handle(want.workflow_id)
            await handle.signal(SIGNAL_REDECIDE, RedecideNotice(ref=want.ref, reason="retry requested"))
            return want
        ended = await self.bel.call(retryable, self.bel, want)
        if locked := await self.bel.call(fail_locked, self.bel, ended):
            raise InvalidTransitionError(
                f"{', '.join(locked)} {'is' if len(locked) == 1 else 'are'} fail-locked by a failed build: "
                f"fix its cause, clear it with `databuild resolve {locked[0]}`, then retry {want_id}"
            )
        await self._reopen(ended)
        return await self.bel.call(self.bel.wants.get, want_id)

    async def retry_backfill(self, backfill_id: str) -> BackfillRetry:
        """Open again every want of the backfill that ended failed or canceled, each with the wants it
        derived that ended so (as ``retry`` does), and lift a cancel of the backfill, so that wants it
        registers from now on start. Wants whose partition (or a derived one) is fail-locked stay ended
        and are listed: resolve them, then retry again. NotFoundError for an unknown backfill."""
        ended = await self.bel.call(self.bel.backfills.ended_wants, backfill_id)
        families = list((await self.bel.call(self.bel.wants.ended_families, ended)).values())
        locked = set(await self.bel.call(fail_locked, self.bel, [w for family in families for w in family]))
        ready = [family for family in families if not locked & {w.ref for w in family}]
        # Its own wants are reopened first, for its window to start; then the retry takes the window back
        # to the start of its range. A window step in between starts nothing (the backfill is still
        # cancelled, or its place is past them), and a step planned before is not recorded after.
        members = await self.bel.call(self.bel.backfills.members, backfill_id)
        await self._reopen([w for family in ready for w in family], leave=members)
        await self.bel.call(self.bel.backfills.retry, backfill_id)
        await self._run_window(backfill_id)
        return BackfillRetry(backfill_id=backfill_id, reopened=len(ready), fail_locked=sorted(locked))

    async def _reopen(self, ended: list[Want], leave: Set[str] = frozenset()) -> None:
        """Open ended wants again, each in a new workflow run (those in ``leave`` are left for their
        backfill's window to start). Their runs closing now (a last workflow task replayed, say) close
        first, so the new runs are new."""
        client = await self.temporal_client()
        unique = list({w.want_id: w for w in ended}.values())
        await settle_closing_runs(client, [w.workflow_id for w in unique])
        reopened = await self.bel.call(self.bel.wants.reopen, [w.want_id for w in unique])
        starts = [WantStart.of(w) for w in reopened if w.want_id not in leave]
        await start_wants(client, starts, self.settings.task_queue, self.bel)

    async def cancel_backfill(self, backfill_id: str) -> int:
        """Cancel a backfill: its wants that have not ended, and the derivative wants below them that no
        open want outside it needs, end `canceled` in the BEL before this returns, with the runs they
        queued that have not started and nobody else needs; wants it registers from now on are recorded
        cancelled. Their workflows are told then, so a running build stops unless another want needs it.
        Returns how many wants were cancelled (0 when it was already)."""
        await self.bel.call(self.bel.backfills.cancel, backfill_id)  # NotFoundError for an unknown id
        reason = cancel_reason(backfill_id)
        # Its window stopped at the cancel: the wants it had not started (with no workflow, nothing they
        # derived) end in bulk.
        unstarted = await self.bel.call(self.bel.backfills.cancel_unstarted, backfill_id)
        cancelled: list[Want] = []
        runs: list[str] = []
        # A want derives wants until it is recorded cancelled: look again until nothing open is reached.
        while reached := await self.bel.call(self.bel.backfills.reach, backfill_id):
            wants, ended = await self.bel.call(self.bel.wants.cancel, [w.want_id for w in reached], reason)
            cancelled += wants
            runs += ended
        client = await self.temporal_client()
        await gathered(
            [cancel_workflow(client, w.workflow_id) for w in cancelled]
            + [signal_workflow(client, workflow_id, SIGNAL_ABANDON) for workflow_id in runs]
        )
        return unstarted + len(cancelled)

    async def pause_backfill(self, backfill_id: str, *, paused: bool = True) -> BackfillProgress:
        """Pause a backfill (``paused=False``: resume it). Its wants that have not ended, and the
        derivative wants below them that no open want outside it needs, decide nothing new while it is
        paused (nor do wants they derive, or it registers, meanwhile); runs they already follow finish.
        Idempotent."""
        await self.bel.call(self.bel.backfills.pause, backfill_id, paused)
        # A resume wakes every derivative below the backfill: each decides whether it is still paused.
        # Wants no window has started yet have no workflow to tell: each decides on its first step.
        wants = await self.bel.call(
            self.bel.backfills.reach, backfill_id, everything_below=not paused, started_only=True
        )
        client = await self.temporal_client()
        signal = SIGNAL_PAUSE if paused else SIGNAL_RESUME
        await gathered([signal_workflow(client, w.workflow_id, signal) for w in wants])
        if not paused:
            await self._run_window(backfill_id)
        return await self.backfill_progress(backfill_id)

    async def backfill_progress(self, backfill_id: str) -> BackfillProgress:
        """A backfill's wants, counted by state."""
        return await self.bel.call(self.bel.backfills.progress, backfill_id)

    async def wait(
        self,
        spec: WantSpec,
        *,
        on_update: Callable[[Want | None], Awaitable[None] | None] | None = None,
        on_progress: Callable[[FamilyProgress], Awaitable[None] | None] | None = None,
        every: float = 0.5,
    ) -> Want:
        """Wait until the want reaches a final state and return it (as recorded in the BEL). Every
        ``every`` seconds ``on_update`` gets the want, and ``on_progress`` the progress of its tree
        (once more at the end, final); one BEL query per look, made off the event loop."""
        handle = (await self.temporal_client()).get_workflow_handle(spec.workflow_id)
        result = asyncio.ensure_future(handle.result())
        try:
            while not result.done():
                await self._report(spec, on_update, on_progress)
                await asyncio.wait({result}, timeout=every)
            with contextlib.suppress(WorkflowFailureError):
                result.result()  # a failed want raises; its final state and reason are in the BEL
        finally:
            result.cancel()
        final = await self._final(spec.want_id)
        if on_progress is not None:
            await called(on_progress, await self.progress(spec))
        return final

    async def progress(self, spec: WantSpec) -> FamilyProgress:
        """How far the want and its fulfillment tree have come: the want, the wants of the tree and the
        state of their job runs."""
        return await self.bel.call(family_progress, self.bel, spec.want_id, spec.root_want_id)

    async def _report(
        self,
        spec: WantSpec,
        on_update: Callable[[Want | None], Awaitable[None] | None] | None,
        on_progress: Callable[[FamilyProgress], Awaitable[None] | None] | None,
    ) -> None:
        if on_progress is not None:
            progress = await self.progress(spec)
            await called(on_progress, progress)
            current = progress.want
        elif on_update is not None:
            current = await self.bel.call(self.bel.wants.find, spec.want_id)
        else:
            return
        if on_update is not None:
            await called(on_update, current)

    async def _final(self, want_id: str) -> Want:
        # The workflow records the final state before it completes; read it from the log.
        for _ in range(50):
            want = await self.bel.call(self.bel.wants.get, want_id)
            if want.state.is_final:
                return want
            await asyncio.sleep(0.1)
        return want

    async def publish(
        self,
        ref: str,
        *,
        instance_id: str | None = None,
        source: str | None = None,
        patterns: Sequence[str] = (),
        location: str | None = None,
    ) -> tuple[Partition, bool, int]:
        """Announce that ``ref`` is available and wake every want waiting for it. ``instance_id`` (the
        producer's instance UUID) makes repeats of one announcement change nothing; ``source`` names the
        producer; ``patterns``: those of the upstream subscription it came through; ``location``: where
        the data is (default: the ref's own folder under the storage root). Returns the
        partition, whether this call changed it, and how many wants were signalled. A ref the graph
        does not declare external, or outside ``patterns``, raises AnnouncementRefusedError."""
        graph = await self.loaded_graph()
        check_announcement(graph, ref, patterns)
        where = location or ref_uri(self.settings.storage_root, ref)
        partition, created = await self.bel.call(
            self.bel.partitions.publish_external, ref, instance_id, source, where
        )
        assert partition.instance_id is not None
        notice = PartitionAvailable(ref=ref, instance_id=partition.instance_id, job_run_id=partition.built_by)
        client = await self.temporal_client()
        signalled = (
            await notify_subscribers(
                client, self.bel, [ref], lambda _sub: (SIGNAL_PARTITION_AVAILABLE, notice)
            )
        ).heard
        # A newer instance is late data for the readers of the older one within their window. Asked on a
        # repeat too: the same news starts the same wants (none twice), and a first announcement whose
        # Temporal call failed after its commit is repeated to start them.
        await rebuild_late_readers(client, self.bel, graph, self.settings.task_queue, [ref])
        return partition, created, signalled

    async def pin(self, instance_id: str, *, pinned: bool = True, reason: str | None = None) -> Instance:
        """Keep an instance's data from garbage collection (``pinned=False`` lets it go again), e.g. the
        exact inputs of an analysis to be re-run later."""
        return await self.bel.call(
            self.bel.partitions.pin_instance, instance_id, pinned=pinned, reason=reason
        )

    async def resolve(self, ref: str) -> tuple[list[Partition], int]:
        """Clear the fail-lock on ``ref`` and on the outputs its failed job run locked with it (after
        fixing the cause); waiting wants decide again. Returns the partitions and wants woken."""
        partitions = await self.bel.call(self.bel.partitions.resolve, ref)
        return partitions, await self._redecide([p.ref for p in partitions], f"{ref} resolved")

    async def skip(self, ref: str) -> tuple[Partition, int]:
        """Retire ``ref``: it is never built again, and the wants waiting for it fail."""
        graph = await self.loaded_graph()
        graph.resolve(ref)  # a malformed ref, or one no job produces, is refused before recording
        partition = await self.bel.call(self.bel.partitions.skip, ref)
        return partition, await self._redecide([ref], f"{ref} retired")

    async def check(self, ref: str) -> Recheck:
        """Re-run ``ref``'s checks on its live instance and record the results. They run on a worker (it
        has the graph and a Spark session), as a ``Check`` workflow: a second request for the same ref
        meanwhile waits for the first's answer. A blocking failure takes the instance out of service
        and fail-locks ``ref`` (``Recheck.fail_locked``); the worker raises the `partition_fail_locked`
        alert."""
        validate_ref(ref)
        check_rules.checkable(await self.bel.call(self.bel.partitions.find, ref), ref)  # before any worker
        client = await self.temporal_client()
        return await recheck(client, self.settings.task_queue, ref, self.settings.check_timeout)

    async def taint_impact(self, ref: str) -> TaintImpact:
        """What tainting ``ref`` would affect (every instance built from its live one); records nothing."""
        return await self.bel.call(self.bel.partitions.taint_impact, ref)

    async def taint(
        self, ref: str, *, reason: str | None = None, cascade: bool = False, instance_id: str | None = None
    ) -> TaintResult:
        """Invalidate the live instance of ``ref``: the next want rebuilds it, and everything built from
        it shows as stale. ``cascade`` taints the current downstream too, so wants rebuild it as well;
        ``instance_id`` refuses (InvalidTransitionError) unless that is still the live instance, e.g.
        the one ``taint_impact`` showed."""
        return await self.bel.call(
            self.bel.partitions.taint, ref, reason=reason, cascade=cascade, instance_id=instance_id
        )

    async def _redecide(self, refs: list[str], reason: str) -> int:
        """Tell the wants subscribed to ``refs`` to decide again; returns how many will."""
        notified = await notify_subscribers(
            await self.temporal_client(),
            self.bel,
            refs,
            lambda sub: (SIGNAL_REDECIDE, RedecideNotice(ref=sub.ref, reason=reason)),
        )
        return notified.heard
