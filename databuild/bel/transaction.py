"""Engines and write transactions of the build event log.

Every command runs in one write transaction that (1) takes per-key locks on the wants, job runs and
partitions it decides about, (2) reads current state, (3) appends events, which locks the head row
so that indexes are handed out gap-free and in commit order, and (4) projects each event in the same
transaction. Keys are always locked before the head, in sorted order, so transactions cannot
deadlock. On PostgreSQL the key locks are advisory transaction locks, so commands on different
partitions decide in parallel; SQLite serialises whole write transactions (BEGIN IMMEDIATE).
"""

import sqlite3
import threading
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, insert, select, text, update
from sqlalchemy.engine import make_url

from databuild.bel import projector
from databuild.bel import schema as s
from databuild.domain import events as ev
from databuild.globs import SQL_FUNCTION, sql_glob


def _enable_wal(cursor: Any) -> None:
    """Switching a new database to WAL needs a moment alone with it, and SQLite answers "database is
    locked" at once (without its busy handler) when other connections race it: retry briefly."""
    for attempt in range(50):
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or attempt == 49:
                raise
            time.sleep(0.1)


def now() -> datetime:
    return datetime.now(UTC)


def make_engines(url: str) -> tuple[Engine, Engine]:
    """(writer, reader) engines. On SQLite writers take the database lock up front (BEGIN IMMEDIATE),
    so the read-decide-append of a command is serialised across threads and processes."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        engine = create_engine(
            url,
            pool_pre_ping=True,
            pool_size=10,
            max_overflow=20,
            # Give up on a lock well before the activity times out, so a retry never runs beside us.
            connect_args={"options": "-c lock_timeout=20000"},
        )
        return engine, engine
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)

    def sqlite_engine(immediate: bool) -> Engine:
        engine = create_engine(
            url, pool_size=8, max_overflow=16, connect_args={"timeout": 20, "check_same_thread": False}
        )

        @event.listens_for(engine, "connect")
        def _connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # let SQLAlchemy's BEGIN below be the only one
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA busy_timeout=20000")
            _enable_wal(cursor)
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA case_sensitive_like=ON")  # ref prefixes match as on PostgreSQL
            cursor.close()
            dbapi_conn.create_function(SQL_FUNCTION, 2, sql_glob, deterministic=True)

        @event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

        return engine

    return sqlite_engine(immediate=True), sqlite_engine(immediate=False)


_SQLITE_WRITERS: dict[str, threading.Lock] = {}
_SQLITE_WRITERS_GUARD = threading.Lock()


def write_lock(url: str) -> AbstractContextManager[object]:
    """What a write transaction holds around BEGIN ... COMMIT in this process. SQLite admits one writer
    at a time, and a writer that finds the database busy sleeps and polls (up to 100 ms a turn), so
    under load some writers waited seconds while others got through (workflow tasks waiting on those
    local activities passed 5 s). Writers of one process queue on a lock instead, handed over at once;
    other processes still meet SQLite's busy handler. PostgreSQL locks per key (``WriteTx.lock``)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return nullcontext()
    key = str(Path(parsed.database).resolve()) if parsed.database else url
    with _SQLITE_WRITERS_GUARD:
        return _SQLITE_WRITERS.setdefault(key, threading.Lock())


class WriteTx:
    """One write transaction: key locks first, then events appended under the head lock."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.at = now()
        self.idx: int | None = None
        self._postgres = conn.dialect.name == "postgresql"

    def lock(self, *keys: str) -> None:
        """Serialise commands about the same wants, job runs or partitions (call once, first)."""
        assert self.idx is None, "lock keys before appending"
        if self._postgres:
            for key in sorted(set(keys)):
                self.conn.execute(
                    text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"), {"key": key}
                )

    def lock_head(self) -> int:
        if self.idx is None:
            row = self.conn.execute(
                select(s.head.c.last_idx).where(s.head.c.id == 1).with_for_update()
            ).first()
            if row is None:
                raise RuntimeError(
                    "the build event log is not initialised; open it with BuildEventLog.create()"
                )
            self.idx = int(row[0])
        return self.idx

    def append(self, event: ev.Event) -> int:
        self.idx = self.lock_head() + 1
        want_id, job_run_id, ref = ev.event_keys(event)
        self.conn.execute(
            insert(s.events).values(
                idx=self.idx,
                type=event.type,
                at=self.at,
                want_id=want_id,
                job_run_id=job_run_id,
                ref=ref,
                data=event.model_dump(mode="json"),
            )
        )
        projector.apply(self.conn, event, self.at)
        return self.idx

    def extend(self, events: Sequence[ev.Event]) -> None:
        for each in events:
            self.append(each)

    def close(self) -> None:
        if self.idx is not None:
            self.conn.execute(update(s.head).where(s.head.c.id == 1).values(last_idx=self.idx))
