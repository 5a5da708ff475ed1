"""PostgreSQL, the production backend: writers on different keys run and commit in parallel.

How the index stays global, gap-free and in commit order: a transaction's last statement writes its
events at the indexes ``bel_reserve(n)`` (migration 0.1.0) gives them: those after the head if no other
transaction is placing events (it then holds the sequencer's lock until its COMMIT, so its events and the
head become visible together). Otherwise (under load) the events get provisional indexes above
``PROVISIONAL`` (one step of a sequence per transaction), and after COMMIT the writer calls
``bel_sequence``: one transaction at a time moves every committed provisional event, in provisional
order, to the indexes after the head and advances the head. One such call places the events of many
writers; a writer whose events another call placed returns, writing nothing, once it has the sequencer's
lock (it waits its turn for it). A writer returns only once its events are placed, so it reads its own
writes; a reader reads the head and the events up to it in one snapshot (``events.page``), so it sees
every index up to the head, and whatever commits later is placed after it.

The order is the commit order as far as any transaction could tell: one that read or waited for another's
writes did so after that one committed, so it reserved its indexes later. Key locks (transaction-scoped
advisory locks) make a command's reads of its keys see the commits before it, and the projector's other
reads are covered by the writers' lock (every write transaction holds it shared; taint and rebuilding
projections hold it alone), so replaying the events in index order rebuilds what was projected.

Rows go in bulk as one JSON document through ``json_populate_recordset``, in a statement whose text
depends only on the table and its columns. A multi-row ``VALUES`` list is a new text for every row count,
and psycopg parses a text with over 50 parameters afresh on every call (it caches only smaller ones): a
group of 16 decisions' job runs (13 columns each) spent a third of the group's client CPU so. A constant
text is parsed once and, run often, prepared by the server."""

import functools
import json
import time
import weakref
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, Table, TextClause, bindparam, create_engine, event, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql.schema import ScalarElementColumnDefault

from databuild.bel import schema as s
from databuild.bel.engine.common import Row
from databuild.bel.engine.keys import pool_key, ref_key, run_key

# A connection checked in this recently is not pinged when checked out again (see ``engines``).
PING_AFTER_IDLE = 1.0

# Provisional indexes start here (a transaction appends at most 2^20 events, one step of the provisional
# sequence). Two-key advisory locks, apart from the one-key locks on wants, runs and refs: every writer
# shares (LOCK_SPACE, WRITERS); placing events takes (LOCK_SPACE, 2).
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
# A write about a job run finds its keys and locks them in one round trip. A run's outputs and pools are
# fixed when it is recorded; which other pools its waiting neighbours need may change, as it could between
# a read of them and the locks. Keys are locked in byte order, as every writer sorts them (Python's order).
_LOCK_RUN = text(
    "WITH pools AS ("
    " SELECT pool FROM run_pools WHERE job_run_id = :id"
    " UNION SELECT other.pool FROM run_pools mine"
    " JOIN run_pools waiting ON waiting.pool = mine.pool AND NOT waiting.granted"
    " JOIN run_pools other ON other.job_run_id = waiting.job_run_id WHERE mine.job_run_id = :id), "
    "keys AS (SELECT CAST(:run AS text) AS k"
    " UNION SELECT CAST(:ref AS text) || ref FROM job_run_outputs WHERE job_run_id = :id"
    " UNION SELECT CAST(:pool AS text) || pool FROM pools), "
    'sorted AS (SELECT array_agg(k ORDER BY k COLLATE "C") AS ks FROM keys) '
    "SELECT NULL AS pool FROM (SELECT pg_advisory_xact_lock_shared(:space, :writers)) AS writers "
    "UNION ALL SELECT NULL FROM sorted, unnest(sorted.ks) AS k, "
    "LATERAL (SELECT pg_advisory_xact_lock(hashtextextended(k, 0))) AS locked "
    "UNION ALL SELECT pool FROM pools"
)
# The indexes are reserved and the events written in one round trip. A CTE calling a volatile function
# runs once; a data-modifying CTE runs to completion though nothing reads it.
_RESERVE_AND_WRITE = text(
    "WITH reserved AS (SELECT bel_reserve(:n) AS first), "
    "written AS (INSERT INTO events (idx, type, at, want_id, job_run_id, ref, data) "
    "SELECT reserved.first + e.pos, e.type, :at, e.want_id, e.job_run_id, e.ref, e.data "
    "FROM reserved, json_to_recordset(CAST(:events AS json)) "
    "AS e(pos integer, type text, want_id text, job_run_id text, ref text, data json)) "
    "SELECT first FROM reserved"
).bindparams(bindparam("at", type_=s.UTCDateTime()))
_SEQUENCE = text("SELECT bel_sequence(:mine)")
_SEQUENCE_PENDING = text("SELECT bel_sequence(NULL)")
# Concurrent first starts (a worker and the CLI) take turns upgrading the schema on this lock.
_MIGRATIONS_KEY = 0x64617461_6275696C  # "databuil"

