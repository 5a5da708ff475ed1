"""Latency of the detail and list views over a large build event log, on SQLite and PostgreSQL.

    python -m bench.bench_views [--events 1000000] [--backend sqlite|postgres|both] [--samples 200]

A consistent synthetic history is generated in Python (the typed events, and the projection rows
the projector derives from them) and bulk-inserted into a fresh log. Per day, 100 partitions:
raw/{day}/{k} (external) -> clean/{day}/{k} (also reads the shared dim/calendar) -> agg/{day}/{k}
-> report/{day}. Each day starts with a scheduled want for its report, fulfilled through dep-misses
and derivative wants; then taint-and-rebuild rounds (cascading taints, new instances) and wants
answered by historical delegation fill the day's share of the events. One report run is joined by
thousands of wants (active delegations) and each dim/calendar instance is read by thousands of
runs, so the "+N more" paths are exercised. Small runs check the bulk-inserted projections against
a replay of the same events through the real projector (``--verify``).

Each view is then timed over random targets (p50, p95) against a primary-key lookup on the same
table measured in the same run, and checked against the target: every view under 50 ms p95. The
"cpu p95" column is this process's CPU time per call: on a busy machine a wall-clock p95 far above it
is time spent waiting for a CPU (or, on PostgreSQL, for the server). Rows marked "info" (taint impact
of the hub, the events API) are not views and do not count toward the target. "gc2" counts CPython's
full garbage collections during a row's samples: each pauses the process (tens of ms here).
"""

import argparse
import gc
import json
import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Table, bindparam, func, insert, select, text, update

from databuild import views
from databuild.bel import BuildEventLog
from databuild.domain import events as ev
from databuild.bel import schema as s
from databuild.models import InstanceRef, JobRunState, WantSource, WantSpec, WantState
from databuild.runtime import settle_heap
from tests.conftest import postgres_database

T0 = datetime(2024, 1, 1, tzinfo=UTC)
TARGET_MS = 50.0
DIM = "dim/calendar"
CHUNK = 10_000  # rows per executemany
WARMUP = 5
SURROGATE = {"read_deps", "consumers", "derivatives", "subscriptions", "delegations"}  # autoincrement ids

Row = dict[str, Any]


@dataclass(frozen=True)
class Shape:
    events: int
    days: int
    per_day: int  # partitions per day: 1 report + 3 per raw -> clean -> agg chain
    hub_readers: int  # runs that read one dim/calendar instance before it is republished
    joiners: int  # wants that delegate to one report run while it builds

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


