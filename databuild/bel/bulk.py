"""Rows written in bulk: one statement for a command's rows of a table, whatever their number.

On PostgreSQL the rows go as one JSON document through ``json_populate_recordset``, in a statement whose
text depends only on the table and its columns. A multi-row ``VALUES`` list is a new text for every row
count, and psycopg parses a text with over 50 parameters afresh on every call (it caches only smaller
ones): a group of 16 decisions' job runs (13 columns each) spent a third of the group's client CPU so.
A constant text is parsed once and, run often, prepared by the server. SQLite takes the rows as
``executemany`` of one cached statement, which costs it nothing to parse again."""

import functools
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Insert, Table, TextClause, Update, bindparam, insert, text, update
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.sql.schema import ScalarElementColumnDefault

from databuild.bel import direct

Row = Mapping[str, Any]
_POSTGRES = postgresql.dialect()  # type: ignore[no-untyped-call]  # for its quoting rules


def insert_rows(
    conn: Connection, table: Table, rows: Row | Sequence[Row], *, skip_existing: bool = False
) -> None:
    """INSERT ``rows`` (one row, or rows with the same keys) into ``table``; ``skip_existing``: a row
    whose key (any unique one) is there already is left as it is. Columns a row leaves out get their
    defaults, as with SQLAlchemy's INSERT."""
    many = [rows] if isinstance(rows, Mapping) else list(rows)
    if not many:
        return
    if conn.dialect.name != "postgresql":
        direct.execute(conn, _sqlite_insert(table, skip_existing), many[0] if len(many) == 1 else many)
        return
    _insert_recordset(conn, table, many, " ON CONFLICT DO NOTHING" if skip_existing else "")


def upsert_rows(conn: Connection, table: Table, rows: Sequence[Row], *, setting: tuple[str, ...]) -> None:
    """INSERT ``rows`` into ``table``; a row whose primary key is there already gets the values of its
    columns ``setting`` instead (rows with distinct keys)."""
    if not rows:
        return
    if conn.dialect.name != "postgresql":
        direct.execute(conn, _sqlite_upsert(table, setting), rows)
        return
    _insert_recordset(conn, table, rows, _on_conflict(table, setting))


def update_rows(conn: Connection, table: Table, rows: Sequence[Row]) -> None:
    """UPDATE rows of ``table`` found by primary key: each of ``rows`` names the key and the values it
    sets (the same columns in every row; distinct keys)."""
    if not rows:
        return
    (key,) = (c.name for c in table.primary_key.columns)
    if conn.dialect.name != "postgresql":
        pk = [{"pk": row[key], **{name: v for name, v in row.items() if name != key}} for row in rows]
        direct.execute(conn, updating(table), pk)
        return
    setting = tuple(c.name for c in table.columns if c.name in rows[0] and c.name != key)
    document = json.dumps(list(rows), default=_json_value)
    conn.execute(_recordset_update(table, key, setting), {"rows": document})


@functools.cache
def updating(table: Table) -> Update:
    """UPDATE of the row of ``table`` whose primary key is bound as ``pk``, setting the columns the
    parameters name. Built once per table: SQLAlchemy builds and keys a statement made per call again
    each time, which costs more than running it on SQLite."""
    (key,) = table.primary_key.columns
    return update(table).where(key == bindparam("pk"))


@functools.cache
def _sqlite_insert(table: Table, skip_existing: bool) -> Insert:
    return sqlite_insert(table).on_conflict_do_nothing() if skip_existing else insert(table)


@functools.cache
def _sqlite_upsert(table: Table, setting: tuple[str, ...]) -> Insert:
    made = sqlite_insert(table)
    keys = list(table.primary_key.columns)
    return made.on_conflict_do_update(index_elements=keys, set_={c: made.excluded[c] for c in setting})


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
