"""The log itself: reading events after a cursor, build statistics, and rebuilding the projections."""

from collections.abc import Sequence

from sqlalchemy import delete, func, or_, select

from databuild.bel import projector
from databuild.bel import schema as s
from databuild.bel.aggregates.base import (
    WriteBase,
)
from databuild.bel.reads.base import ReadBase
from databuild.bel.reads.rows import (
    event_record,
)
from databuild.domain import events as ev
from databuild.globs import compile_glob, ref_filter
from databuild.models import (
    BuildStats,
    EventFilter,
    EventPage,
    EventRecord,
    JobStats,
)


class EventReads(ReadBase):
    """Reads of the events and of statistics over the projections."""

    def last_idx(self) -> int:
        rows = self._all(select(s.head.c.last_idx))
        return int(rows[0]["last_idx"]) if rows else 0

    def page(self, since_idx: int, limit: int, where: EventFilter) -> EventPage:
        """Events after ``since_idx`` that match, oldest first, and the cursor to continue from. Read in
        one snapshot: the index is gap-free in commit order, so every event up to the head read here is
        visible, and the cursor can skip past events that did not match."""
        for pattern in where.patterns:
            compile_glob(pattern)  # a clear error for a bad pattern, before any SQL
        with self._log.snapshot():
            head = self.last_idx()
            query = select(s.events).where(s.events.c.idx > since_idx, s.events.c.idx <= head)
            by_ref = [ref_filter(s.events.c.ref, p) for p in where.patterns]
            if where.refs:
                by_ref.append(s.events.c.ref.in_(where.refs))
            if by_ref:
                query = query.where(or_(*by_ref))
            if where.job_labels:
                runs = select(s.job_runs.c.job_run_id).where(s.job_runs.c.job_label.in_(where.job_labels))
                query = query.where(s.events.c.job_run_id.in_(runs))
            if where.job_run_ids:
                query = query.where(s.events.c.job_run_id.in_(where.job_run_ids))
            if where.want_ids:
                query = query.where(s.events.c.want_id.in_(where.want_ids))
            if where.types:
                query = query.where(s.events.c.type.in_(where.types))
            rows = self._all(query.order_by(s.events.c.idx).limit(limit))
        found = [event_record(r) for r in rows]
        following = found[-1].idx if len(found) == limit else head
        return EventPage(events=found, next_since_idx=max(following, since_idx), last_idx=head)

    def query(
        self,
        *,
        since_idx: int = 0,
        limit: int = 100,
        pattern: str | None = None,
        want_id: str | None = None,
        job_run_id: str | None = None,
        types: Sequence[str] = (),
    ) -> list[EventRecord]:
        """Shorthand for ``events.page`` with one value per filter."""
        where = EventFilter(
            patterns=[pattern] if pattern else [],
            want_ids=[want_id] if want_id else [],
            job_run_ids=[job_run_id] if job_run_id else [],
            types=list(types),
        )
        return self.page(since_idx, limit, where).events

    def stats(self) -> BuildStats:
        counts: dict[str, dict[str, int]] = {}
        rows = self._all(
            select(s.job_runs.c.job_label, s.job_runs.c.state, func.count().label("n")).group_by(
                s.job_runs.c.job_label, s.job_runs.c.state
            )
        )
        for row in rows:
            counts.setdefault(row["job_label"], {})[row["state"]] = int(row["n"])
        jobs = []
        for label, by_state in sorted(counts.items()):
            good = by_state.get("succeeded", 0) + by_state.get("skipped", 0)
            finished = good + by_state.get("failed", 0)
            jobs.append(
                JobStats(
                    job_label=label,
                    succeeded=by_state.get("succeeded", 0),
                    skipped=by_state.get("skipped", 0),
                    failed=by_state.get("failed", 0),
                    dep_miss=by_state.get("dep_miss", 0),
                    cancelled=by_state.get("cancelled", 0),
                    in_progress=by_state.get("queued", 0) + by_state.get("running", 0),
                    success_rate=good / finished if finished else None,
                )
            )
        kinds = {
            r["kind"]: int(r["n"])
            for r in self._all(
                select(s.delegations.c.kind, func.count().label("n")).group_by(s.delegations.c.kind)
            )
        }
        joined = self._all(
            select(func.count().label("n"))
            .select_from(s.want_job_runs)
            .where(s.want_job_runs.c.relation == "delegated")
        )[0]["n"]
        return BuildStats(
            jobs=jobs,
            delegations_active=kinds.get("active", 0),
            delegations_historical=kinds.get("historical", 0),
            builds_avoided=sum(j.skipped for j in jobs) + int(joined),
        )


class Events(EventReads, WriteBase):
    """Maintenance of the projections."""

    def rebuild_projections(self) -> int:
        """Throw current state away and derive it again from the events alone. Returns events replayed."""
        with self._write(alone=True) as tx:  # no command may run while state is rebuilt
            for table in reversed(s.PROJECTIONS):
                tx.conn.execute(delete(table))
            count = 0
            for row in tx.conn.execute(select(s.events).order_by(s.events.c.idx)).mappings():
                projector.apply(tx.conn, ev.EVENT_ADAPTER.validate_python(row["data"]), row["at"])
                count += 1
            return count
