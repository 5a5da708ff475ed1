"""Latency of the detail and list views over a large build event log, on SQLite and PostgreSQL.

    python -m bench.bench_views [--events 1000000] [--backend sqlite|postgres|both] [--samples 200]

A consistent synthetic history is generated once by driving the domain's own rules
(``databuild.domain``: decisions, dep-miss bookkeeping, endings, publishes, taints, backfill windows) as the
store does: each command reads the state its rule takes from the projections of a scratch SQLite log, and
the events the rule returns are appended there and projected by the product's projector
(``databuild.bel.projector.apply``), a day per transaction. So the history is what the product would record;
only what no rule decides (a worker's start, what an attempt cost) is written as the worker writes it. The
log and its projections are then bulk-copied into a fresh log on each backend. Per day, 100 partitions:
raw/{day}/{k} (external) -> clean/{day}/{k} (also reads the shared dim/calendar) -> agg/{day}/{k} ->
report/{day}. Each day starts with a scheduled want for its report, fulfilled through dep-misses and
derivative wants; then taint-and-rebuild rounds (cascading taints, new instances) and wants answered by
historical delegation fill the day's share of the events. One report run is joined by thousands of wants
(active delegations) and each dim/calendar instance is read by thousands of runs, so the "+N more" paths
are exercised. Small runs check the copied events against the generated ones, and the copied projections
against a replay of the copied events through the projector (``--verify``): state is what the events
alone say.

Each view is then timed over random targets (p50, p95) against a primary-key lookup on the same
table measured in the same run, and checked against the target: every view under 50 ms p95. The
"cpu p95" column is this process's CPU time per call: on a busy machine a wall-clock p95 far above it
is time spent waiting for a CPU (or, on PostgreSQL, for the server); the "cpu" verdict judges that
alone. Rows marked "info" (taint impact of the hub, the events API) are not views and do not count
toward the target. "gc2" counts CPython's full garbage collections during a row's samples: each pauses
the process (tens of ms here). The last line printed is JSON: the figures and both verdicts.
"""

import argparse
import contextlib
import functools
import gc
import json
import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
from sqlalchemy import (
    Connection,
    Engine,
    Table,
    bindparam,
    create_engine,
    event,
    func,
    insert,
    inspect,
    select,
    text,
    update,
)

from databuild.backfill import BackfillRequest
from databuild.bel import BuildEventLog, projector
from databuild.bel import schema as s
from databuild.bel.aggregates.base import open_run
from databuild.bel.aggregates.decisions import followed_runs, open_batch, want_step
from databuild.bel.aggregates.wants import WANTS_OF
from databuild.bel.engine import direct
from databuild.bel.reads.partition_costs import refresh_partition_costs
from databuild.bel.reads.rows import job_run_row, partitions_at, want_rule_row, wants_and_links
from databuild.bel.reads.run_costs import refresh_run_costs
from databuild.domain import backfills as backfill_rules
from databuild.domain import decisions, endings
from databuild.domain import events as ev
from databuild.domain import partitions as partition_rules
from databuild.domain import wants as want_rules
from databuild.domain.cost import NO_COST, SparkCost
from databuild.graph import Graph, JobContext, Resolution
from databuild.models import (
    CheckResult,
    CheckSeverity,
    ImpactedInstance,
    InstanceRef,
    InstanceStatus,
    JobRunState,
    Partition,
    PartitionStatus,
    TaintImpact,
    WantSource,
    WantSpec,
    WantState,
)
from databuild.process import settle_heap
from databuild.testing import POSTGRES_URL, postgres_database
from databuild.testing.page_timing import PAGE_TARGET_MS, PageResult, time_pages
from databuild.views import lineage as views

T0 = datetime(2024, 1, 1, tzinfo=UTC)
TARGET_MS = 50.0
DIM = "dim/calendar"
CHUNK = 10_000  # rows per executemany, or per fetch of a COPY
WARMUP = 5
YEAR_OF_HOURS = 8_760
HOURLY_BATCH = 24  # the hourly job's batch: a day of one sensor per run
HOURLY_VERSION = "v1"  # the hourly job's declared code version, recorded on its instances
HOUR = timedelta(hours=1)
SURROGATE = {"read_deps", "consumers", "derivatives", "subscriptions", "delegations"}  # autoincrement ids

Row = dict[str, Any]