class History:
    """Plays commands the way the store would (decide, dep-miss, derivatives, publish, taint) and
    keeps the projections exactly as ``databuild.bel.projector.apply`` would leave them."""

    def __init__(self, shape: Shape, seed: int, sink: Callable[[list[Row]], None]) -> None:
        self.shape = shape
        self.rng = random.Random(seed)
        self.sink = sink
        self.pending: list[Row] = []
        self.idx = 0
        self.at = T0
        self.wants: dict[str, Row] = {}
        self.partitions: dict[str, Row] = {}
        self.instances: dict[str, Row] = {}
        self.job_runs: dict[str, Row] = {}
        self.job_run_outputs: list[Row] = []
        self.read_deps: list[Row] = []
        self.consumers: list[Row] = []
        self.derivatives: list[Row] = []
        self.subscriptions: dict[tuple[str, str], Row] = {}
        self.subscription_ids = 0
        self.subscribed: dict[str, list[str]] = {}  # want -> refs it subscribes to
        self.delegations: list[Row] = []
        self.want_job_runs: dict[tuple[str, str], str] = {}
        self.reads_of_run: dict[str, list[str | None]] = {}
        self.consumed_by: dict[str, list[tuple[str, str]]] = {}  # instance -> [(output instance, ref)]
        self.targets = Targets()

    # Events ----------------------------------------------------------------------------------------
    def emit(self, event: ev.Event) -> None:
        self.idx += 1
        want_id, job_run_id, ref = ev.event_keys(event)
        self.pending.append(
            {
                "idx": self.idx,
                "type": event.type,
                "at": self.at,
                "want_id": want_id,
                "job_run_id": job_run_id,
                "ref": ref,
                "data": event.model_dump(mode="json"),
            }
        )
        self.apply(event)
        if len(self.pending) >= CHUNK:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.sink(self.pending)
            self.pending = []

    def tick(self) -> None:
        """A new command (one write transaction): its events share one timestamp."""
        self.at += timedelta(seconds=self.rng.randint(1, 3))

    # The projector, on dicts ----------------------------------------------------------------------
    def apply(self, event: ev.Event) -> None:
        at = self.at
        match event:
            case ev.WantCreated(want_id=want_id, spec=spec, workflow_id=workflow_id):
                self.wants[want_id] = {
                    "want_id": want_id,
                    "ref": spec.ref,
                    "data_timestamp": spec.data_timestamp,
                    "sla_seconds": None if spec.sla is None else spec.sla.total_seconds(),
                    "ttl_seconds": None if spec.ttl is None else spec.ttl.total_seconds(),
                    "source": spec.source.value,
                    "parent_want_id": spec.parent_want_id,
                    "root_want_id": spec.root_want_id or want_id,
                    "state": WantState.new.value,
                    "sla_missed": False,
                    "sla_deadline": spec.sla_deadline,
                    "reason": None,
                    "job_run_id": None,
                    "decision_seq": 0,
                    "workflow_id": workflow_id,
                    "created_at": at,
                    "updated_at": at,
                    "generation": spec.generation,
                    "instance_id": None,
                }
                self._subscribe(want_id, [spec.ref], workflow_id)
            case ev.WantBuilding(want_id=want_id, job_run_id=job_run_id, relation=relation, decision_seq=seq):
                self._set_want(want_id, state="building", job_run_id=job_run_id, decision_seq=seq)
                if (want_id, job_run_id) not in self.want_job_runs:
                    self.want_job_runs[want_id, job_run_id] = relation
            case ev.WantWaitingExternal(want_id=want_id, decision_seq=seq):
                self._set_want(want_id, state="upstream_building", decision_seq=seq)
            case ev.WantUpstreamBuilding(
                want_id=want_id, job_run_id=job_run_id, missing=missing, derivative_want_ids=ids
            ):
                self._set_want(want_id, state="upstream_building")
                for i, ref in enumerate(missing):
                    self.derivatives.append(
                        {
                            "id": len(self.derivatives) + 1,
                            "want_id": want_id,
                            "job_run_id": job_run_id,
                            "ref": ref,
                            "derivative_want_id": ids[i] if i < len(ids) else None,
                        }
                    )
                self._subscribe(want_id, missing, self.wants[want_id]["workflow_id"])
            case ev.WantFinished(want_id=want_id, state=state, reason=reason, instance_id=instance_id):
                self._set_want(want_id, state=state.value, reason=reason, instance_id=instance_id)
                for ref in self.subscribed.pop(want_id, []):
                    del self.subscriptions[ref, want_id]
            case ev.JobRunQueued() | ev.JobRunSkipped():
                skipped = isinstance(event, ev.JobRunSkipped)
                self.job_runs[event.job_run_id] = {
                    "job_run_id": event.job_run_id,
                    "job_label": event.job_label,
                    "state": (JobRunState.skipped if skipped else JobRunState.queued).value,
                    "outputs": list(event.outputs),
                    "params": dict(event.params),
                    "want_id": event.want_id,
                    "attempts": 0,
                    "lost": False,
                    "reason": event.message if isinstance(event, ev.JobRunSkipped) else None,
                    "missing": [],
                    "workflow_id": event.workflow_id,
                    "created_at": at,
                    "updated_at": at,
                }
                self.job_run_outputs += [{"job_run_id": event.job_run_id, "ref": r} for r in event.outputs]
                if skipped and event.want_id and (event.want_id, event.job_run_id) not in self.want_job_runs:
                    self.want_job_runs[event.want_id, event.job_run_id] = "skipped"
            case ev.JobRunStarted(job_run_id=job_run_id, attempt=attempt):
                self._set_run(job_run_id, state=JobRunState.running.value, attempts=attempt)
            case ev.JobRunSucceeded(job_run_id=job_run_id, reads=reads, writes=writes):
                self._set_run(job_run_id, state=JobRunState.succeeded.value)
                self._record_reads(job_run_id, reads)
                for r in reads:
                    if r.instance_id:
                        for w in writes:
                            assert w.instance_id is not None
                            self.consumers.append(
                                {
                                    "id": len(self.consumers) + 1,
                                    "input_instance_id": r.instance_id,
                                    "output_instance_id": w.instance_id,
                                    "output_ref": w.ref,
                                    "job_run_id": job_run_id,
                                }
                            )
                            self.consumed_by.setdefault(r.instance_id, []).append((w.instance_id, w.ref))
            case ev.JobRunDepMiss(job_run_id=job_run_id, missing=missing, reads=reads):
                self._set_run(job_run_id, state=JobRunState.dep_miss.value, missing=list(missing))
                self._record_reads(job_run_id, reads)
            case ev.Delegation():
                self.delegations.append(
                    {
                        "id": len(self.delegations) + 1,
                        "want_id": event.want_id,
                        "ref": event.ref,
                        "delegated_to": event.delegated_to,
                        "kind": event.kind,
                        "at": at,
                    }
                )
            case ev.PartitionBuilding(ref=ref, job_run_id=job_run_id):
                self._upsert_partition(ref, building_job_run_id=job_run_id)
            case ev.PartitionReleased(ref=ref):
                self._upsert_partition(ref, building_job_run_id=None)
            case ev.PartitionLive(ref=ref, instance_id=instance_id, job_run_id=job_run_id, external=external):
                previous = self.partitions.get(ref, {}).get("instance_id")
                if previous is not None and self.instances[previous]["status"] == "live":
                    self.instances[previous]["status"] = "superseded"
                self.instances[instance_id] = {
                    "instance_id": instance_id,
                    "ref": ref,
                    "job_run_id": job_run_id,
                    "external": external,
                    "created_at": at,
                    "status": "live",
                    "stale_cause": self._inherited_staleness(job_run_id),
                    "reason": None,
                }
                self._upsert_partition(
                    ref,
                    status="live",
                    instance_id=instance_id,
                    built_by=job_run_id,
                    building_job_run_id=None,
                    external=external,
                    reason=None,
                )
            case ev.PartitionTainted(ref=ref, instance_id=instance_id, reason=reason, stale=stale):
                self.instances[instance_id].update(status="tainted", reason=reason)
                partition = self.partitions[ref]
                partition.update(
                    status="tainted", generation=partition["generation"] + 1, reason=reason, updated_at=at
                )
                for item in stale:
                    row = self.instances.get(item.instance_id or "")
                    if row is not None and row["stale_cause"] is None:
                        row["stale_cause"] = instance_id
            case _:
                raise TypeError(f"the bench does not generate {type(event).__name__}")

    def _set_want(self, want_id: str, **values: object) -> None:
        self.wants[want_id].update(values, updated_at=self.at)

    def _set_run(self, job_run_id: str, **values: object) -> None:
        self.job_runs[job_run_id].update(values, updated_at=self.at)

    def _subscribe(self, want_id: str, refs: list[str], workflow_id: str) -> None:
        for ref in dict.fromkeys(refs):
            if (ref, want_id) not in self.subscriptions:
                self.subscription_ids += 1
                self.subscriptions[ref, want_id] = {
                    "id": self.subscription_ids,
                    "ref": ref,
                    "want_id": want_id,
                    "workflow_id": workflow_id,
                }
                self.subscribed.setdefault(want_id, []).append(ref)

    def _record_reads(self, job_run_id: str, reads: list[InstanceRef]) -> None:
        for r in reads:
            self.read_deps.append(
                {
                    "id": len(self.read_deps) + 1,
                    "job_run_id": job_run_id,
                    "ref": r.ref,
                    "instance_id": r.instance_id,
                }
            )
            self.reads_of_run.setdefault(job_run_id, []).append(r.instance_id)

    def _inherited_staleness(self, job_run_id: str | None) -> str | None:
        for instance_id in self.reads_of_run.get(job_run_id or "", []):
            row = self.instances.get(instance_id or "")
            if row is not None and (row["status"] == "tainted" or row["stale_cause"] is not None):
                return str(row["stale_cause"] or row["instance_id"])
        return None

    def _upsert_partition(self, ref: str, **values: object) -> None:
        row = self.partitions.get(ref)
        if row is None:
            self.partitions[ref] = {
                "ref": ref,
                "status": "missing",
                "instance_id": None,
                "built_by": None,
                "building_job_run_id": None,
                "external": False,
                "updated_at": self.at,
                "generation": 0,
                "reason": None,
                **values,
            }
        else:
            row.update(values, updated_at=self.at)

    # The graph -------------------------------------------------------------------------------------
    def job(self, ref: str) -> tuple[str, list[str], dict[str, str]] | None:
        """(job label, inputs, params) of the job that builds ``ref``; None for external refs."""
        layer, _, rest = ref.partition("/")
        if layer == "clean":
            day, part = rest.split("/")
            return "clean", [f"raw/{day}/{part}", DIM], {"day": day, "part": part}
        if layer == "agg":
            day, part = rest.split("/")
            return "agg", [f"clean/{day}/{part}"], {"day": day, "part": part}
        if layer == "report":
            return "report", [f"agg/{rest}/{k:02d}" for k in range(self.shape.chains)], {"day": rest}
        return None

    def new_run_id(self) -> str:
        return f"jr-{self.rng.getrandbits(64):016x}"

    def new_instance_id(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def live(self, ref: str) -> str | None:
        row = self.partitions.get(ref)
        return row["instance_id"] if row is not None and row["status"] == "live" else None

    def generation(self, ref: str) -> int:
        row = self.partitions.get(ref)
        return int(row["generation"]) if row is not None else 0

    # Commands --------------------------------------------------------------------------------------
    def register(self, spec: WantSpec) -> bool:
        if spec.want_id in self.wants:
            return False
        self.tick()
        self.emit(ev.WantCreated(want_id=spec.want_id, spec=spec, workflow_id=spec.workflow_id))
        return True

    def publish(self, ref: str) -> str:
        self.tick()
        instance_id = self.new_instance_id()
        self.emit(ev.PartitionLive(ref=ref, instance_id=instance_id, job_run_id=None, external=True))
        return instance_id

    def finish(self, want_id: str, instance_id: str) -> None:
        self.tick()
        self.emit(
            ev.WantFinished(
                type="WantSucceeded", want_id=want_id, state=WantState.successful, instance_id=instance_id
            )
        )

    def fulfil(self, spec: WantSpec, joiners: int = 0) -> None:
        """The want's workflow, from its first decision to WantSucceeded. ``joiners``: wants for the
        same ref that delegate to its successful run while it builds."""
        want_id = spec.want_id
        job = self.job(spec.ref)
        seq = 0
        while True:
            seq += 1
            self.tick()
            live = self.live(spec.ref)
            if live is not None:  # historical delegation: the run that built it, and a skipped run
                if job is not None:
                    label, _, params = job
                    built_by = self.partitions[spec.ref]["built_by"]
                    if built_by:
                        message = "delegated to historical build: partition already available"
                        self.emit(
                            ev.Delegation(
                                want_id=want_id,
                                ref=spec.ref,
                                delegated_to=built_by,
                                kind="historical",
                                message=message,
                            )
                        )
                    run_id = self.new_run_id()
                    self.emit(ev.JobRunSkipped(**self._run_fields(run_id, label, spec.ref, params, want_id)))
                self.emit(
                    ev.WantFinished(
                        type="WantSucceeded", want_id=want_id, state=WantState.successful, instance_id=live
                    )
                )
                return
            if job is None:  # external: wait for the publish
                self.emit(ev.WantWaitingExternal(want_id=want_id, decision_seq=seq))
                self.finish(want_id, self.publish(spec.ref))
                return
            label, inputs, params = job
            run_id = self.new_run_id()
            self.emit(ev.JobRunQueued(**self._run_fields(run_id, label, spec.ref, params, want_id)))
            self.emit(ev.PartitionBuilding(ref=spec.ref, job_run_id=run_id))
            self.emit(
                ev.WantBuilding(want_id=want_id, job_run_id=run_id, relation="executed", decision_seq=seq)
            )
            if label == "clean":
                self.renew_hub()
            missing = sorted(ref for ref in inputs if self.live(ref) is None)
            self.tick()
            self.emit(ev.JobRunStarted(job_run_id=run_id, attempt=1, worker="worker-1"))
            if self.rng.random() < 0.03:  # a lost worker: the run is retried
                self.tick()
                self.emit(ev.JobRunStarted(job_run_id=run_id, attempt=2, worker="worker-2"))
            joined = self.join(spec, run_id, joiners) if not missing else []
            self.tick()
            reads = [InstanceRef(ref=ref, instance_id=self.live(ref)) for ref in inputs if self.live(ref)]
            if missing:
                self.emit(ev.JobRunDepMiss(job_run_id=run_id, missing=missing, reads=reads))
                self.emit(ev.PartitionReleased(ref=spec.ref, job_run_id=run_id))
                self.tick()
                derived = [spec.derive(ref, want_id, self.generation(ref)) for ref in missing]
                for d in derived:
                    if d.want_id not in self.wants:
                        self.emit(ev.WantCreated(want_id=d.want_id, spec=d, workflow_id=d.workflow_id))
                self.emit(
                    ev.WantUpstreamBuilding(
                        want_id=want_id,
                        job_run_id=run_id,
                        missing=missing,
                        derivative_want_ids=[d.want_id for d in derived],
                    )
                )
                for d in derived:
                    if not WantState(self.wants[d.want_id]["state"]).is_final:
                        self.fulfil(d)
                continue
            instance_id = self.new_instance_id()
            written = [InstanceRef(ref=spec.ref, instance_id=instance_id)]
            self.emit(ev.JobRunSucceeded(job_run_id=run_id, reads=reads, writes=written))
            self.emit(ev.PartitionLive(ref=spec.ref, instance_id=instance_id, job_run_id=run_id))
            for joiner in [want_id, *joined]:
                self.finish(joiner, instance_id)
            return

    def _run_fields(self, run_id: str, label: str, ref: str, params: dict[str, str], want_id: str) -> Row:
        return {
            "job_run_id": run_id,
            "job_label": label,
            "outputs": [ref],
            "params": params,
            "want_id": want_id,
            "workflow_id": f"job-run:{label}:{run_id}",
        }

    def join(self, spec: WantSpec, run_id: str, count: int) -> list[str]:
        """Wants for the same ref arriving while the run builds: each delegates to it (active)."""
        joined = []
        for i in range(count):
            other = WantSpec(
                ref=spec.ref,
                data_timestamp=spec.data_timestamp + timedelta(seconds=i + 1),
                source=WantSource.dashboard,
                generation=self.generation(spec.ref),
            )
            if not self.register(other):
                continue
            self.tick()
            message = "delegated to active build"
            self.emit(
                ev.Delegation(
                    want_id=other.want_id, ref=spec.ref, delegated_to=run_id, kind="active", message=message
                )
            )
            self.emit(
                ev.WantBuilding(
                    want_id=other.want_id, job_run_id=run_id, relation="delegated", decision_seq=1
                )
            )
            joined.append(other.want_id)
        if len(joined) > self.targets.joined_count:
            self.targets.joined_run, self.targets.joined_count = run_id, len(joined)
        return joined

    def renew_hub(self) -> None:
        """Republish dim/calendar once its live instance has been read by ``hub_readers`` runs."""
        current = self.live(DIM)
        readers = len(self.consumed_by.get(current or "", []))
        if current is None or readers >= self.shape.hub_readers:
            if current is not None and readers > self.targets.hub_readers:
                self.targets.hub_instance, self.targets.hub_readers = current, readers
            self.publish(DIM)

    def closure(self, instance_id: str) -> list[tuple[str, str]]:
        """(ref, instance) built from this instance, transitively: BelQueries.downstream_closure."""
        seen = {instance_id}
        found: list[tuple[str, str]] = []
        frontier = [instance_id]
        while frontier:
            following = []
            for current in frontier:
                for out, ref in self.consumed_by.get(current, []):
                    if out not in seen:
                        seen.add(out)
                        following.append(out)
                        found.append((ref, out))
            frontier = following
        return found

    def taint(self, ref: str, reason: str) -> None:
        """``taint --cascade``: the live instance, and every current instance built from it."""
        self.tick()
        instance_id = self.partitions[ref]["instance_id"]
        downstream = self.closure(instance_id)
        current = [(r, i) for r, i in downstream if self.instances[i]["status"] == "live"]
        stale = [InstanceRef(ref=r, instance_id=i) for r, i in downstream]
        self.emit(ev.PartitionTainted(ref=ref, instance_id=instance_id, reason=reason, stale=stale))
        for r, i in current:
            row = self.partitions[r]
            if row["instance_id"] == i and row["status"] == "live" and not row["building_job_run_id"]:
                self.emit(
                    ev.PartitionTainted(
                        ref=r,
                        instance_id=i,
                        reason=f"built from tainted {ref}: {reason}",
                        cascaded_from=instance_id,
                    )
                )

    # The history -----------------------------------------------------------------------------------
    def run(self, progress: Callable[[int], None]) -> None:
        shape = self.shape
        self.publish(DIM)
        for day in range(shape.days):
            start = T0 + timedelta(days=day)
            ds = start.date().isoformat()
            self.targets.days.append(ds)
            self.at = max(self.at, start + timedelta(hours=1))
            first = self.idx
            budget = (shape.events - self.idx) // (shape.days - day)
            report = f"report/{ds}"
            spec = WantSpec(
                ref=report, data_timestamp=start, sla=timedelta(hours=9), source=WantSource.schedule
            )
            self.register(spec)
            self.targets.day_roots.append(spec.want_id)
            self.fulfil(spec, joiners=shape.joiners if day == shape.days // 2 else 0)
            rebuilt = historical = 0
            while self.idx - first < budget:
                before = self.idx
                if rebuilt <= historical:
                    self.rebuild(start, ds)
                    rebuilt += self.idx - before
                else:
                    self.historical_want(start, ds)
                    historical += self.idx - before
            progress(day)
        self.flush()

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

    def projection_rows(self) -> dict[Table, Iterable[Row]]:
        return {
            s.wants: self.wants.values(),
            s.partitions: self.partitions.values(),
            s.partition_instances: self.instances.values(),
            s.job_runs: self.job_runs.values(),
            s.job_run_outputs: self.job_run_outputs,
            s.read_deps: self.read_deps,
            s.consumers: self.consumers,
            s.derivatives: self.derivatives,
            s.subscriptions: self.subscriptions.values(),
            s.delegations: self.delegations,
            s.want_job_runs: (
                {"want_id": w, "job_run_id": j, "relation": rel} for (w, j), rel in self.want_job_runs.items()
            ),
        }

    def collect_targets(self) -> Targets:
        t = self.targets
        t.wants = list(self.wants)
        t.refs = list(self.partitions)
        t.reports = [r for r in self.partitions if r.startswith("report/")]
        t.mid_chain = [r for r in self.partitions if r.startswith(("clean/", "agg/")) and self.live(r)]
        t.instances = list(self.instances)
        t.job_runs = list(self.job_runs)
        t.hub_closure = len(self.closure(self.live(DIM) or ""))
        t.events = self.idx
        return t


# Fill ----------------------------------------------------------------------------------------------


def insert_rows(conn: Connection, table: Table, rows: Iterable[Row]) -> None:
    batch: list[Row] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= CHUNK:
            conn.execute(insert(table), batch)
            batch = []
    if batch:
        conn.execute(insert(table), batch)


@dataclass
class Fill:
    seconds: float
    insert_seconds: float
    analyze_seconds: float
    targets: Targets
    counts: dict[str, int]
    load_before: float = 0.0  # 1-minute load average when the timing started and ended (2 cores here)
    load_after: float = 0.0


def fill(bel: BuildEventLog, shape: Shape, seed: int, label: str) -> Fill:
    start = time.perf_counter()
    insert_s = 0.0
    with bel.writer.begin() as conn:
        if conn.dialect.name == "sqlite":
            conn.exec_driver_sql("PRAGMA cache_size=-500000")  # 500 MB for this connection's bulk load

        def sink(rows: list[Row]) -> None:
            nonlocal insert_s
            t = time.perf_counter()
            conn.execute(insert(s.events), rows)
            insert_s += time.perf_counter() - t

        history = History(shape, seed, sink)
        step = max(shape.days // 10, 1)

        def progress(day: int) -> None:
            if (day + 1) % step == 0 or day + 1 == shape.days:
                print(
                    f"  [{label}] day {day + 1}/{shape.days}: {history.idx:,} events, "
                    f"{time.perf_counter() - start:.0f} s",
                    flush=True,
                )

        history.run(progress)
        t = time.perf_counter()
        for table, rows in history.projection_rows().items():
            insert_rows(conn, table, rows)
        conn.execute(update(s.head).where(s.head.c.id == 1).values(last_idx=history.idx))
        if conn.dialect.name == "postgresql":  # explicit ids were inserted: move the sequences past them
            for name in sorted(SURROGATE):
                sequence = f"pg_get_serial_sequence('{name}', 'id')"
                conn.execute(text(f"SELECT setval({sequence}, COALESCE(MAX(id), 0) + 1, false) FROM {name}"))
        insert_s += time.perf_counter() - t
    targets = history.collect_targets()
    seconds = time.perf_counter() - start
    t = time.perf_counter()
    analyze(bel)
    return Fill(seconds, insert_s, time.perf_counter() - t, targets, row_counts(bel))


def analyze(bel: BuildEventLog) -> None:
    with bel.writer.begin() as conn:
        conn.exec_driver_sql("ANALYZE")
    if bel.writer.dialect.name == "sqlite":
        raw = bel.writer.raw_connection()  # outside SQLAlchemy's BEGIN: a checkpoint needs no transaction
        try:
            raw.cursor().execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            raw.close()


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


def verify(bel: BuildEventLog) -> float:
    """The bulk-inserted projections equal a replay of the events through the real projector."""
    start = time.perf_counter()
    bulk = snapshot(bel)
    bel.rebuild_projections()
    replayed = snapshot(bel)
    for name, rows in bulk.items():
        if rows != replayed[name]:
            extra = sorted(set(rows) - set(replayed[name]))[:3]
            missing = sorted(set(replayed[name]) - set(rows))[:3]
            raise AssertionError(
                f"{name}: bulk {len(rows)} rows, replay {len(replayed[name])}; "
                f"only in bulk: {extra}; only in replay: {missing}"
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
        if not self.gated:
            return "info"
        return "PASS" if self.p95 < TARGET_MS else "FAIL"


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
        Case("taint_impact (clean/, agg/)", bel.taint_impact, t.mid_chain, s.partitions, t.mid_chain),
        Case(
            f"taint_impact (dim/calendar, {t.hub_closure} down)",
            bel.taint_impact,
            [DIM],
            s.partitions,
            [DIM],
            gated=False,
        ),
        # Not a view: the events API a downstream graph tails (SPEC 3.6), listed for its ref-prefix filter.
        Case("events (pattern, since 0)", lambda g: bel.events(pattern=g), globs, s.events, idx, gated=False),
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
    name: str, url: str, shape: Shape, samples: int, seed: int, check: bool
) -> tuple[Fill, list[Result]]:
    print(f"\n[{name}] filling a fresh BEL: {shape}", flush=True)
    bel = BuildEventLog.create(url)
    try:
        filled = fill(bel, shape, seed, name)
        print(
            f"[{name}] fill {filled.seconds:.1f} s ({filled.insert_seconds:.1f} s of it inserting), "
            f"ANALYZE {filled.analyze_seconds:.1f} s",
            flush=True,
        )
        if check:
            print(
                f"[{name}] verified: projections equal a replay of the events ({verify(bel):.1f} s)",
                flush=True,
            )
            analyze(bel)
        rng = random.Random(seed + 1)
        results = []
        # Start timing from a settled heap, as the web server and the worker do (databuild.runtime):
        # otherwise the fill's objects skew when full collections happen while the views are timed.
        settle_heap()
        filled.load_before = os.getloadavg()[0]
        for case in cases(bel, filled.targets):
            if not case.targets or not all(case.targets[:1]):
                continue
            p50, p95, b50, b95, cpu95, full_gcs = time_case(bel, case, samples, rng)
            results.append(Result(name, case.name, p50, p95, b50, b95, cpu95, int(full_gcs), case.gated))
            print(f"  [{name}] {case.name}: p50 {p50:.2f} ms, p95 {p95:.2f} ms", flush=True)
        filled.load_after = os.getloadavg()[0]
        return filled, results
    finally:
        bel.dispose()


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
    )


def report(fills: dict[str, Fill], results: list[Result]) -> None:
    for name, filled in fills.items():
        counts = ", ".join(f"{table} {n:,}" for table, n in filled.counts.items())
        print(
            f"\n{name}: fill {filled.seconds:.1f} s (inserting {filled.insert_seconds:.1f} s), ANALYZE "
            f"{filled.analyze_seconds:.1f} s; load average while timing {filled.load_before:.1f} -> "
            f"{filled.load_after:.1f} ({os.cpu_count()} CPUs); rows: {counts}"
        )
    header = (
        f"{'backend':<11}{'view':<40}{'p50 ms':>8}{'p95 ms':>8}{'base p50':>10}{'base p95':>10}"
        f"{'p95/base':>10}{'cpu p95':>9}{'gc2':>5}  target"
    )
    print("\n" + header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r.backend:<11}{r.view:<40}{r.p50:>8.2f}{r.p95:>8.2f}{r.base_p50:>10.3f}{r.base_p95:>10.3f}"
            f"{r.ratio:>9.1f}x{r.cpu_p95:>9.2f}{r.full_gcs:>5}  {r.verdict}"
        )
    failed = [r for r in results if r.verdict == "FAIL"]
    print(
        f"\nevery view under {TARGET_MS:.0f} ms p95: "
        + ("PASS" if not failed else "FAIL (" + ", ".join(f"{r.backend} {r.view}" for r in failed) + ")")
    )


def main() -> None:
    gc.callbacks.append(FULL_GCS)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=1_000_000, help="events in the synthetic history")
    parser.add_argument(
        "--days", type=int, default=0, help="days of history (default: events / 10,000, max 100)"
    )
    parser.add_argument("--partitions", type=int, default=0, help="partitions in all (default: 100 a day)")
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--samples", type=int, default=200, help="timed calls per view")
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
        "--postgres",
        default=os.environ.get(
            "DATABUILD_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
        ),
        help="PostgreSQL URL of an existing database; a throwaway database is created beside it",
    )
    args = parser.parse_args()
    shape = default_shape(args)
    check = args.verify if args.verify is not None else shape.events <= 50_000
    fills: dict[str, Fill] = {}
    results: list[Result] = []
    if args.backend in ("sqlite", "both"):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(args.sqlite_path) if args.sqlite_path else Path(tmp) / "views.sqlite"
            if path.exists():
                raise SystemExit(f"{path} exists; the bench fills a fresh log")
            url = f"sqlite:///{path}"
            fills["sqlite"], found = bench_backend("sqlite", url, shape, args.samples, args.seed, check)
            results += found
    if args.backend in ("postgres", "both"):
        with postgres_database(args.postgres, prefix="bench_views") as url:
            fills["postgresql"], found = bench_backend(
                "postgresql", url, shape, args.samples, args.seed, check
            )
            results += found
    report(fills, results)
    print(
        json.dumps(
            {
                "shape": shape.__dict__,
                "fill_s": {name: round(f.seconds, 1) for name, f in fills.items()},
                "counts": {name: f.counts for name, f in fills.items()},
                "views": [{**r.__dict__, "ratio": round(r.ratio, 1), "verdict": r.verdict} for r in results],
            }
        )
    )


if __name__ == "__main__":
    main()
