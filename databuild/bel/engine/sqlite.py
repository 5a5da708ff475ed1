"""SQLite, the embedded default: one writer at a time, in a WAL file the readers read beside it.

Writers take the database lock up front (BEGIN IMMEDIATE), so the read-decide-append of a command is
serialised across threads and processes, and a transaction reads the head and writes its events at
``head + 1 ...`` before it commits: the index is gap-free and in commit order with no lock per key. Rows
go in bulk as ``executemany`` of one cached statement (which costs SQLite nothing to parse again), on the
driver's own path (``direct``)."""

import functools
import sqlite3
import threading
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Insert,
    Table,
    Text,
    bindparam,
    create_engine,
    event,
    insert,
    select,
    union,
    update,
)
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import make_url

from databuild.bel import schema as s
from databuild.bel.engine.checkpoints import checkpointer
from databuild.bel.engine.common import Row, updating
from databuild.bel.engine.direct import execute, rows, scalar
from databuild.globs import SQL_FUNCTION, sql_glob

# One statement takes ``n`` indexes after the head (built once: see bel.rows).
_TAKE = (
    update(s.head)
    .where(s.head.c.id == 1)
    .values(last_idx=s.head.c.last_idx + bindparam("n"))
    .returning(s.head.c.last_idx)
)
# The events with their data as the JSON text pydantic writes (its JSON column would encode it again).
_WRITE_EVENTS = insert(s.events).values(data=bindparam("data", type_=Text))
# The pools a run holds a slot of, with every pool a run waiting in one of them needs.
_mine, _waiting, _other = (s.run_pools.alias(name) for name in ("mine", "waiting", "other"))
_POOLS_OF_RUN = select(
    union(
        select(s.run_pools.c.pool).where(s.run_pools.c.job_run_id == bindparam("id")),
        select(_other.c.pool)
        .select_from(
            _mine.join(_waiting, (_waiting.c.pool == _mine.c.pool) & _waiting.c.granted.is_(False)).join(
                _other, _other.c.job_run_id == _waiting.c.job_run_id
            )
        )
        .where(_mine.c.job_run_id == bindparam("id")),
    )
    .subquery()
    .c.pool
)

_WRITERS: dict[str, threading.Lock] = {}
_WRITERS_GUARD = threading.Lock()


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


def _engine(url: str, file: Path | None, immediate: bool) -> Engine:
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
        # A commit that fills the WAL past this many pages copies them back into the database,
        # holding the write lock. A decision touches about 20 pages, so at SQLite's default (1,000)
        # every 50th command paid for the 49 before it; checkpointing a tenth as often copies each
        # page once for many commits (+15-25% decisions/s over 3,000 decisions) for a WAL of up to
        # 40 MB.
        cursor.execute("PRAGMA wal_autocheckpoint=10000")
        cursor.execute("PRAGMA case_sensitive_like=ON")  # ref prefixes match as on PostgreSQL
        cursor.close()
        dbapi_conn.create_function(SQL_FUNCTION, 2, sql_glob, deterministic=True)

    # The BEGIN is the dialect's own step, not a "begin" event as SQLAlchemy's pysqlite notes show:
    # any connection event makes SQLAlchemy dispatch its statement events around every execute, a
    # tenth of a decision's time (1.04 -> 0.93 ms a decision, one client).
    begin = "BEGIN IMMEDIATE" if immediate else "BEGIN"

    def do_begin(dbapi_conn: Any) -> None:
        dbapi_conn.execute(begin)

    engine.dialect.do_begin = do_begin  # type: ignore[method-assign, assignment]
    if immediate and file is not None:
        checkpoints = checkpointer(file)

        def do_commit(dbapi_conn: Any) -> None:
            dbapi_conn.commit()
            checkpoints.committed()

        engine.dialect.do_commit = do_commit  # type: ignore[method-assign, assignment]
    return engine


class SqliteBackend:
    def engines(self, url: str) -> tuple[Engine, Engine]:
        file = self.file_of(url)
        if file is not None:
            file.parent.mkdir(parents=True, exist_ok=True)
        return _engine(url, file, immediate=True), _engine(url, file, immediate=False)

    def write_lock(self, url: str) -> AbstractContextManager[object]:
        """SQLite admits one writer at a time, and a writer that finds the database busy sleeps and polls
        (up to 100 ms a turn), so under load some writers waited seconds while others got through
        (workflow tasks waiting on those local activities passed 5 s). Writers of one process queue on a
        lock instead, handed over at once; other processes still meet SQLite's busy handler."""
        file = self.file_of(url)
        key = str(file.resolve()) if file is not None else url
        with _WRITERS_GUARD:
            return _WRITERS.setdefault(key, threading.Lock())

    def lock(self, conn: Connection, keys: Sequence[str], alone: bool) -> None:
        """Nothing to take: BEGIN IMMEDIATE holds the whole database."""

    def lock_run(self, conn: Connection, job_run_id: str) -> list[str]:
        return sorted(row["pool"] for row in rows(conn, _POOLS_OF_RUN, {"id": job_run_id}))

    def write_events(self, conn: Connection, rows: list[dict[str, Any]], at: datetime) -> int | None:
        # One statement takes the indexes: SQLite's write lock, held since BEGIN IMMEDIATE, orders it.
        last = scalar(conn, _TAKE, {"n": len(rows)})
        if last is None:
            raise RuntimeError("the build event log is not initialised; open it with BuildEventLog.create()")
        first = last - len(rows) + 1
        for row in rows:
            row["idx"] = first + row.pop("pos")
            row["at"] = at
        execute(conn, _WRITE_EVENTS, rows)
        return None

    def place(self, conn: Connection, provisional: int) -> None:
        raise AssertionError("SQLite gives every event its place before COMMIT")

    def place_pending(self, engine: Engine) -> None:
        """Nothing is ever pending."""

    def begin_snapshot(self, conn: Connection) -> None:
        """A read transaction in WAL mode sees one state of the log already."""

    def read_alone(self, conn: Connection) -> None:
        """SQLAlchemy's default (a transaction the driver does not send) costs nothing."""

    def lock_migrations(self, conn: Connection) -> None:
        """BEGIN IMMEDIATE serialises upgrades already."""

    def insert_rows(self, conn: Connection, table: Table, rows: Sequence[Row], skip_existing: bool) -> None:
        execute(conn, _insert(table, skip_existing), rows[0] if len(rows) == 1 else rows)

    def upsert_rows(
        self, conn: Connection, table: Table, rows: Sequence[Row], setting: tuple[str, ...]
    ) -> None:
        execute(conn, _upsert(table, setting), rows)

    def update_rows(self, conn: Connection, table: Table, rows: Sequence[Row]) -> None:
        (key,) = (c.name for c in table.primary_key.columns)
        pk = [{"pk": row[key], **{name: v for name, v in row.items() if name != key}} for row in rows]
        execute(conn, updating(table), pk)

    def file_of(self, url: str) -> Path | None:
        database = make_url(url).database
        return Path(database) if database and database != ":memory:" else None


BACKEND = SqliteBackend()


@functools.cache
def _insert(table: Table, skip_existing: bool) -> Insert:
    return sqlite_insert(table).on_conflict_do_nothing() if skip_existing else insert(table)


@functools.cache
def _upsert(table: Table, setting: tuple[str, ...]) -> Insert:
    made = sqlite_insert(table)
    keys = list(table.primary_key.columns)
    return made.on_conflict_do_update(index_elements=keys, set_={c: made.excluded[c] for c in setting})
