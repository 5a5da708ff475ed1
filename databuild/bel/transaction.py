"""Engines and write transactions of the build event log.

Every command runs in one write transaction that (1) takes per-key locks on the wants, job runs and
partitions it decides about, (2) reads current state, (3) appends events, each projected at once in the
same transaction, and (4) writes the events when it closes, just before COMMIT.

How the index stays global, gap-free and in commit order:

- SQLite admits one writer at a time (BEGIN IMMEDIATE, and a lock per process), so a transaction reads
  the head and writes its events at ``head + 1 ...`` before it commits.
- PostgreSQL writers on different keys run and commit in parallel, and readers only see events up to the
  head. A transaction's last statement writes its events at the indexes ``bel_reserve(n)`` (migration
  0.1.0) gives them: those after the head if no other transaction is placing events (it then holds the
  sequencer's lock until its COMMIT, so its events and the head become visible together). Otherwise
  (under load) the events get provisional indexes above ``PROVISIONAL`` (one step of a sequence per
  transaction), and after COMMIT the writer calls ``bel_sequence``: one transaction at a time moves
  every committed provisional event, in provisional order, to the indexes after the head and advances
  the head. One such call places the events of many writers; a writer whose events another call placed
  returns, writing nothing, once it has the sequencer's lock (it waits its turn for it). A writer
  returns only once its events are placed, so it reads its own writes; a reader reads the head and the
  events up to it in one snapshot (``event_page``), so it sees every index up to the head, and whatever
  commits later is placed after it.
  The order is the commit order as far as any transaction could tell: one that read or waited for
  another's writes did so after that one committed, so it reserved its indexes later. Key locks make a
  command's reads of its keys see the commits before it, and the projector's other reads are covered by
  the writers' lock (below), so replaying the events in index order rebuilds what was projected.
- Every write transaction holds the writers' lock shared; taint and rebuilding projections hold it
  alone (``alone=True``): no other command is between its reads and its commit.

Keys are always locked in sorted order, after the writers' lock, so transactions cannot deadlock.
"""

