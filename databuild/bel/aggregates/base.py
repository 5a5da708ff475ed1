"""What every aggregate of the build event log shares: the write transactions of commands, with the lock
keys they take, and the ids they give new runs and instances."""

import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime

from sqlalchemy import Connection, RowMapping, bindparam, select, update

from databuild.bel import schema as s
from databuild.bel.aggregates import admission
from databuild.bel.engine import insert_rows
from databuild.bel.engine.transaction import WriteTx
from databuild.bel.reads import rows
from databuild.bel.reads.base import ReadBase
from databuild.domain import decisions, wants
from databuild.errors import StaleAttemptError
from databuild.models import JobRunState, WantSpec


def new_job_run_id() -> str:
    return "jr-" + uuid.uuid4().hex[:16]


def new_instance_id() -> str:
    return str(uuid.uuid4())


def open_run(conn: Connection, run: RowMapping) -> decisions.OpenRun:
    """A run as its outcome's rules read it: the outputs whose build lock it still holds (one statement)."""
    held = rows.partitions_at(conn, run["outputs"])
    locked = [out for out, p in held.items() if p is not None and p.building_job_run_id == run["job_run_id"]]
    return decisions.OpenRun(job_run_id=run["job_run_id"], locked_outputs=locked)


SET_LEASE = update(s.job_run_leases).where(s.job_run_leases.c.job_run_id == bindparam("pk"))


class WriteBase(ReadBase):
    """Commands: each runs in one write transaction (``transaction.write``) holding the keys it decides
    about, loads state, asks a rule of ``databuild.domain`` which events to append, and appends them."""

    @contextmanager
    def _write(self, *keys: str, alone: bool = False) -> Iterator[WriteTx]:
        with self._log.write(*keys, alone=alone) as tx:
            yield tx

    @contextmanager
    def _write_run(self, job_run_id: str, admitting: bool = True) -> Iterator[WriteTx]:
        """A write transaction about a job run, holding its lock and its outputs' locks, and the locks of
        the pools it holds a slot of: when the run ends in it, its slots go to the runs waiting for them
        (unless not ``admitting``: the command never ends a run)."""
        with self._log.write(run=job_run_id) as tx:
            yield tx
            if admitting:
                self._admit(tx)

    @staticmethod
    def _admit(tx: WriteTx) -> None:
        """Give the slots of the pools a write about a run locked to the runs waiting for them (once)."""
        if tx.pools and not tx.admitted:
            tx.admitted = True
            admission.admit(tx, tx.pools)

    def _pool_locks(self, names: Iterable[str]) -> list[str]:
        """``names`` and every other pool that a run waiting in one of them needs: admitting runs from
        these pools reads (and so locks) them all."""
        wanted = set(names)
        if not wanted:
            return []
        waiting = select(s.run_pools.c.job_run_id).where(
            s.run_pools.c.pool.in_(wanted), s.run_pools.c.granted.is_(False)
        )
        others = select(s.run_pools.c.pool).where(s.run_pools.c.job_run_id.in_(waiting)).distinct()
        return sorted(wanted | {row["pool"] for row in self._all(others)})

    def _ensure_want(self, tx: WriteTx, spec: WantSpec) -> bool:
        events = wants.created(spec, known=rows.want_row(tx.conn, spec.want_id, required=False) is not None)
        tx.extend(events)
        return bool(events)

    def _open(
        self, conn: Connection, job_run_id: str, attempt: int | None = None
    ) -> decisions.OpenRun | None:
        row = self._open_run(conn, job_run_id, attempt)
        if row is None:
            return None
        return open_run(conn, row)

    def _open_run(self, conn: Connection, job_run_id: str, attempt: int | None = None) -> RowMapping | None:
        """The run if it has not ended. With ``attempt``: only if that attempt is still the current one,
        so an attempt that lost its heartbeat (and was retried elsewhere) can never record an outcome."""
        row = rows.job_run_row(conn, job_run_id)
        if JobRunState(row["state"]).is_final:
            return None
        if attempt is not None and row["attempts"] != attempt:
            raise StaleAttemptError(
                f"attempt {attempt} of job run {job_run_id} was superseded by attempt {row['attempts']}"
            )
        return row

    def _set_lease(self, conn: Connection, job_run_id: str, until: datetime) -> None:
        updated = conn.execute(SET_LEASE, {"pk": job_run_id, "expires_at": until})
        if updated.rowcount == 0:
            insert_rows(conn, s.job_run_leases, {"job_run_id": job_run_id, "expires_at": until})