@dataclass(frozen=True)
class Shape:
    events: int
    days: int
    per_day: int  # partitions per day: 1 report + 3 per raw -> clean -> agg chain
    hub_readers: int  # runs that read one dim/calendar instance before it is republished
    joiners: int  # wants that delegate to one report run while it builds
    hourly: int = 0  # partitions of the hourly estate: a year of hours per sensor, batched 24 a run

    @property
    def sensors(self) -> int:
        return -(-self.hourly // YEAR_OF_HOURS)

    @property
    def chains(self) -> int:
        return max((self.per_day - 1) // 3, 1)


@dataclass
class Targets:
    """What the timed views are asked about, collected while the history is generated."""

    day_roots: list[str] = field(default_factory=list)  # the scheduled want that first built a day
    rebuild_roots: list[str] = field(default_factory=list)  # wants that rebuilt a day after taints
    wants: list[str] = field(default_factory=list)
    refs: list[str] = field(default_factory=list)
    reports: list[str] = field(default_factory=list)
    mid_chain: list[str] = field(default_factory=list)  # clean/ and agg/ refs
    instances: list[str] = field(default_factory=list)
    job_runs: list[str] = field(default_factory=list)
    days: list[str] = field(default_factory=list)
    joined_run: str = ""
    joined_count: int = 0
    hub_instance: str = ""
    hub_readers: int = 0
    hub_closure: int = 0  # instances built from the live dim/calendar instance, transitively
    events: int = 0
    # The hourly estate: a sample of its partitions (with their live instances), runs and wants
    hourly_refs: list[str] = field(default_factory=list)
    hourly_instances: list[str] = field(default_factory=list)
    hourly_runs: list[str] = field(default_factory=list)
    hourly_wants: list[str] = field(default_factory=list)
    backfills: list[str] = field(default_factory=list)  # a year of hours each
    hourly_total: int = 0  # partitions of the hourly estate


# What the generator reads back from the projections for its rules, beside the store's own row readers
# (``databuild.bel.reads.rows``) and statements.
_BACKFILL = select(s.backfills.c.started, s.backfills.c.paused, s.backfills.c.canceled).where(
    s.backfills.c.backfill_id == bindparam("backfill_id")
)
_MEMBERS = select(s.backfill_wants.c.want_id).where(
    s.backfill_wants.c.backfill_id == bindparam("backfill_id"),
    s.one_of(s.backfill_wants.c.want_id, "ids"),
)
_READERS = (
    select(func.count())
    .select_from(s.consumers)
    .where(s.consumers.c.input_instance_id == bindparam("instance_id"))
)
_BUILT_FROM = (
    select(s.consumers.c.output_instance_id, s.consumers.c.output_ref)
    .where(s.one_of(s.consumers.c.input_instance_id, "ids"))
    .order_by(s.consumers.c.id)
)
_INSTANCE_STATUS = select(s.partition_instances.c.instance_id, s.partition_instances.c.status).where(
    s.one_of(s.partition_instances.c.instance_id, "ids")
)


def _chunks(items: Sequence[str], size: int = 500) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class History:
    """Plays the product's commands through the domain's rules (``databuild.domain``): each command reads
    what its rule takes from the scratch log's projections, as the store reads it, and appends the events
    the rule returns, projected by the product's projector, so the next command reads them. Only what no
    rule decides (a worker's start, an attempt's cost) is recorded as the store records it. One
    transaction per day."""

    def __init__(self, shape: Shape, seed: int, conn: Connection) -> None:
        self.shape = shape
        self.rng = random.Random(seed)
        self.conn = conn
        self.pending: list[Row] = []  # event rows, inserted a chunk at a time (projections are not)
        self.idx = 0
        self.at = T0
        self.targets = Targets()
        self.estate_backfills: list[str] = []  # of the hourly estate, a sensor's year each
        self.graph = bench_graph()
        # Each ref of the detailed history is resolved at every decision about it; bounded, as the hourly
        # estate's million refs are resolved once or twice each.
        self.resolve = functools.lru_cache(maxsize=1 << 14)(self.graph.resolve)
        self.versions = {job.label: job.version for job in self.graph.jobs}  # the worker's, of each job

    # Events ----------------------------------------------------------------------------------------
    def emit(self, event: ev.Event) -> None:
        self.emit_all([event])

    def emit_all(self, events: Sequence[ev.Event]) -> None:
        """Events of one command, projected as the store projects them (a run of one type at once)."""
        for one in events:
            self.idx += 1
            want_id, job_run_id, ref = ev.event_keys(one)
            self.pending.append(
                {
                    "idx": self.idx,
                    "type": one.type,
                    "at": self.at,
                    "want_id": want_id,
                    "job_run_id": job_run_id,
                    "ref": ref,
                    "data": one.model_dump(mode="json"),
                }
            )
        projector.apply_all(self.conn, events, self.at)
        if len(self.pending) >= CHUNK:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.conn.execute(insert(s.events), self.pending)
            self.pending = []

    def commit(self) -> None:
        self.flush()
        self.conn.execute(update(s.head).where(s.head.c.id == 1).values(last_idx=self.idx))
        self.conn.commit()

    def tick(self) -> None:
        """A new command (one write transaction): its events share one timestamp."""
        self.at += timedelta(seconds=self.rng.randint(1, 3))

    # Current state, from the projections -----------------------------------------------------------
    def partition(self, ref: str) -> Partition | None:
        return partitions_at(self.conn, [ref])[ref]

    def live(self, ref: str) -> str | None:
        found = self.partition(ref)
        return found.instance_id if found is not None and found.status is PartitionStatus.live else None

    def generation(self, ref: str) -> int:
        found = self.partition(ref)
        return found.generation if found is not None else 0

    def want_rows(self, want_ids: Sequence[str]) -> dict[str, Mapping[str, Any]]:
        """The recorded ones of these wants, by id."""
        found: dict[str, Mapping[str, Any]] = {}
        for chunk in _chunks(want_ids):
            found.update(
                (row["want_id"], row) for row in direct.rows(self.conn, WANTS_OF, {"ids": list(chunk)})
            )
        return found

    def readers(self, instance_id: str) -> int:
        return int(self.conn.execute(_READERS, {"instance_id": instance_id}).scalar_one())

    def closure(self, instance_id: str) -> list[tuple[str, str, int]]:
        """(ref, instance, depth) built from this instance, transitively: BelQueries.downstream_closure."""
        seen = {instance_id}
        found: list[tuple[str, str, int]] = []
        frontier = [instance_id]
        depth = 0
        while frontier:
            depth += 1
            following = []
            for chunk in _chunks(frontier):
                for out, ref in self.conn.execute(_BUILT_FROM, {"ids": list(chunk)}):
                    if out not in seen:
                        seen.add(out)
                        following.append(out)
                        found.append((ref, out, depth))
            frontier = following
        return found

    def impact(self, ref: str, instance_id: str) -> TaintImpact:
        """What tainting the instance affects, as ``Partitions.taint_impact`` reads it."""
        downstream = self.closure(instance_id)
        status: dict[str, str] = {}
        for chunk in _chunks([i for _, i, _ in downstream]):
            status.update((i, st) for i, st in self.conn.execute(_INSTANCE_STATUS, {"ids": list(chunk)}))
        return TaintImpact(
            ref=ref,
            instance_id=instance_id,
            downstream=[
                ImpactedInstance(ref=r, instance_id=i, depth=d, current=status[i] == InstanceStatus.live)
                for r, i, d in downstream
            ],
        )

    def open_run(self, job_run_id: str) -> decisions.OpenRun:
        """The run with the outputs whose build lock it still holds, as its outcome's command reads them."""
        return open_run(self.conn, job_run_row(self.conn, job_run_id))

    def decision_state(self, want_id: str, resolution: Resolution) -> decisions.DecisionState:
        """What a decision of the want reads (``DecisionCommands._decision_state``). No backfill here is
        paused, no partition fail-locked, and the bench's jobs declare no inputs (they find them missing as
        they run): that part of the state is empty."""
        want, links = wants_and_links(self.conn, [want_id])[want_id]
        target = resolution.target
        partitions = partitions_at(self.conn, target.outputs if target is not None else [resolution.ref])
        return decisions.DecisionState(
            want=want_step(want_id, want, links),
            target=target,
            partitions=partitions,
            runs=followed_runs(self.conn, want, partitions),
            batch=open_batch(self.conn, target) if target is not None and target.job.batch else None,
        )

    # The jobs --------------------------------------------------------------------------------------
    def inputs(self, plan: decisions.RunPlan) -> list[str]:
        """What the job's body reads as it runs: none is declared, so an input not live is a dep-miss."""
        params = plan.params
        if plan.job_label == "clean":
            return [f"raw/{params['day']}/{params['part']}", DIM]
        if plan.job_label == "agg":
            return [f"clean/{params['day']}/{params['part']}"]
        if plan.job_label == "report":
            return [f"agg/{params['day']}/{k:02d}" for k in range(self.shape.chains)]
        return []

    def new_run_id(self) -> str:
        return f"jr-{self.rng.getrandbits(64):016x}"

    def new_instance_id(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    # Commands, each a rule over what it read -------------------------------------------------------
    def register(self, spec: WantSpec) -> bool:
        events = want_rules.created(spec, known=bool(self.want_rows([spec.want_id])))
        if events:
            self.tick()
            self.emit_all(events)
        return bool(events)

    def decide(self, spec: WantSpec) -> decisions.Verdict:
        """The want's next decision step, for the workflow run of its current opening."""
        state = self.decision_state(spec.want_id, self.resolve(spec.ref))
        want = state.want
        decided = decisions.decide(state, want.decision_seq + 1, self.new_run_id(), want.opening)
        self.emit_all(decided.events)
        return decided.verdict

    def publish(self, ref: str) -> str:
        """An external partition announced as an upstream graph announces it: by an instance id of its own,
        new each time (so never seen before)."""
        self.tick()
        instance_id = self.new_instance_id()
        events = partition_rules.publish(
            ref,
            self.partition(ref),
            instance_id=instance_id,
            seen_as=None,
            new_instance_id=instance_id,
            source=None,
            location=None,
        )
        self.emit_all(events)
        return instance_id

    def finish(self, instances: Mapping[str, str]) -> None:
        """Each want's workflow records it successful (want id -> its live instance), a want at a time."""
        rows = self.want_rows(list(instances))
        for want_id, instance_id in instances.items():
            self.tick()
            row = rows[want_id]
            ending = endings.finish(
                want_id,
                WantState(row["state"]),
                row["opening"],
                WantState.successful,
                instance_id=instance_id,
                run_opening=row["opening"],
            )
            self.emit_all(ending.events)

    def start(self, job_run_id: str, attempt: int, worker: str) -> list[InstanceRef]:
        """An attempt starts (``start_attempt``), writing each output to a new instance of its own."""
        row = job_run_row(self.conn, job_run_id)
        outputs = list(row["outputs"])
        planned = [InstanceRef(ref=ref, instance_id=self.new_instance_id()) for ref in outputs]
        state = JobRunState(row["state"])
        self.emit_all(decisions.started(job_run_id, state, outputs, attempt, worker, planned))
        return planned

    def spent(self, job_run_id: str, attempt: int, job_label: str, cost: SparkCost) -> ev.JobRunCostRecorded:
        """What an attempt cost, from Spark's accounting: recorded in the commit of its outcome, however
        it ended, as a worker records it (no rule decides it)."""
        return ev.JobRunCostRecorded(
            job_run_id=job_run_id, attempt=attempt, job_label=job_label, executor="session", cost=cost
        )

    def fulfil(self, spec: WantSpec, joiners: int = 0) -> None:
        """The want's workflow, from its first decision until it ends: it follows the run it queued (or
        waits for the announcement of an external ref), and after a dep-miss wants the missing inputs and
        decides again. ``joiners``: wants for the same ref that delegate to its successful run while it
        builds."""
        while True:
            self.tick()
            verdict = self.decide(spec)
            if isinstance(verdict, decisions.Live | decisions.Final):
                return
            if isinstance(verdict, decisions.WaitExternal):
                self.finish({spec.want_id: self.publish(spec.ref)})
                return
            # One command at a time: no other run builds the ref, nothing is fail-locked or paused.
            assert isinstance(verdict, decisions.Execute), verdict
            missing = self.build(spec, verdict, joiners)
            if not missing:
                return
            self.await_inputs(spec, verdict.job_run_id, missing)

    def build(self, spec: WantSpec, plan: decisions.Execute, joiners: int) -> list[str]:
        """The queued run, as a worker runs it: it starts (again, if its worker is lost), reads its inputs,
        and either misses some (returned) or publishes, with its checks, and its wants end successful."""
        run_id = plan.job_run_id
        if plan.job_label == "clean":
            self.renew_hub()
        found = partitions_at(self.conn, self.inputs(plan))
        live = {
            ref: p.instance_id
            for ref, p in found.items()
            if p is not None and p.status is PartitionStatus.live and p.instance_id
        }
        missing = sorted(set(found) - set(live))
        self.tick()
        attempt = 1
        writes = self.start(run_id, attempt, "worker-1")
        if self.rng.random() < 0.03:  # a lost worker: the run is retried
            self.tick()
            attempt = 2
            writes = self.start(run_id, attempt, "worker-2")
        joined = self.join(spec, run_id, joiners) if not missing else []
        self.tick()
        reads = [InstanceRef(ref=ref, instance_id=instance) for ref, instance in live.items()]
        if missing:  # its body looked for its inputs and stopped, with no Spark work done
            cost = self.spent(run_id, attempt, plan.job_label, NO_COST)
            self.emit_all([cost, *decisions.dep_missed(self.open_run(run_id), missing, reads)])
            return missing
        # Its checks passed (a row count, as the demo declares).
        passed = CheckResult(
            name="row_count", ref=spec.ref, severity=CheckSeverity.blocking, passed=True, message="1,000 rows"
        )
        spent = SparkCost(task_seconds=2.5, cpu_seconds=1.5, tasks=4, spark_jobs=1)
        self.succeed(plan, attempt, reads, writes, spent, {spec.ref: [passed]})
        instance_id = writes[0].instance_id
        assert instance_id is not None
        self.finish(dict.fromkeys([spec.want_id, *joined], instance_id))
        return []

    def succeed(
        self,
        plan: decisions.RunPlan,
        attempt: int,
        reads: list[InstanceRef],
        writes: list[InstanceRef],
        spent: SparkCost,
        checks: Mapping[str, Sequence[CheckResult]] | None = None,
    ) -> None:
        """The attempt publishes, in one commit with what it cost (``job_runs.succeed``): each instance it
        wrote goes live at its location, built by the worker's version of the job, with its checks."""
        run_id = plan.job_run_id
        locations = {w.ref: f"file:///lake/{w.ref}/~{w.instance_id}" for w in writes}
        version = self.versions[plan.job_label]
        published = decisions.succeeded(
            self.open_run(run_id), reads, writes, locations, checks=checks, job_version=version
        )
        self.emit_all([self.spent(run_id, attempt, plan.job_label, spent), *published])

    def await_inputs(self, spec: WantSpec, job_run_id: str, missing: list[str]) -> None:
        """The want waits for the inputs its run missed (``await_dependencies``), with a derivative want
        for each, and the workflow of each derivative that has not ended runs to its end."""
        self.tick()
        found = partitions_at(self.conn, missing)
        generations = {ref: p.generation if p is not None else 0 for ref, p in found.items()}
        derivatives = [spec.derive(ref, spec.want_id, generations[ref]) for ref in missing]
        rows = self.want_rows([spec.want_id, *(d.want_id for d in derivatives)])
        want = rows[spec.want_id]
        known = {d.want_id: want_rule_row(r) for d in derivatives if (r := rows.get(d.want_id)) is not None}
        awaited = want_rules.await_dependencies(
            want_rules.Dependencies(
                want_id=spec.want_id,
                job_run_id=job_run_id,
                state=WantState(want["state"]),
                following=want["job_run_id"],
                missing=missing,
                generations=generations,
                partitions=found,
                derivatives=derivatives,
                known=known,
                opening=want["opening"],
                run_opening=want["opening"],
            )
        )
        self.emit_all(awaited.events)
        for derivative in awaited.unfinished:
            self.fulfil(derivative.spec)

    def join(self, spec: WantSpec, run_id: str, count: int) -> list[str]:
        """Wants for the same ref arriving while the run builds: each decides to delegate to it (active)."""
        generation = self.generation(spec.ref)
        joined = []
        for i in range(count):
            other = WantSpec(
                ref=spec.ref,
                data_timestamp=spec.data_timestamp + timedelta(seconds=i + 1),
                source=WantSource.dashboard,
                generation=generation,
            )
            if not self.register(other):
                continue
            self.tick()
            verdict = self.decide(other)
            assert isinstance(verdict, decisions.Delegate) and verdict.job_run_id == run_id, verdict
            joined.append(other.want_id)
        if len(joined) > self.targets.joined_count:
            self.targets.joined_run, self.targets.joined_count = run_id, len(joined)
        return joined

    def renew_hub(self) -> None:
        """Republish dim/calendar once its live instance has been read by ``hub_readers`` runs."""
        current = self.live(DIM)
        readers = self.readers(current) if current is not None else 0
        if current is None or readers >= self.shape.hub_readers:
            if current is not None and readers > self.targets.hub_readers:
                self.targets.hub_instance, self.targets.hub_readers = current, readers
            self.publish(DIM)

    def taint(self, ref: str, reason: str) -> None:
        """``taint --cascade``: the live instance, and every current instance built from it."""
        self.tick()
        partition = partition_rules.taintable(self.partition(ref), ref)
        assert partition.instance_id is not None
        impact = self.impact(ref, partition.instance_id)
        cascaded = sorted({d.ref for d in impact.current})
        tainting = partition_rules.taint(
            partition,
            impact,
            reason=reason,
            looked_at=None,
            cascaded=cascaded,
            now=partitions_at(self.conn, cascaded),
        )
        self.emit_all(tainting.events)

    def enroll(
        self, request: BackfillRequest, partitions: int, specs: Sequence[WantSpec], first: int
    ) -> None:
        """``specs`` registered as the backfill's wants at places ``first`` on (``backfills.record``), then
        started by its window (a step of ``advance``, recorded by ``moved``), as wide as ``specs``: the
        wants it started before have ended."""
        backfill_id = request.backfill_id
        ids = [spec.want_id for spec in specs]
        recorded = self.conn.execute(_BACKFILL, {"backfill_id": backfill_id}).mappings().first()
        states = {want_id: WantState(row["state"]) for want_id, row in self.want_rows(ids).items()}
        members = set(self.conn.execute(_MEMBERS, {"backfill_id": backfill_id, "ids": ids}).scalars())
        canceled = None if recorded is None else bool(recorded["canceled"])
        self.emit_all(
            backfill_rules.register(
                request, partitions, specs, first_seq=first, canceled=canceled, wants=states, members=members
            )
        )
        window = self.conn.execute(_BACKFILL, {"backfill_id": backfill_id}).mappings().one()
        step = backfill_rules.advance(
            started=window["started"],
            open_wants=0,
            window=len(specs),
            paused=bool(window["paused"]),
            canceled=bool(window["canceled"]),
            following=[(seq, i, states.get(i, WantState.new)) for seq, i in enumerate(ids, first)],
        )
        started = window["started"]
        self.emit_all(backfill_rules.moved(backfill_id, current=started, read=started, to=step.started))

    def commit_table(self, ref: str, *, failed_first: bool) -> None:
        """The report's commit to its Iceberg table, as the worker records it after the build's (a first one
        that failed, then the one that landed, when ``failed_first``)."""
        if failed_first:
            reason = "cannot open the Iceberg catalog: connection refused"
            self.emit(
                ev.TableCommitFailed(table="default.report", format="iceberg", refs=[ref], reason=reason)
            )
        self.emit(
            ev.TableCommitted(
                table="default.report",
                format="iceberg",
                snapshot_id=self.idx,
                committed_at=self.at,
                instances=[InstanceRef(ref=ref, instance_id=self.live(ref))],
            )
        )

    # The history -----------------------------------------------------------------------------------
    def run(self, progress: Callable[[int], None]) -> None:
        shape = self.shape
        # The worker that built it all, with the version of each job it runs, as a worker records itself.
        self.emit(
            ev.WorkerStarted(
                identity="bench:1:000000", task_queue="bench", graph="views", versions=self.versions
            )
        )
        self.publish(DIM)
        # The daily reports are also followed as one backfill (its progress is a view like the others).
        days = BackfillRequest(
            pattern="report/{date}", start=T0, end=T0 + timedelta(days=shape.days - 1), step=timedelta(days=1)
        )
        for day in range(shape.days):
            start = T0 + timedelta(days=day)
            ds = start.date().isoformat()
            self.targets.days.append(ds)
            self.at = max(self.at, start + timedelta(hours=1))
            first = self.idx
            budget = (shape.events - self.idx) // (shape.days - day)
            spec = WantSpec(
                ref=f"report/{ds}", data_timestamp=start, sla=timedelta(hours=9), source=WantSource.schedule
            )
            self.tick()
            self.enroll(days, shape.days, [spec], day)
            self.targets.day_roots.append(spec.want_id)
            self.fulfil(spec, joiners=shape.joiners if day == shape.days // 2 else 0)
            self.commit_table(spec.ref, failed_first=day == 0)
            rebuilt = historical = 0
            while self.idx - first < budget:
                before = self.idx
                if rebuilt <= historical:
                    self.rebuild(start, ds)
                    rebuilt += self.idx - before
                else:
                    self.historical_want(start, ds)
                    historical += self.idx - before
            self.commit()
            progress(day)

    def rebuild(self, start: datetime, ds: str) -> None:
        """Late data for a few raw partitions: taint them (cascading), then a scheduled want rebuilds."""
        chains = self.shape.chains
        for k in self.rng.sample(range(chains), self.rng.randint(1, min(3, chains))):
            self.taint(f"raw/{ds}/{k:02d}", "late-arriving data")
        report = f"report/{ds}"
        spec = WantSpec(
            ref=report, data_timestamp=start, source=WantSource.schedule, generation=self.generation(report)
        )
        if self.register(spec):
            self.targets.rebuild_roots.append(spec.want_id)
            self.fulfil(spec, joiners=self.rng.choice((0, 0, 0, 1, 2)))

    def historical_want(self, start: datetime, ds: str) -> None:
        """A want for something already built: it delegates to the run that built it."""
        layer = self.rng.choice(("clean", "agg", "report"))
        ref = (
            f"report/{ds}"
            if layer == "report"
            else f"{layer}/{ds}/{self.rng.randrange(self.shape.chains):02d}"
        )
        spec = WantSpec(
            ref=ref,
            data_timestamp=start + timedelta(minutes=self.rng.randrange(24 * 60)),
            source=self.rng.choice((WantSource.dashboard, WantSource.api)),
            generation=self.generation(ref),
        )
        if self.register(spec):
            self.fulfil(spec)

    def hourly_estate(self, progress: Callable[[int], None]) -> None:
        """The bulk of a big estate: a year of hourly partitions per sensor (``hourly/s000/2024-01-01T00``),
        each sensor's year one backfill whose wants a batched job builds, a day per run."""
        remaining = self.shape.hourly
        for sensor in range(self.shape.sensors):
            hours = min(remaining, YEAR_OF_HOURS)
            remaining -= hours
            request = BackfillRequest(
                pattern=f"hourly/s{sensor:03d}/{{hour}}", start=T0, end=T0 + (hours - 1) * HOUR, step=HOUR
            )
            self.estate_backfills.append(request.backfill_id)
            for first in range(0, hours, HOURLY_BATCH):
                self.hourly_batch(request, hours, first, min(HOURLY_BATCH, hours - first))
            self.commit()
            progress(sensor)

    def hourly_batch(self, request: BackfillRequest, hours: int, first: int, count: int) -> None:
        """A day of the sensor's backfill: its wants registered and started, each deciding in turn (the
        first queues the batched run, the others join it), then the run builds them all."""
        stamps = [T0 + (first + k) * HOUR for k in range(count)]
        specs = [
            WantSpec(
                ref=request.pattern.format(hour=f"{at:%Y-%m-%dT%H}"),
                data_timestamp=at,
                source=WantSource.backfill,
            )
            for at in stamps
        ]
        self.tick()
        self.enroll(request, hours, specs, first)
        plans = []
        for spec in specs:
            self.tick()
            verdict = self.decide(spec)
            assert isinstance(verdict, decisions.Execute | decisions.Delegate), verdict
            plans.append(verdict)
        run_id = plans[0].job_run_id
        assert all(plan.job_run_id == run_id for plan in plans), plans
        self.tick()
        writes = self.start(run_id, 1, "worker-1")
        self.tick()
        spent = SparkCost(task_seconds=12.0, cpu_seconds=9.0, tasks=8, spark_jobs=1)
        self.succeed(plans[0], 1, [], writes, spent)
        built = {w.ref: w.instance_id for w in writes if w.instance_id is not None}
        self.finish({spec.want_id: built[spec.ref] for spec in specs})

    def collect_hourly(self, t: Targets) -> None:
        """A sample of the hourly estate's partitions, wants and runs, and its backfills."""
        rows = self.conn.execute(
            select(s.partitions.c.ref, s.partitions.c.instance_id, s.partitions.c.built_by)
            .where(s.partitions.c.ref.like("hourly/%"))
            .order_by(func.random())
            .limit(2_000)
        ).all()
        t.hourly_refs = [r.ref for r in rows]
        t.hourly_instances = [r.instance_id for r in rows]
        t.hourly_runs = sorted({r.built_by for r in rows})
        t.hourly_wants = list(
            self.conn.execute(
                select(s.wants.c.want_id).where(s.wants.c.ref.in_(t.hourly_refs[:500]))
            ).scalars()
        )
        t.backfills = list(self.estate_backfills)
        t.hourly_total = self.shape.hourly
        t.events = self.idx

    def collect_targets(self) -> Targets:
        def keys(table: Table) -> list[str]:
            key = next(iter(table.primary_key.columns))
            return list(self.conn.execute(select(key).order_by(key)).scalars())

        t = self.targets
        t.wants = keys(s.wants)
        t.refs = keys(s.partitions)
        t.reports = [r for r in t.refs if r.startswith("report/")]
        live = set(
            self.conn.execute(select(s.partitions.c.ref).where(s.partitions.c.status == "live")).scalars()
        )
        t.mid_chain = [r for r in t.refs if r.startswith(("clean/", "agg/")) and r in live]
        t.instances = keys(s.partition_instances)
        t.job_runs = keys(s.job_runs)
        t.hub_closure = len(self.closure(self.live(DIM) or ""))
        t.backfills = keys(s.backfills)
        t.events = self.idx
        return t


# Fill ----------------------------------------------------------------------------------------------


def scratch_log(path: Path, *, fresh: bool = True) -> Engine:
    """An empty log for the generator (``fresh``; else the one kept at ``path``), without durability."""
    engine = create_engine(f"sqlite:///{path}")

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA synchronous=OFF")
        cursor.execute("PRAGMA journal_mode=MEMORY")
        cursor.execute("PRAGMA cache_size=-500000")  # 500 MB
        cursor.close()

    if fresh:
        s.metadata.create_all(engine)
        with engine.begin() as conn:
            conn.execute(insert(s.head).values(id=1, last_idx=0))
    return engine


@dataclass
class Generated:
    seconds: float
    targets: Targets


def generate(scratch: Engine, shape: Shape, seed: int) -> Generated:
    start = time.perf_counter()
    with scratch.connect() as conn:
        history = History(shape, seed, conn)
        step = max(shape.days // 10, 1)

        def progress(day: int) -> None:
            if (day + 1) % step == 0 or day + 1 == shape.days:
                print(
                    f"  history: day {day + 1}/{shape.days}: {history.idx:,} events, "
                    f"{time.perf_counter() - start:.0f} s",
                    flush=True,
                )

        history.run(progress)
        targets = history.collect_targets()  # the views below ask about the detailed history

        def estate(sensor: int) -> None:
            if (sensor + 1) % 10 == 0 or sensor + 1 == shape.sensors:
                print(
                    f"  hourly estate: sensor {sensor + 1}/{shape.sensors}: {history.idx:,} events, "
                    f"{time.perf_counter() - start:.0f} s",
                    flush=True,
                )

        if shape.hourly:
            history.hourly_estate(estate)
            history.collect_hourly(targets)
    return Generated(time.perf_counter() - start, targets)


@dataclass
class Fill:
    seconds: float  # copying the scratch log into this backend's fresh log
    analyze_seconds: float
    counts: dict[str, int]
    verified: bool | None = None  # the copied projections equal a replay of the copied events
    load_before: float = 0.0  # 1-minute load average when the timing started and ended (2 cores here)
    load_after: float = 0.0


def copy_log(scratch: Engine, bel: BuildEventLog) -> None:
    """Every row of the events and the projections, surrogate ids and all, a chunk at a time. A history
    kept (``--keep``) from before the cost reports by partition, and by job and day, were kept has those
    tables summed here."""
    with scratch.connect() as source, bel.writer.begin() as target:
        if target.dialect.name == "sqlite":
            target.exec_driver_sql("PRAGMA cache_size=-500000")  # 500 MB for this connection's bulk load
        held = set(inspect(source).get_table_names())
        for table in [s.events, *(t for t in s.PROJECTIONS if t.name in held)]:
            if target.dialect.name == "postgresql":
                copy_table(source, target, table)
                continue
            rows = source.execution_options(yield_per=CHUNK).execute(
                select(table).order_by(*table.primary_key.columns)
            )
            for batch in rows.mappings().partitions():
                target.execute(insert(table), [dict(row) for row in batch])
        if s.partition_costs.name not in held:
            refresh_partition_costs(target, None)
        if s.run_day_costs.name not in held:
            refresh_run_costs(target, None)
        last_idx = source.execute(select(s.head.c.last_idx).where(s.head.c.id == 1)).scalar_one()
        target.execute(update(s.head).where(s.head.c.id == 1).values(last_idx=last_idx))
        if target.dialect.name == "postgresql":  # explicit ids were inserted: move the sequences past them
            for name in sorted(SURROGATE):
                sequence = f"pg_get_serial_sequence('{name}', 'id')"
                target.execute(
                    text(f"SELECT setval({sequence}, COALESCE(MAX(id), 0) + 1, false) FROM {name}")
                )


def copy_table(source: Connection, target: Connection, table: Table) -> None:
    """One table from the scratch SQLite log into PostgreSQL with ``COPY``: rows a statement at a time
    through SQLAlchemy took 74 minutes for the big BEL's 15 million rows. The scratch log's values go
    as SQLite holds them (JSON as its text, booleans as 0 or 1, datetimes as naive UTC text, read in
    the session's zone, set to UTC here): PostgreSQL parses each by its column's type."""
    held = {column["name"] for column in inspect(source).get_columns(table.name)}
    columns = [column.name for column in table.columns if column.name in held]  # a kept log may lack new ones
    names = ", ".join(f'"{name}"' for name in columns)
    keys = ", ".join(f'"{c.name}"' for c in table.primary_key.columns)
    rows = source.exec_driver_sql(f'SELECT {names} FROM "{table.name}" ORDER BY {keys}')
    driver = target.connection.driver_connection
    assert isinstance(driver, psycopg.Connection), driver
    cursor = driver.cursor()  # psycopg's own: SQLAlchemy has no COPY
    cursor.execute("SET LOCAL TIME ZONE 'UTC'")
    with cursor.copy(f'COPY "{table.name}" ({names}) FROM STDIN') as copy:
        while batch := rows.fetchmany(CHUNK):
            for row in batch:
                copy.write_row(row)


def fill(bel: BuildEventLog, scratch: Engine) -> Fill:
    start = time.perf_counter()
    copy_log(scratch, bel)
    seconds = time.perf_counter() - start
    start = time.perf_counter()
    analyze(bel)
    return Fill(seconds, time.perf_counter() - start, row_counts(bel))


def analyze(bel: BuildEventLog) -> None:
    """Statistics for the planner; on PostgreSQL a vacuum too, as autovacuum would do after a bulk load: left
    to it, it ran in the middle of the timings (a big BEL's first run had multi-second p95s), and until a
    table is vacuumed its index-only scans visit the table's pages anyway."""
    if bel.writer.dialect.name == "postgresql":
        with bel.writer.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("VACUUM (ANALYZE)")
        return
    with bel.writer.begin() as conn:
        conn.exec_driver_sql("ANALYZE")
    raw = bel.writer.raw_connection()  # outside SQLAlchemy's BEGIN: a checkpoint needs no transaction
    try:
        raw.cursor().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        raw.close()


def last_idx(bel: BuildEventLog) -> int:
    with bel.reader.connect() as conn:
        return int(conn.execute(select(s.head.c.last_idx).where(s.head.c.id == 1)).scalar_one())


def row_counts(bel: BuildEventLog) -> dict[str, int]:
    with bel.reader.connect() as conn:
        return {
            t.name: int(conn.execute(select(func.count()).select_from(t)).scalar_one())
            for t in [s.events, *s.PROJECTIONS]
        }


def snapshot(bel: BuildEventLog) -> dict[str, list[str]]:
    """Every projection row, without surrogate ids (in id order where they have one)."""
    found = {}
    with bel.reader.connect() as conn:
        for table in [*s.PROJECTIONS, s.head]:
            if table.name in SURROGATE:
                cols = [c for c in table.c if c.name != "id"]
                rows = [
                    json.dumps(list(r), default=str) for r in conn.execute(select(*cols).order_by(table.c.id))
                ]
            else:
                rows = sorted(json.dumps(list(r), default=str) for r in conn.execute(select(table)))
            found[table.name] = rows
    return found


def verify(bel: BuildEventLog, scratch: Engine) -> float:
    """The copied events are the scratch log's, value for value as each backend's types read them (on
    PostgreSQL they went as text with ``COPY``), and the copied projections equal a replay of them
    through the projector."""
    start = time.perf_counter()
    with scratch.connect() as source, bel.reader.connect() as target:
        by_idx = select(s.events).order_by(s.events.c.idx)
        if [tuple(r) for r in source.execute(by_idx)] != [tuple(r) for r in target.execute(by_idx)]:
            raise AssertionError("the copied events differ from the generated history's")
    copied = snapshot(bel)
    bel.events.rebuild_projections()
    replayed = snapshot(bel)
    for name, rows in copied.items():
        if rows != replayed[name]:
            extra = sorted(set(rows) - set(replayed[name]))[:3]
            missing = sorted(set(replayed[name]) - set(rows))[:3]
            raise AssertionError(
                f"{name}: copied {len(rows)} rows, replay {len(replayed[name])}; "
                f"only in the copy: {extra}; only in the replay: {missing}"
            )
    return time.perf_counter() - start


# Timing --------------------------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    run: Callable[[str], object]
    targets: Sequence[str]
    table: Table  # the baseline: a primary-key lookup on this table
    keys: Sequence[object]  # ... for one of these
    gated: bool = True  # counts toward "every view under 50 ms p95"


@dataclass
class Result:
    backend: str
    view: str
    p50: float
    p95: float
    base_p50: float
    base_p95: float
    cpu_p95: float  # this process's CPU time: the wall-clock p95 minus waiting (for the database or the CPU)
    full_gcs: int  # full garbage collections while it was timed (each one pauses this process)
    gated: bool

    @property
    def ratio(self) -> float:
        return self.p95 / self.base_p95 if self.base_p95 else float("inf")

    @property
    def verdict(self) -> str:
        return judge(self.gated, self.p95)

    @property
    def cpu_verdict(self) -> str:
        """The view's own work: its wall-clock p95 less the time this process waited for a CPU."""
        return judge(self.gated, self.cpu_p95)


def judge(gated: bool, p95: float) -> str:
    if not gated:
        return "info"
    return "PASS" if p95 < TARGET_MS else "FAIL"


def overall(verdicts: Iterable[str]) -> str:
    return "FAIL" if "FAIL" in verdicts else "PASS"


def pk_lookup(bel: BuildEventLog, table: Table) -> Callable[[object], object]:
    key = next(iter(table.primary_key.columns))
    query = select(table).where(key == bindparam("key"))

    def run(value: object) -> object:
        with bel.reader.connect() as conn:
            return conn.execute(query, {"key": value}).mappings().all()

    return run


def cases(bel: BuildEventLog, t: Targets) -> list[Case]:
    pages = [str(o) for o in range(0, 1000, 50)]
    prefixes = [f"{layer}/{day}" for layer in ("clean", "agg", "report") for day in t.days]
    states = [JobRunState.succeeded, JobRunState.dep_miss, JobRunState.skipped]
    labels = ("clean", "agg", "report")
    filters = [f"{label}:{state.value}" for label in labels for state in states]

    def runs_by_label(value: str) -> object:
        label, state = value.split(":")
        return views.list_job_runs(bel, job_label=label, state=JobRunState(state))

    hub = [t.hub_instance] if t.hub_instance else []
    globs = [f"{layer}/{day}/*" for layer in ("clean", "agg") for day in t.days]
    idx = range(1, t.events + 1)
    return [
        Case(
            "want_view (day's first build)",
            lambda w: views.want_view(bel, w),
            t.day_roots,
            s.wants,
            t.day_roots,
        ),
        Case(
            "want_view (rebuild)",
            lambda w: views.want_view(bel, w),
            t.rebuild_roots,
            s.wants,
            t.rebuild_roots,
        ),
        Case("want_view (any want)", lambda w: views.want_view(bel, w), t.wants, s.wants, t.wants),
        Case("partition_view", lambda r: views.partition_view(bel, r), t.refs, s.partitions, t.refs),
        Case(
            "partition_view (report/)",
            lambda r: views.partition_view(bel, r),
            t.reports,
            s.partitions,
            t.reports,
        ),
        Case("instance_view", lambda i: views.instance_view(bel, i), t.instances, s.partitions, t.refs),
        Case(
            f"instance_view (hub, {t.hub_readers} readers)",
            lambda i: views.instance_view(bel, i),
            hub,
            s.partitions,
            [DIM],
        ),
        Case("job_run_view", lambda j: views.job_run_view(bel, j), t.job_runs, s.job_runs, t.job_runs),
        Case(
            f"job_run_view ({t.joined_count} delegations)",
            lambda j: views.job_run_view(bel, j),
            [t.joined_run],
            s.job_runs,
            [t.joined_run],
        ),
        Case("list_wants (page)", lambda o: views.list_wants(bel, offset=int(o)), pages, s.wants, t.wants),
        Case(
            "list_wants (ref prefix)",
            lambda p: views.list_wants(bel, ref_prefix=p),
            prefixes,
            s.wants,
            t.wants,
        ),
        Case(
            "list_partitions (page)",
            lambda o: views.list_partitions(bel, offset=int(o)),
            pages,
            s.partitions,
            t.refs,
        ),
        Case(
            "list_partitions (ref prefix)",
            lambda p: views.list_partitions(bel, ref_prefix=p),
            prefixes,
            s.partitions,
            t.refs,
        ),
        Case(
            "list_job_runs (page)",
            lambda o: views.list_job_runs(bel, offset=int(o)),
            pages,
            s.job_runs,
            t.job_runs,
        ),
        Case(
            "list_job_runs (ref prefix)",
            lambda p: views.list_job_runs(bel, ref_prefix=p),
            prefixes,
            s.job_runs,
            t.job_runs,
        ),
        Case("list_job_runs (label+state)", runs_by_label, filters, s.job_runs, t.job_runs),
        Case(
            "taint_impact (clean/, agg/)", bel.partitions.taint_impact, t.mid_chain, s.partitions, t.mid_chain
        ),
        Case(
            f"taint_impact (dim/calendar, {t.hub_closure} down)",
            bel.partitions.taint_impact,
            [DIM],
            s.partitions,
            [DIM],
            gated=False,
        ),
        *hourly_cases(bel, t),
        # Not a view: the events API a downstream graph tails, listed for its ref-prefix filter.
        Case(
            "events (pattern, since 0)",
            lambda g: bel.events.query(pattern=g),
            globs,
            s.events,
            idx,
            gated=False,
        ),
    ]


def hourly_cases(bel: BuildEventLog, t: Targets) -> list[Case]:
    """The views of the hourly estate (none without one)."""
    if not t.hourly_refs:
        return []
    prefixes = [ref.rsplit("-", 1)[0] for ref in t.hourly_refs[:50]]  # a sensor's month: 720 partitions
    return [
        Case(
            "partition_view (hourly)",
            lambda r: views.partition_view(bel, r),
            t.hourly_refs,
            s.partitions,
            t.refs,
        ),
        Case(
            "instance_view (hourly)",
            lambda i: views.instance_view(bel, i),
            t.hourly_instances,
            s.partitions,
            t.refs,
        ),
        Case(
            f"job_run_view (batch of {HOURLY_BATCH})",
            lambda j: views.job_run_view(bel, j),
            t.hourly_runs,
            s.job_runs,
            t.job_runs,
        ),
        Case("want_view (backfill's)", lambda w: views.want_view(bel, w), t.hourly_wants, s.wants, t.wants),
        Case(
            "list_partitions (a sensor's month)",
            lambda p: views.list_partitions(bel, ref_prefix=p),
            prefixes,
            s.partitions,
            t.refs,
        ),
        Case(
            f"backfill_progress ({min(t.hourly_total, YEAR_OF_HOURS):,} wants)",
            bel.backfills.progress,
            t.backfills,
            s.wants,
            t.wants,
        ),
    ]


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return statistics.median(ordered) * 1000, p95 * 1000


class FullCollections:
    """Counts CPython's full (generation 2) garbage collections: each pauses the process."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and info["generation"] == 2:
            self.count += 1


FULL_GCS = FullCollections()


def time_case(bel: BuildEventLog, case: Case, samples: int, rng: random.Random) -> tuple[float, ...]:
    """(p50, p95, baseline p50, baseline p95, client CPU p95, full GCs) in ms; view and baseline alternate."""
    baseline = pk_lookup(bel, case.table)
    collections = FULL_GCS.count
    measured: list[float] = []
    cpu: list[float] = []
    base: list[float] = []
    for i in range(WARMUP + samples):
        target, key = rng.choice(case.targets), rng.choice(case.keys)
        t, c = time.perf_counter(), time.thread_time()
        case.run(target)
        elapsed, cpu_elapsed = time.perf_counter() - t, time.thread_time() - c
        t = time.perf_counter()
        baseline(key)
        base_elapsed = time.perf_counter() - t
        if i >= WARMUP:
            measured.append(elapsed)
            cpu.append(cpu_elapsed)
            base.append(base_elapsed)
        else:
            collections = FULL_GCS.count
    return (*percentiles(measured), *percentiles(base), percentiles(cpu)[1], FULL_GCS.count - collections)


def bench_backend(
    name: str,
    url: str,
    scratch: Engine,
    targets: Targets,
    samples: int,
    seed: int,
    check: bool,
    page_samples: int,
) -> tuple[Fill, list[Result], list[PageResult]]:
    bel = BuildEventLog.create(url)
    try:
        if last_idx(bel) == targets.events:  # a log kept by an earlier run (--into) with this history
            print(f"\n[{name}] the log already holds this history: timing it", flush=True)
            filled = Fill(0.0, 0.0, row_counts(bel))
        else:
            print(f"\n[{name}] copying the history into a fresh BEL", flush=True)
            filled = fill(bel, scratch)
        print(
            f"[{name}] copied in {filled.seconds:.1f} s, ANALYZE {filled.analyze_seconds:.1f} s", flush=True
        )
        if check:
            print(
                f"[{name}] verified: the events as generated, the projections a replay of them "
                f"({verify(bel, scratch):.1f} s)",
                flush=True,
            )
            filled.verified = True
            analyze(bel)
        rng = random.Random(seed + 1)
        results = []
        # Start timing from a settled heap, as the web server and the worker do (databuild.process):
        # otherwise the fill's objects skew when full collections happen while the views are timed.
        settle_heap()
        filled.load_before = os.getloadavg()[0]
        for case in cases(bel, targets):
            if not case.targets or not all(case.targets[:1]):
                continue
            p50, p95, b50, b95, cpu95, full_gcs = time_case(bel, case, samples, rng)
            results.append(Result(name, case.name, p50, p95, b50, b95, cpu95, int(full_gcs), case.gated))
            print(f"  [{name}] {case.name}: p50 {p50:.2f} ms, p95 {p95:.2f} ms", flush=True)
        pages = (
            time_pages(bel, url, bench_graph(), web_pages(targets), page_samples, rng) if page_samples else []
        )
        filled.load_after = os.getloadavg()[0]
        return filled, results, pages
    finally:
        bel.dispose()


# The dashboard -----------------------------------------------------------------------------------------
# The graph declares the jobs of the history, so pages judge staleness as they would for a user's graph:
# clean, agg and report of the detailed history, and the batched hourly job of the estate at the version its
# instances were built at.


def never_run(ctx: JobContext, **params: str) -> None:
    raise RuntimeError("the views bench only reads the log its history wrote; it runs no job")


def never_run_batch(ctx: JobContext, partitions: list[dict[str, str]]) -> None:
    raise RuntimeError("the views bench only reads the log its history wrote; it runs no job")


def bench_graph() -> Graph:
    graph = Graph("views")
    graph.external("raw/{day}/{part}", "dim/calendar")
    graph.job("clean/{day}/{part}", label="clean")(never_run)
    graph.job("agg/{day}/{part}", label="agg")(never_run)
    graph.job("report/{day}", label="report")(never_run)
    graph.job("hourly/{sensor}/{hour}", label="hourly", batch=HOURLY_BATCH, version=HOURLY_VERSION)(
        never_run_batch
    )
    return graph


def pages_of(
    *,
    wants: Sequence[str],
    refs: Sequence[str],
    instances: Sequence[str],
    job_runs: Sequence[str],
    backfills: Sequence[str],
) -> dict[str, Sequence[str]]:
    def each(prefix: str, keys: Sequence[str], safe: str = "") -> list[str]:
        return [f"{prefix}{quote(key, safe=safe)}" for key in keys[:200]]

    found: dict[str, Sequence[str]] = {
        "/wants": ["/wants", "/wants?offset=500", "/wants?state=successful"],
        "/wants/{id}": each("/wants/", wants),
        "/partitions": ["/partitions", "/partitions?offset=500", "/partitions?status=live"],
        "/partitions/{ref}": each("/partitions/", refs, safe="/"),
        "/instances/{id}": each("/instances/", instances),
        "/job-runs": ["/job-runs", "/job-runs?offset=500", "/job-runs?state=succeeded"],
        "/job-runs/{id}": each("/job-runs/", job_runs),
        "/backfills/{id}": each("/backfills/", backfills),
        "/cost": ["/cost", "/cost?by=day", "/cost?by=partition"],
        "/graph": ["/graph"],
        "/metrics": ["/metrics"],
    }
    return {page: paths for page, paths in found.items() if paths}


def web_pages(t: Targets) -> dict[str, Sequence[str]]:
    return pages_of(
        wants=t.day_roots + t.wants[:100] + t.hourly_wants[:50],
        refs=t.reports + t.mid_chain[:100] + t.hourly_refs[:50],
        instances=t.instances[:150] + t.hourly_instances[:50],
        job_runs=t.job_runs[:150] + t.hourly_runs[:50],
        backfills=t.backfills,
    )


def default_shape(args: argparse.Namespace) -> Shape:
    events: int = args.events
    days: int = args.days or min(100, max(1, events // 10_000))
    per_day: int = args.partitions // days if args.partitions else 100
    return Shape(
        events=events,
        days=days,
        per_day=max(per_day, 4),
        hub_readers=min(2_000, max(events // 500, 10)),
        joiners=min(5_000, max(events // 200, 10)),
        hourly=args.hourly,
    )


def report(
    generated: Generated, fills: dict[str, Fill], results: list[Result], pages: dict[str, list[PageResult]]
) -> None:
    print(f"\nhistory: {generated.targets.events:,} events projected in {generated.seconds:.1f} s")
    for name, filled in fills.items():
        counts = ", ".join(f"{table} {n:,}" for table, n in filled.counts.items())
        print(
            f"{name}: copied in {filled.seconds:.1f} s, ANALYZE {filled.analyze_seconds:.1f} s; load average "
            f"while timing {filled.load_before:.1f} -> {filled.load_after:.1f} ({os.cpu_count()} CPUs); "
            f"rows: {counts}"
        )
    header = (
        f"{'backend':<11}{'view':<40}{'p50 ms':>8}{'p95 ms':>8}{'base p50':>10}{'base p95':>10}"
        f"{'p95/base':>10}{'cpu p95':>9}{'gc2':>5}  target cpu"
    )
    print("\n" + header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r.backend:<11}{r.view:<40}{r.p50:>8.2f}{r.p95:>8.2f}{r.base_p50:>10.3f}{r.base_p95:>10.3f}"
            f"{r.ratio:>9.1f}x{r.cpu_p95:>9.2f}{r.full_gcs:>5}  {r.verdict:<6} {r.cpu_verdict}"
        )
    wall = [r for r in results if r.verdict == "FAIL"]
    cpu = [r for r in results if r.cpu_verdict == "FAIL"]
    for label, failed in (("", wall), (" (cpu)", cpu)):
        print(
            f"every view under {TARGET_MS:.0f} ms p95{label}: "
            + ("PASS" if not failed else "FAIL (" + ", ".join(f"{r.backend} {r.view}" for r in failed) + ")")
        )
    if any(pages.values()):
        header = f"{'backend':<11}{'page':<40}{'p50 ms':>8}{'p95 ms':>8}{'first ms':>10}  target"
        print("\n" + header)
        print("-" * len(header))
        for name, shown in pages.items():
            for p in shown:
                print(f"{name:<11}{p.page:<40}{p.p50:>8.0f}{p.p95:>8.0f}{p.first:>10.0f}  {p.verdict}")
        slow = [f"{name} {p.page}" for name, shown in pages.items() for p in shown if p.verdict == "FAIL"]
        print(
            f"every page and /metrics under {PAGE_TARGET_MS:.0f} ms p95: "
            + ("PASS" if not slow else f"FAIL ({', '.join(slow)})")
        )


def log_urls(args: argparse.Namespace, tmp: Path) -> list[tuple[str, contextlib.AbstractContextManager[str]]]:
    """The logs to fill and time, by backend: each a context that gives its URL (a throwaway PostgreSQL
    database is dropped on leaving it)."""
    found: list[tuple[str, contextlib.AbstractContextManager[str]]] = []
    if args.backend in ("sqlite", "both"):
        path = Path(args.sqlite_path) if args.sqlite_path else tmp / "views.sqlite"
        if path.exists():
            raise SystemExit(f"{path} exists; the bench fills a fresh log")
        found.append(("sqlite", contextlib.nullcontext(f"sqlite:///{path}")))
    if args.backend in ("postgres", "both"):
        kept = contextlib.nullcontext(args.into) if args.into else None
        found.append(("postgresql", kept or postgres_database(args.postgres, prefix="bench_views")))
    return found


def history_in(home: Path, shape: Shape, seed: int) -> tuple[Engine, Generated]:
    """The scratch log and what to ask of it: generated into ``home``, or read back from there when an
    earlier run with the same shape and seed kept it (``--keep``)."""
    saved = home / "targets.json"
    key = {"shape": shape.__dict__, "seed": seed}
    if saved.exists() and (kept := json.loads(saved.read_text()))["key"] == key:
        print(f"the history kept in {home}: {kept['targets']['events']:,} events", flush=True)
        return scratch_log(home / "history.sqlite", fresh=False), Generated(
            kept["seconds"], Targets(**kept["targets"])
        )
    (home / "history.sqlite").unlink(missing_ok=True)
    print(f"generating the history: {shape}", flush=True)
    scratch = scratch_log(home / "history.sqlite")
    generated = generate(scratch, shape, seed)
    print(f"history: {generated.targets.events:,} events in {generated.seconds:.1f} s", flush=True)
    kept = {"key": key, "seconds": generated.seconds, "targets": generated.targets.__dict__}
    saved.write_text(json.dumps(kept))
    return scratch, generated


def main() -> None:
    gc.callbacks.append(FULL_GCS)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=1_000_000, help="events in the synthetic history")
    parser.add_argument(
        "--days", type=int, default=0, help="days of history (default: events / 10,000, max 100)"
    )
    parser.add_argument("--partitions", type=int, default=0, help="partitions in all (default: 100 a day)")
    parser.add_argument(
        "--hourly",
        type=int,
        default=0,
        help="partitions of an hourly estate beside the history (a year of hours per sensor, each built "
        "once by a batched backfill: about 6 events each), e.g. 960000 for 1M instances and 6M events",
    )
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--samples", type=int, default=200, help="timed calls per view")
    parser.add_argument(
        "--page-samples",
        type=int,
        default=20,
        help="timed requests per dashboard page and /metrics (0: none)",
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--verify",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="check the bulk projections against a replay through the projector (default: up to 50,000 events)",
    )
    parser.add_argument(
        "--sqlite-path", help="keep the SQLite log at this (new) path, e.g. to EXPLAIN its queries"
    )
    parser.add_argument(
        "--keep",
        metavar="DIR",
        help="keep the generated history (and what the views are asked) in DIR; a later run with the same "
        "shape and seed reads it from there instead of generating it again",
    )
    parser.add_argument(
        "--into",
        metavar="URL",
        help="a PostgreSQL database to fill and keep (instead of a throwaway one); if it already holds "
        "this history (kept with --keep), it is timed as it is",
    )
    parser.add_argument(
        "--postgres",
        default=POSTGRES_URL,
        help="PostgreSQL URL of an existing database; a throwaway database is created beside it",
    )
    args = parser.parse_args()
    shape = default_shape(args)
    check = args.verify if args.verify is not None else shape.events <= 50_000
    fills: dict[str, Fill] = {}
    results: list[Result] = []
    pages: dict[str, list[PageResult]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(args.keep or tmp)
        home.mkdir(parents=True, exist_ok=True)
        scratch, generated = history_in(home, shape, args.seed)
        try:
            for name, url in log_urls(args, Path(tmp)):
                with url as opened:
                    fills[name], found, pages[name] = bench_backend(
                        name,
                        opened,
                        scratch,
                        generated.targets,
                        args.samples,
                        args.seed,
                        check,
                        args.page_samples,
                    )
                results += found
        finally:
            scratch.dispose()
    report(generated, fills, results, pages)
    print(
        json.dumps(
            {
                "shape": shape.__dict__,
                "events": generated.targets.events,
                "history_s": round(generated.seconds, 1),
                "fill_s": {name: round(f.seconds, 1) for name, f in fills.items()},
                "counts": {name: f.counts for name, f in fills.items()},
                "verified": {name: f.verified for name, f in fills.items()},
                "load_average": {name: [f.load_before, f.load_after] for name, f in fills.items()},
                "cpus": os.cpu_count(),
                "target_ms": TARGET_MS,
                "verdict": overall(r.verdict for r in results),
                "page_target_ms": PAGE_TARGET_MS,
                "page_verdict": overall(p.verdict for shown in pages.values() for p in shown),
                "pages": {
                    name: [{**p.__dict__, "verdict": p.verdict} for p in shown]
                    for name, shown in pages.items()
                },
                "cpu_verdict": overall(r.cpu_verdict for r in results),
                "views": [
                    {
                        **r.__dict__,
                        "ratio": round(r.ratio, 1),
                        "verdict": r.verdict,
                        "cpu_verdict": r.cpu_verdict,
                    }
                    for r in results
                ],
            }
        )
    )


if __name__ == "__main__":
    main()