import json
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, Text, bindparam, create_engine, event, insert, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from databuild.bel import direct, projector
from databuild.bel import schema as s
from databuild.bel.checkpoints import checkpointer
from databuild.bel.measures import WRITE_SECONDS
from databuild.domain import events as ev
from databuild.errors import ConfigurationError
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
    so the read-decide-append of a command is serialised across threads and processes. Raises
    ``ConfigurationError`` for a URL SQLAlchemy cannot use (naming no part of it: it may hold a password)."""
    try:
        return _make_engines(url)
    except (ArgumentError, ImportError, OSError, ValueError) as error:
        # A ValueError quotes the part it could not read, which may be a password.
        why = "its port is not a number" if type(error) is ValueError else str(error)
        raise ConfigurationError(
            f"DATABUILD_DATABASE_URL is not a database URL DataBuild can use ({why}); write it like "
            "sqlite:////abs/path/bel.sqlite or postgresql+psycopg://user@host/db"
        ) from None


def _make_engines(url: str) -> tuple[Engine, Engine]:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        engine = _postgres_engine(url)
        return engine, engine
    file = Path(parsed.database) if parsed.database and parsed.database != ":memory:" else None
    if file is not None:
        file.parent.mkdir(parents=True, exist_ok=True)
    return _sqlite_engine(url, file, immediate=True), _sqlite_engine(url, file, immediate=False)


# A connection checked in this recently is not pinged when checked out again (see _postgres_engine).
PING_AFTER_IDLE = 1.0


def _postgres_engine(url: str) -> Engine:
    engine = create_engine(
        url,
        pool_pre_ping=True,
        pool_size=10,
        max_overflow=20,
        # Give up on a lock well before the activity times out, so a retry never runs beside us.
        connect_args={"options": "-c lock_timeout=20000"},
    )
    # Rows inserted together go as one multi-row INSERT: psycopg's own executemany runs a pipeline,
    # which costs more Python per call than the handful of rows a command writes.
    engine.dialect.use_insertmanyvalues_wo_returning = True
    # The pre-ping is a round trip of its own for every checkout: a read in autocommit paid two, a
    # decision group's transaction one in thirteen. A connection back in the pool less than a second ago
    # is not pinged; should the server have gone in that second, the statement fails as it would have on
    # a connection lost mid-transaction, and the pool is renewed (a disconnect invalidates it).
    checked_in: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
    ping = engine.dialect.do_ping

    @event.listens_for(engine, "checkin")
    def _checkin(dbapi_conn: Any, _record: Any) -> None:
        if dbapi_conn is not None:  # None: the connection was invalidated
            checked_in[dbapi_conn] = time.monotonic()

    def do_ping(dbapi_conn: Any) -> bool:
        last = checked_in.get(dbapi_conn)
        return (last is not None and time.monotonic() - last < PING_AFTER_IDLE) or ping(dbapi_conn)

    engine.dialect.do_ping = do_ping  # type: ignore[method-assign, assignment]
    return engine


def _sqlite_engine(url: str, file: Path | None, immediate: bool) -> Engine:
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


# PostgreSQL (see migration 0.1.0): provisional indexes start here (a transaction appends at most 2^20
# events, one step of the provisional sequence). Two-key advisory locks, apart from the one-key locks on
# wants, runs and refs: every writer shares (LOCK_SPACE, WRITERS); placing events takes (LOCK_SPACE, 2).
PROVISIONAL = 1 << 62
LOCK_SPACE = 0x42454C  # "BEL"
WRITERS = 1

_LOCK_SHARED = text(
    "SELECT pg_advisory_xact_lock_shared(:space, :writers) UNION ALL "
    "SELECT pg_advisory_xact_lock(hashtextextended(k, 0)) FROM unnest(CAST(:keys AS text[])) AS k"
)
_LOCK_ALONE = text(
    "SELECT pg_advisory_xact_lock(:space, :writers) UNION ALL "
    "SELECT pg_advisory_xact_lock(hashtextextended(k, 0)) FROM unnest(CAST(:keys AS text[])) AS k"
)
# PostgreSQL: the indexes are reserved and the events written in one round trip. A CTE calling a volatile
# function runs once; a data-modifying CTE runs to completion though nothing reads it.
_RESERVE_AND_WRITE = text(
    "WITH reserved AS (SELECT bel_reserve(:n) AS first), "
    "written AS (INSERT INTO events (idx, type, at, want_id, job_run_id, ref, data) "
    "SELECT reserved.first + e.pos, e.type, :at, e.want_id, e.job_run_id, e.ref, e.data "
    "FROM reserved, json_to_recordset(CAST(:events AS json)) "
    "AS e(pos integer, type text, want_id text, job_run_id text, ref text, data json)) "
    "SELECT first FROM reserved"
).bindparams(bindparam("at", type_=s.UTCDateTime()))
# SQLite: one statement takes ``n`` indexes after the head (built once: see bel.rows).
_TAKE = (
    update(s.head)
    .where(s.head.c.id == 1)
    .values(last_idx=s.head.c.last_idx + bindparam("n"))
    .returning(s.head.c.last_idx)
)
# SQLite: the events with their data as the JSON text pydantic writes (its JSON column would encode it again).
_WRITE_EVENTS = insert(s.events).values(data=bindparam("data", type_=Text))
_SEQUENCE = text("SELECT bel_sequence(:mine)")
_SEQUENCE_PENDING = text("SELECT bel_sequence(NULL)")


def _events_document(rows: list[dict[str, Any]]) -> str:
    """PostgreSQL reads a transaction's events as one JSON document: each row's keys, with its event's own
    JSON text as ``data`` (not decoded and encoded again)."""
    keys = (json.dumps({k: v for k, v in row.items() if k != "data"})[:-1] for row in rows)
    return (
        "[" + ",".join(f'{head}, "data": {row["data"]}}}' for head, row in zip(keys, rows, strict=True)) + "]"
    )


class WriteTx:
    """One write transaction: key locks first, then events, projected as they are appended and written
    when the transaction closes (so its own statements do not see its events in ``events``)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.at = now()
        self.events: list[ev.Event] = []
        self.postgres = conn.dialect.name == "postgresql"
        self.provisional: int | None = None  # the first provisional index of its events, if it has them

    def lock(self, *keys: str, alone: bool = False) -> None:
        """Serialise commands about the same wants, job runs or partitions (call once, first). ``alone``:
        wait for every other write transaction to end, and keep new ones out until this one ends."""
        assert not self.events, "lock keys before appending"
        if self.postgres:
            self.conn.execute(
                _LOCK_ALONE if alone else _LOCK_SHARED,
                {"space": LOCK_SPACE, "writers": WRITERS, "keys": sorted(set(keys))},
            )

    def append(self, event: ev.Event) -> None:
        projector.apply(self.conn, event, self.at)
        self.events.append(event)

    def extend(self, events: Sequence[ev.Event]) -> None:
        projector.apply_all(self.conn, events, self.at)
        self.events.extend(events)

    def extend_each(self, commands: Sequence[Sequence[ev.Event]]) -> None:
        """Append the events of commands that touch no row in common: to the log command after command,
        to the projections together (``projector.merged``)."""
        projector.apply_all(self.conn, projector.merged(commands), self.at)
        for events in commands:
            self.events.extend(events)

    def close(self) -> None:
        """Write the events (the transaction's last statements before COMMIT)."""
        if not self.events:
            return
        rows: list[dict[str, Any]] = []
        for position, appended in enumerate(self.events):
            want_id, job_run_id, ref = ev.event_keys(appended)
            rows.append(
                {
                    "pos": position,
                    "type": appended.type,
                    "want_id": want_id,
                    "job_run_id": job_run_id,
                    "ref": ref,
                    # One encoding on both backends: the JSON text pydantic writes.
                    "data": appended.model_dump_json(),
                }
            )
        if self.postgres:
            params = {"n": len(rows), "at": self.at, "events": _events_document(rows)}
            first = int(self.conn.execute(_RESERVE_AND_WRITE, params).scalar_one())
            self.provisional = first if first >= PROVISIONAL else None
            return
        # One statement takes the indexes: SQLite's write lock, held since BEGIN IMMEDIATE, orders it.
        last = direct.scalar(self.conn, _TAKE, {"n": len(rows)})
        if last is None:
            raise RuntimeError("the build event log is not initialised; open it with BuildEventLog.create()")
        first = last - len(rows) + 1
        for row in rows:
            row["idx"] = first + row.pop("pos")
            row["at"] = self.at
        direct.execute(self.conn, _WRITE_EVENTS, rows)

    def place(self) -> None:
        """After COMMIT: return once the events have their place in the log (PostgreSQL, when ``close``
        could only give them provisional indexes)."""
        if self.provisional is not None:
            self.conn.execution_options(isolation_level="AUTOCOMMIT")
            self.conn.execute(_SEQUENCE, {"mine": self.provisional})


@contextmanager
def write(
    engine: Engine, lock: AbstractContextManager[object], *keys: str, alone: bool = False
) -> Iterator[WriteTx]:
    """A write transaction holding ``keys`` (see ``WriteTx.lock``), committed when the block ends and
    then placed in the log. Its duration, lock waits included, is this process's BEL write latency."""
    with WRITE_SECONDS.time(), lock, engine.connect() as conn:
        with conn.begin():
            tx = WriteTx(conn)
            tx.lock(*keys, alone=alone)
            yield tx
            tx.close()
        tx.place()


def place_pending(engine: Engine) -> None:
    """Place events that a writer committed but did not live to place (PostgreSQL; a no-op otherwise)."""
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.execute(_SEQUENCE_PENDING)
