"""Keeps every table in line with the BEL: after the BEL commit that made a run's outputs live, their
partitions are committed to their tables (one commit per table and run); a partition taken out of
service without a build (a taint, a skip, a failed re-check, in any process) is withdrawn when the worker
following the log sees it; and a worker's start catches up every partition a table is behind the BEL on
(after a crash between a BEL commit and its table commit, or a catalog that was down). Every commit made
is recorded in the BEL after it is made (``TableCommitted``); a commit repeated for any of these reasons
is found in the table's own history, never made twice."""

import logging
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime

from databuild.bel.store import BuildEventLog
from databuild.domain import events as ev
from databuild.graph import Graph
from databuild.jobs.tables.base import TableFormat
from databuild.jobs.tables.spec import Committed, Placed, TableSpec, graph_tables
from databuild.models import EventFilter, Instance, InstanceRef, PartitionStatus, TableFormatName

log = logging.getLogger(__name__)
PAGE = 500
# The events that can take a ref's live instance out of service without a build of this worker's.
OUT_OF_SERVICE = ("PartitionTainted", "PartitionSkipped", "PartitionFailed")
# A partition built again while its commit was being made is committed again, this many times at most
# in one go (the next follow or start catches up the rest).
ROUNDS = 3


class TablePublisher:
    """Publishes what the BEL says is live to the tables of a graph, in their formats."""

    def __init__(
        self,
        bel: BuildEventLog,
        graph: Graph,
        formats: Mapping[TableFormatName, TableFormat],
        default_format: TableFormatName,
    ) -> None:
        self.bel = bel
        self.graph = graph
        self.formats = dict(formats)
        # The patterns whose format this worker has no catalog for (Hive with DATABUILD_CATALOG=none, or
        # the embedded metastore another process holds) are left to whoever has.
        self.tables = {
            pattern: spec
            for pattern, spec in graph_tables(graph, default_format).items()
            if not isinstance(spec, TableSpec) or spec.format in self.formats
        }
        self._lock = threading.Lock()  # one table change at a time per process
        self._cursor: int | None = None  # the log's index up to which changes are followed (follow_log)
        # Table commits run on a thread of their own, so a slow catalog never holds a job activity (and its
        # heartbeats) after the BEL commit that made its outputs live.
        self._changes = ThreadPoolExecutor(max_workers=1, thread_name_prefix="databuild-tables")

    @property
    def specs(self) -> list[TableSpec]:
        return [spec for spec in self.tables.values() if isinstance(spec, TableSpec)]

    def table(self, ref: str) -> tuple[TableSpec, dict[str, str]] | None:
        """``ref``'s table and its partition values, if its pattern maps to one."""
        pattern = self.graph.pattern_for(ref)
        spec = self.tables.get(pattern.text) if pattern is not None else None
        if pattern is None or not isinstance(spec, TableSpec):
            return None
        return spec, pattern.match(ref) or {}

    def placeholders_in_files(self, job_label: str) -> list[str]:
        """The output patterns of a job whose data files hold their placeholder columns: an Iceberg table
        reads each partition's values from its files."""
        return [
            p.text
            for p in self.graph.job_by_label(job_label).outputs
            if isinstance(spec := self.tables.get(p.text), TableSpec) and spec.format == "iceberg"
        ]

    def audit(self, locations: Mapping[str, str], instances: Mapping[str, str]) -> None:
        """Before the BEL commit that makes these outputs live (``locations`` and ``instances`` by ref):
        raises ``TableSchemaError`` if a table cannot take them without losing data."""
        for spec, refs in self._by_table(locations).items():
            placed = [Placed(ref, self._values(ref), instances[ref], locations[ref]) for ref in refs]
            self.formats[spec.format].audit(spec, placed)

    def _by_table(self, refs: Iterable[str]) -> dict[TableSpec, list[str]]:
        """The refs of each table (refs of no table left out), in their order."""
        found: dict[TableSpec, list[str]] = defaultdict(list)
        for ref in refs:
            mapped = self.table(ref)
            if mapped is not None:
                found[mapped[0]].append(ref)
        return found

    # Following the BEL -----------------------------------------------------------------------------------
    def follow_later(self, refs: Iterable[str]) -> Future[None]:
        """Bring the tables of ``refs`` in line with the BEL, in the background; a failure is logged (the
        next start catches up)."""
        return self._changes.submit(self._follow_logged, list(refs))

    def _follow_logged(self, refs: list[str]) -> None:
        try:
            self.follow(refs)
        except Exception as error:
            log.warning("tables: could not bring the tables of %s in line: %s", _shown(refs), error)

    def close(self) -> None:
        self._changes.shutdown(wait=True)

    def follow(self, refs: Sequence[str], *, again: bool = False) -> int:
        """Make the tables of ``refs`` show what the BEL says of them now: each live instance committed to
        its partition (a later build may have replaced the one that asked), each partition with no live
        instance withdrawn. ``again``: commit live instances the BEL records as committed too (a table
        found without them). Returns how many partitions it committed or withdrew."""
        changed = 0
        pending = [ref for ref in dict.fromkeys(refs) if self.table(ref) is not None]
        for _ in range(ROUNDS):
            if not pending:
                break
            moved = self._follow_once(pending, again=again)
            changed += len(moved)
            pending, again = moved, False  # what changed may have changed again while it was committed
        return changed

    def _follow_once(self, refs: Sequence[str], *, again: bool) -> list[str]:
        """One pass of ``follow``: the refs it committed or withdrew."""
        partitions = {p.ref: p for p in self.bel.partitions.by_ref(refs)}
        live = {
            ref: p.instance_id
            for ref, p in partitions.items()
            if p.status is PartitionStatus.live and p.instance_id is not None
        }
        instances = {
            i.instance_id: i for i in self.bel.partitions.instances_by_id(sorted(set(live.values())))
        }
        moved: list[str] = []
        for spec, of_table in self._by_table(refs).items():
            held = self.bel.tables.held(self.formats[spec.format].qualified(spec), of_table)
            stale = [ref for ref in of_table if ref in live and (again or held.get(ref) != live[ref])]
            gone = [ref for ref in of_table if ref not in live and ref in held]
            try:
                for run_instances in _by_run(
                    [instances[live[ref]] for ref in stale if live[ref] in instances]
                ):
                    moved += self._publish(spec, run_instances)
                if gone:
                    moved += self._withdraw(spec, gone)
            except Exception as error:  # this table stays behind; the others go on
                self._failed(spec, [*stale, *gone], error)
        return moved

    def _failed(self, spec: TableSpec, refs: Sequence[str], error: Exception) -> None:
        """Say why a table stays behind the BEL: in the log, and in the BEL (`databuild tables`, /metrics)."""
        reason = str(error).splitlines()[0][:500] if str(error) else type(error).__name__
        log.warning("tables: could not bring %s in line for %s: %s", spec.name, _shown(list(refs)), reason)
        try:
            self.bel.tables.record(
                ev.TableCommitFailed(
                    table=self.formats[spec.format].qualified(spec),
                    format=spec.format,
                    refs=list(refs),
                    reason=reason,
                )
            )
        except Exception as recording:  # the BEL is down too: the log says it, the next start catches up
            log.warning("tables: could not record the failure in the BEL: %s", recording)

    def _publish(self, spec: TableSpec, instances: Sequence[Instance]) -> list[str]:
        located = [i for i in instances if i.location is not None]
        if not located:
            return []  # none recorded: nothing to commit
        format_ = self.formats[spec.format]
        placed = [Placed(i.ref, self._values(i.ref), i.instance_id, i.location) for i in located]
        summary = self._summary(located)
        with self._lock:
            committed = format_.publish(spec, placed, summary)
        added = [InstanceRef(ref=i.ref, instance_id=i.instance_id) for i in located]
        self._record(spec, committed, instances=added, job_run_id=located[0].job_run_id)
        return [i.ref for i in located]

    def _withdraw(self, spec: TableSpec, refs: Sequence[str]) -> list[str]:
        format_ = self.formats[spec.format]
        placed = [Placed(ref, self._values(ref)) for ref in refs]
        with self._lock:
            committed = format_.withdraw(spec, placed, {"databuild.withdrawn": ",".join(refs)})
        self._record(spec, committed, withdrawn=list(refs))
        return list(refs)

    def _record(
        self,
        spec: TableSpec,
        committed: Committed,
        *,
        instances: Sequence[InstanceRef] = (),
        withdrawn: Sequence[str] = (),
        job_run_id: str | None = None,
    ) -> None:
        """Record in the BEL a commit made to a table (after it was made)."""
        self.bel.tables.record(
            ev.TableCommitted(
                table=self.formats[spec.format].qualified(spec),
                format=spec.format,
                snapshot_id=committed.snapshot_id,
                committed_at=committed.committed_at,
                instances=list(instances),
                withdrawn=list(withdrawn),
                job_run_id=job_run_id,
            )
        )

    def _values(self, ref: str) -> dict[str, str]:
        mapped = self.table(ref)
        assert mapped is not None
        return mapped[1]

    def _summary(self, instances: Sequence[Instance]) -> dict[str, str]:
        """What a snapshot says of the build it is: its refs, run, want and job version."""
        run_id = instances[0].job_run_id
        summary = {"databuild.refs": ",".join(sorted(i.ref for i in instances))}
        if run_id is not None:
            summary["databuild.job-run"] = run_id
            run = self.bel.job_runs.by_id([run_id])
            if run:
                summary["databuild.job"] = run[0].job_label
                if run[0].want_id:
                    summary["databuild.want"] = run[0].want_id
        versions = sorted({i.job_version for i in instances if i.job_version})
        if versions:
            summary["databuild.job-version"] = ",".join(versions)
        return summary

    def follow_log(self) -> int:
        """Follow the changes of live instances made away from this worker's builds (a taint, a skip, a
        failed re-check, from any process) that the log recorded since the last call, or since the
        repair. Returns how many refs it looked at."""
        if self._cursor is None:
            return 0  # the repair has not run: it brings every table up to date first
        page = self.bel.events.page(self._cursor, PAGE, EventFilter(types=list(OUT_OF_SERVICE)))
        refs = sorted({e.ref for e in page.events if e.ref is not None and self.table(e.ref) is not None})
        if refs:
            self._follow_logged(refs)
        self._cursor = page.next_since_idx
        return len(refs)

    def repair(self) -> int:
        """Catch every table up with the BEL (after a crash between a BEL commit and its table commit, a
        catalog that was down, or a table changed by hand): each partition a table is behind on committed
        or withdrawn, each live one it does not show committed again, and each one it shows that the BEL
        says is not live withdrawn. Returns how many partitions it changed."""
        since = self.bel.events.last_idx()
        changed = 0
        for spec in self.specs:
            try:
                changed += self._repair(spec)
            except Exception as error:  # one table must not stop the others
                log.warning("tables: could not catch %s up with the BEL: %s", spec.name, error)
        self._cursor = since  # what changed during the repair is followed again: following is idempotent
        return changed

    def _repair(self, spec: TableSpec) -> int:
        changed, after = 0, ""
        while behind := self.bel.tables.behind(spec.prefix, spec.format, limit=PAGE, after=after):
            after = behind[-1]
            changed += self.follow(behind)
        shown = {self._ref_of(spec, values) for values in self.formats[spec.format].listed(spec)}
        live: set[str] = set()
        offset = 0
        while page := self.bel.partitions.query(
            status=PartitionStatus.live, ref_prefix=spec.prefix, limit=PAGE, offset=offset
        ):
            offset += len(page)
            live.update(
                p.ref for p in page if (mapped := self.table(p.ref)) is not None and mapped[0] == spec
            )
        changed += self.follow(sorted(live - shown), again=True)
        gone = sorted(shown - live)
        if gone:
            changed += len(self._withdraw(spec, gone))
        return changed

    def _ref_of(self, spec: TableSpec, values: Mapping[str, str]) -> str:
        return next(p for p in self.graph.patterns if p.text == spec.pattern).format(dict(values))

    def expire(self, retained: Mapping[str, set[int]], older_than: datetime) -> int:
        """Expire every snapshot of the tables older than ``older_than`` but their current ones and those of
        ``retained`` (by table, as the BEL's retention keeps them); returns how many it expired."""
        expired = 0
        for spec in self.specs:
            format_ = self.formats[spec.format]
            try:
                with self._lock:
                    gone = format_.expire(spec, retained.get(format_.qualified(spec), set()), older_than)
            except Exception as error:  # one table must not stop the others, nor gc
                log.warning("tables: could not expire the snapshots of %s: %s", spec.name, error)
                continue
            if gone:
                log.info("tables: expired %d snapshot(s) of %s", len(gone), format_.qualified(spec))
            expired += len(gone)
        return expired


def _by_run(instances: Iterable[Instance]) -> list[list[Instance]]:
    """Instances grouped by the run that built them (one commit each), in the order first seen."""
    runs: dict[str | None, list[Instance]] = {}
    for instance in instances:
        runs.setdefault(instance.job_run_id, []).append(instance)
    return list(runs.values())


def _shown(refs: Sequence[str]) -> str:
    return ", ".join(refs[:3]) + (f" and {len(refs) - 3} more" if len(refs) > 3 else "")
