"""Pools and leases: admission of queued runs to pool slots, batches closing, build leases."""

from collections.abc import Mapping
from datetime import timedelta

from sqlalchemy import select

from databuild.bel import schema as s
from databuild.bel.aggregates.admission import admit, slots_taken
from databuild.bel.aggregates.base import WriteBase
from databuild.bel.engine.keys import pool_key, run_key
from databuild.bel.engine.transaction import now
from databuild.bel.reads.rows import (
    job_run_row,
)
from databuild.domain import pools
from databuild.models import (
    JobRunState,
)

# Asked each time a run ends, so built once.
ADMITTED_NOT_STARTED = select(s.job_runs.c.workflow_id).where(
    s.job_runs.c.state == JobRunState.queued.value,
    s.job_runs.c.admitted.is_(True),
    s.job_runs.c.job_run_id.in_(select(s.run_pools.c.job_run_id).where(s.run_pools.c.granted.is_(True))),
)


class Pools(WriteBase):
    """Admission and leases."""

    def request_admission(self, job_run_id: str, slots: Mapping[str, int]) -> bool:
        """May the queued run start? It may once it holds a slot of each pool in ``slots`` (name ->
        capacity); until then it waits in line (most urgent first, then oldest), and the slots of runs
        that end go to the head of the line. Admitted, a batch run takes no more partitions. True also
        for a run that has ended (its job then finds nothing to do)."""
        locks = self._pool_locks(slots)
        with self._write(run_key(job_run_id), *map(pool_key, locks)) as tx:
            row = job_run_row(tx.conn, job_run_id)
            in_line = tx.conn.execute(
                select(s.run_pools.c.pool).where(s.run_pools.c.job_run_id == job_run_id)
            ).first()
            asked = pools.request(
                job_run_id, JobRunState(row["state"]), bool(row["admitted"]), slots, in_line is not None
            )
            tx.extend(asked.events)
            return asked.settled or job_run_id in admit(tx, locks)

    def batch_is_full(self, job_run_id: str) -> bool:
        rows = self._all(
            select(s.job_runs.c.members, s.job_runs.c.batch_limit).where(
                s.job_runs.c.job_run_id == job_run_id
            )
        )
        return (
            bool(rows)
            and rows[0]["batch_limit"] is not None
            and len(rows[0]["members"]) >= rows[0]["batch_limit"]
        )

    def have_room(self, slots: Mapping[str, int]) -> bool:
        """Whether each pool (name -> slots) has a slot no run holds (a read: admission decides)."""
        taken = {row["pool"]: int(row["n"]) for row in self._all(slots_taken(slots))}
        return all(taken.get(pool, 0) < n for pool, n in slots.items())

    def admitted_not_started(self) -> list[str]:
        """Workflow ids of the runs given a pool slot that have not started yet: the runs to wake."""
        rows = self._all(ADMITTED_NOT_STARTED)
        return [row["workflow_id"] for row in rows]

    def renew_lease(self, job_run_id: str, lease: timedelta) -> None:
        """Called by the worker running the job while it heartbeats (not an event: it is operational)."""
        with self._write(run_key(job_run_id)) as tx:
            self._set_lease(tx.conn, job_run_id, tx.at + lease)

    def lease_expired(self, job_run_id: str) -> bool:
        rows = self._all(
            select(s.job_run_leases.c.expires_at).where(s.job_run_leases.c.job_run_id == job_run_id)
        )
        return not rows or rows[0]["expires_at"] < now()