_POSTGRES = postgresql.dialect()  # type: ignore[no-untyped-call]  # for its quoting rules


class PostgresBackend:
    def engines(self, url: str) -> tuple[Engine, Engine]:
        engine = create_engine(
            url,
            pool_pre_ping=True,
            pool_size=10,
            max_overflow=20,
            # Give up on a lock well before the activity times out, so a retry never runs beside us. Plan
            # each statement for its values: psycopg prepares a statement after five runs, and the generic
            # plan PostgreSQL then keeps compares a row with every element of an `= ANY($1)` list (only a
            # list the plan sees is hashed): a decision group's read of 48 partitions took 2.2 ms, not 0.4.
            connect_args={"options": "-c lock_timeout=20000 -c plan_cache_mode=force_custom_plan"},
        )
        # Rows inserted together go as one multi-row INSERT: psycopg's own executemany runs a pipeline,
        # which costs more Python per call than the handful of rows a command writes.
        engine.dialect.use_insertmanyvalues_wo_returning = True
        # The pre-ping is a round trip of its own for every checkout: a read in autocommit paid two, a
        # decision group's transaction one in thirteen. A connection back in the pool less than a second
        # ago is not pinged; should the server have gone in that second, the statement fails as it would
        # have on a connection lost mid-transaction, and the pool is renewed (a disconnect invalidates it).
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
        return engine, engine

    def write_lock(self, url: str) -> AbstractContextManager[object]:
        return nullcontext()  # writers lock per key, in the database

    def lock(self, conn: Connection, keys: Sequence[str], alone: bool) -> None:
        conn.execute(
            _LOCK_ALONE if alone else _LOCK_SHARED,
            {"space": LOCK_SPACE, "writers": WRITERS, "keys": sorted(set(keys))},
        )

    def lock_run(self, conn: Connection, job_run_id: str) -> list[str]:
        keys = {"run": run_key(job_run_id), "ref": ref_key(""), "pool": pool_key("")}
        found = conn.execute(_LOCK_RUN, {"id": job_run_id, **keys, "space": LOCK_SPACE, "writers": WRITERS})
        return sorted(row[0] for row in found if row[0] is not None)

    def write_events(self, conn: Connection, rows: list[dict[str, Any]], at: datetime) -> int | None:
        params = {"n": len(rows), "at": at, "events": _events_document(rows)}
        first = int(conn.execute(_RESERVE_AND_WRITE, params).scalar_one())
        return first if first >= PROVISIONAL else None

    def place(self, conn: Connection, provisional: int) -> None:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        conn.execute(_SEQUENCE, {"mine": provisional})

    def place_pending(self, engine: Engine) -> None:
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.execute(_SEQUENCE_PENDING)

    def begin_snapshot(self, conn: Connection) -> None:
        conn.execution_options(isolation_level="REPEATABLE READ")

    def read_alone(self, conn: Connection) -> None:
        # A single statement sees one state of the log anyway, and BEGIN and ROLLBACK would be two round
        # trips more than the read.
        conn.execution_options(isolation_level="AUTOCOMMIT")

    def lock_migrations(self, conn: Connection) -> None:
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATIONS_KEY})

    def insert_rows(self, conn: Connection, table: Table, rows: Sequence[Row], skip_existing: bool) -> None:
        _insert_recordset(conn, table, rows, " ON CONFLICT DO NOTHING" if skip_existing else "")

    def upsert_rows(
        self, conn: Connection, table: Table, rows: Sequence[Row], setting: tuple[str, ...]
    ) -> None:
        _insert_recordset(conn, table, rows, _on_conflict(table, setting))

    def update_rows(self, conn: Connection, table: Table, rows: Sequence[Row]) -> None:
        (key,) = (c.name for c in table.primary_key.columns)
        setting = tuple(c.name for c in table.columns if c.name in rows[0] and c.name != key)
        document = json.dumps(list(rows), default=_json_value)
        conn.execute(_recordset_update(table, key, setting), {"rows": document})

    def file_of(self, url: str) -> Path | None:
        return None


