"""What every aggregate of the build event log shares: reading the projections, and the write
transactions of commands with the lock keys they take."""

import asyncio
import functools
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any, ParamSpec, TypeVar

from sqlalchemy import Connection, Engine, RowMapping, Select, bindparam, select, update

from databuild.bel import admission, rows
from databuild.bel import schema as s
from databuild.bel.engine import backend_of, insert_rows
from databuild.bel.transaction import WriteTx, write
from databuild.domain import decisions, wants
from databuild.errors import StaleAttemptError
from databuild.models import JobRunState, WantSpec

P = ParamSpec("P")
R = TypeVar("R")


def new_job_run_id() -> str:
    return "jr-" + uuid.uuid4().hex[:16]


def new_instance_id() -> str:
    return str(uuid.uuid4())


SET_LEASE = update(s.job_run_leases).where(s.job_run_leases.c.job_run_id == bindparam("pk"))


class ReadBase:
    """Reads of the projections, each an indexed lookup (on this thread's snapshot, if one is open)."""

    # Threads that run BEL calls for async code (workers, the SDK, the web server), apart from asyncio's
    # default executor, so BEL steps of workflow tasks never queue behind unrelated blocking work. Few:
    # each call is short, and runnable threads contend with the event loop for the GIL (with 16, loop
    # callbacks stretched past 100 ms under a burst of wants; the registration rate was the same).
    THREADS = 4

    def __init__(self, reader: Engine) -> None:
        self.reader = reader
        self._pinned = threading.local()  # this thread's snapshot connection, if any
        self._backend = backend_of(reader)
        self._threads = ThreadPoolExecutor(self.THREADS, thread_name_prefix="databuild-bel")

    async def call(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """``fn(*args, **kwargs)`` (a BEL call) on the log's threads, off the event loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, functools.partial(fn, *args, **kwargs))

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Run the enclosed reads on one connection in one read transaction: a view assembled from
        several lookups then sees one state of the log, and costs one connection checkout."""
        if getattr(self._pinned, "conn", None) is not None:
            yield
            return
        with self.snapshot_connection() as conn, self.reading_on(conn):
            yield

    @contextmanager
    def snapshot_connection(self) -> Iterator[Connection]:
        """A connection in a read transaction that sees one state of the log."""
        with self.reader.connect() as conn:
            self._backend.begin_snapshot(conn)
            with conn.begin():
                yield conn

    @contextmanager
    def reading_on(self, conn: Connection) -> Iterator[None]:
        """Run this thread's reads on ``conn`` (a write transaction's: a command's result read inside it)."""
        before = getattr(self._pinned, "conn", None)
        self._pinned.conn = conn
        try:
            yield
        finally:
            self._pinned.conn = before

    def _all(self, query: Select[Any], params: dict[str, Any] | None = None) -> list[Any]:
        """The rows of ``query`` (with ``params`` bound: a statement built once takes its values so)."""
        # all(): one fetch of every row from the driver (iterating a result fetches them one at a time: 51 ms
        # of a page of 50 batch runs' 75,000 rows at a million instances on PostgreSQL).
        pinned: Connection | None = getattr(self._pinned, "conn", None)
        if pinned is not None:
            return list(pinned.execute(query, params).mappings().all())
        with self._read_alone() as conn:
            return list(conn.execute(query, params).mappings().all())

    def _count(self, query: Select[Any]) -> int:
        pinned: Connection | None = getattr(self._pinned, "conn", None)
        if pinned is not None:
            return int(pinned.execute(query).scalar_one())
        with self._read_alone() as conn:
            return int(conn.execute(query).scalar_one())

    @contextmanager
    def _read_alone(self) -> Iterator[Connection]:
        """A connection for one statement (outside a transaction, where the backend can)."""
        with self.reader.connect() as conn:
            self._backend.read_alone(conn)
            yield conn


class WriteBase(ReadBase):
    """Commands: each runs in one write transaction (``transaction.write``) holding the keys it decides
    about, loads state, asks a rule of ``databuild.domain`` which events to append, and appends them."""

    url: str
    writer: Engine
    _write_lock: AbstractContextManager[object]

    @contextmanager
    def _write(self, *keys: str, alone: bool = False) -> Iterator[WriteTx]:
        with write(self.writer, self._write_lock, *keys, alone=alone) as tx:
            yield tx

    @contextmanager
    def _write_run(self, job_run_id: str, admitting: bool = True) -> Iterator[WriteTx]:
        """A write transaction about a job run, holding its lock and its outputs' locks, and the locks of
        the pools it holds a slot of: when the run ends in it, its slots go to the runs waiting for them
        (unless not ``admitting``: the command never ends a run)."""
        with write(self.writer, self._write_lock, run=job_run_id) as tx:
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
        return decisions.OpenRun(job_run_id=job_run_id, locked_outputs=self._locked_outputs(conn, row))

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

    def _locked_outputs(self, conn: Connection, run: RowMapping) -> list[str]:
        return [
            out
            for out in run["outputs"]
            if (p := rows.partition_row(conn, out)) is not None
            and p["building_job_run_id"] == run["job_run_id"]
        ]

    def _set_lease(self, conn: Connection, job_run_id: str, until: datetime) -> None:
        updated = conn.execute(SET_LEASE, {"pk": job_run_id, "expires_at": until})
        if updated.rowcount == 0:
            insert_rows(conn, s.job_run_leases, {"job_run_id": job_run_id, "expires_at": until})
