"""The engine beneath the build event log: what a backend does differently, behind one interface.

Everything the rest of the log writes or reads is a SQLAlchemy statement or one of the calls below; each
backend's module (``sqlite``, ``postgres``) holds all that is particular to its database: how engines are
made and pooled, how a write transaction locks its keys, how events get their gap-free index, how rows
go in bulk and how a snapshot is read. A statement that compiles differently per dialect (``@compiles``)
stays beside the statement."""

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import Connection, Engine, Table
from sqlalchemy.engine import make_url

from databuild.bel.engine import postgres, sqlite
from databuild.bel.engine.common import Row, updating

__all__ = ["Row", "updating"]


class Backend(Protocol):
    """One database's way of keeping the log (see the module of each)."""

    def engines(self, url: str) -> tuple[Engine, Engine]:
        """(writer, reader) engines for ``url``."""
        ...

    def write_lock(self, url: str) -> AbstractContextManager[object]:
        """What a write transaction of this process holds around BEGIN ... COMMIT."""
        ...

    def lock(self, conn: Connection, keys: Sequence[str], alone: bool) -> None:
        """Take the writers' lock (shared, or ``alone``) and the keys' locks, in sorted order."""
        ...

    def lock_run(self, conn: Connection, job_run_id: str) -> list[str]:
        """Take the writers' lock and the locks of a write about a job run: its own, its outputs', and
        those of the pools it holds a slot of with every pool a run waiting in one of them needs (admitting
        runs reads them). Returns those pools."""
        ...

    def write_events(self, conn: Connection, rows: list[dict[str, Any]], at: datetime) -> int | None:
        """Write a transaction's events (its last statement); the first provisional index they got, if
        they could not be given their place yet."""
        ...

    def place(self, conn: Connection, provisional: int) -> None:
        """After COMMIT: give the provisional events their place in the log."""
        ...

    def place_pending(self, engine: Engine) -> None:
        """Place events a writer committed but did not live to place."""
        ...

    def begin_snapshot(self, conn: Connection) -> None:
        """Before BEGIN: make the read transaction see one state of the log."""
        ...

    def read_alone(self, conn: Connection) -> None:
        """Before a read of one statement outside a transaction."""
        ...

    def lock_migrations(self, conn: Connection) -> None:
        """Keep other processes from upgrading the schema until this transaction ends."""
        ...

    def insert_rows(self, conn: Connection, table: Table, rows: Sequence[Row], skip_existing: bool) -> None:
        """See ``insert_rows``."""
        ...

    def upsert_rows(
        self, conn: Connection, table: Table, rows: Sequence[Row], setting: tuple[str, ...]
    ) -> None:
        """See ``upsert_rows``."""
        ...

    def update_rows(self, conn: Connection, table: Table, rows: Sequence[Row]) -> None:
        """See ``update_rows``."""
        ...

    def file_of(self, url: str) -> Path | None:
        """The file that holds the log, for a backend that keeps it in one (none for an in-memory one)."""
        ...


_BY_NAME: dict[str, Backend] = {"sqlite": sqlite.BACKEND, "postgresql": postgres.BACKEND}


def backend_named(name: str) -> Backend:
    """The backend of a SQLAlchemy dialect or URL backend name (any server database is PostgreSQL's)."""
    return _BY_NAME.get(name) or _BY_NAME["postgresql"]


def backend_of(bind: Connection | Engine) -> Backend:
    return backend_named(bind.dialect.name)


def backend_for(url: str) -> Backend:
    return backend_named(make_url(url).get_backend_name())


def insert_rows(
    conn: Connection, table: Table, rows: Row | Sequence[Row], *, skip_existing: bool = False
) -> None:
    """INSERT ``rows`` (one row, or rows with the same keys) into ``table`` in one statement; ``skip_existing``:
    a row whose key (any unique one) is there already is left as it is. Columns a row leaves out get their
    defaults, as with SQLAlchemy's INSERT."""
    many = [rows] if isinstance(rows, Mapping) else list(rows)
    if many:
        backend_of(conn).insert_rows(conn, table, many, skip_existing)


def upsert_rows(conn: Connection, table: Table, rows: Sequence[Row], *, setting: tuple[str, ...]) -> None:
    """INSERT ``rows`` into ``table``; a row whose primary key is there already gets the values of its
    columns ``setting`` instead (rows with distinct keys)."""
    if rows:
        backend_of(conn).upsert_rows(conn, table, rows, setting)


def update_rows(conn: Connection, table: Table, rows: Sequence[Row]) -> None:
    """UPDATE rows of ``table`` found by primary key: each of ``rows`` names the key and the values it
    sets (the same columns in every row; distinct keys)."""
    if rows:
        backend_of(conn).update_rows(conn, table, rows)