BACKEND = PostgresBackend()


def _events_document(rows: list[dict[str, Any]]) -> str:
    """A transaction's events as one JSON document: each row's keys, with its event's own JSON text as
    ``data`` (not decoded and encoded again)."""
    keys = (json.dumps({k: v for k, v in row.items() if k != "data"})[:-1] for row in rows)
    return (
        "[" + ",".join(f'{head}, "data": {row["data"]}}}' for head, row in zip(keys, rows, strict=True)) + "]"
    )


def _on_conflict(table: Table, setting: tuple[str, ...]) -> str:
    keys = ", ".join(_quote(c.name) for c in table.primary_key.columns)
    changes = ", ".join(f"{_quote(c)} = EXCLUDED.{_quote(c)}" for c in setting)
    return f" ON CONFLICT ({keys}) DO UPDATE SET {changes}"


def _insert_recordset(conn: Connection, table: Table, rows: Sequence[Row], conflict: str) -> None:
    filled = _with_defaults(table, list(rows))
    columns = tuple(c.name for c in table.columns if c.name in filled[0])
    document = json.dumps(filled, default=_json_value)
    conn.execute(_recordset_insert(table, columns, conflict), {"rows": document})


@functools.cache
def _recordset_insert(table: Table, columns: tuple[str, ...], conflict: str) -> TextClause:
    names = ", ".join(map(_quote, columns))
    return text(
        f"INSERT INTO {_quote(table.name)} ({names}) SELECT {names} "
        f"FROM json_populate_recordset(NULL::{_quote(table.name)}, CAST(:rows AS json)){conflict}"
    )


@functools.cache
def _recordset_update(table: Table, key: str, setting: tuple[str, ...]) -> TextClause:
    name = _quote(table.name)
    changes = ", ".join(f"{_quote(c)} = r.{_quote(c)}" for c in setting)
    return text(
        f"UPDATE {name} SET {changes} FROM json_populate_recordset(NULL::{name}, CAST(:rows AS json)) AS r "
        f"WHERE {name}.{_quote(key)} = r.{_quote(key)}"
    )


def _quote(name: str) -> str:
    return str(_POSTGRES.identifier_preparer.quote(name))


def _with_defaults(table: Table, rows: list[Row]) -> list[Row]:
    """The rows with the scalar Python-side defaults of the columns they leave out (what SQLAlchemy's
    INSERT adds; server-side defaults apply by themselves, as the statement names no such column)."""
    missing = {name: value for name, value in _scalar_defaults(table).items() if name not in rows[0]}
    return [{**missing, **row} for row in rows] if missing else rows


@functools.cache
def _scalar_defaults(table: Table) -> dict[str, Any]:
    return {c.name: c.default.arg for c in table.columns if isinstance(c.default, ScalarElementColumnDefault)}


def _json_value(value: object) -> object:
    """A value JSON has no type for, as PostgreSQL reads it into its column: times as ISO 8601 in UTC
    (naive ones are UTC, as ``schema.UTCDateTime`` takes them)."""
    if isinstance(value, datetime):
        return (value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    raise TypeError(f"{type(value).__name__} is not a value a BEL row holds")
