"""Statements on every decision's path, run on SQLite straight through the driver's cursor.

SQLAlchemy's execution of a compiled and cached statement (an execution context, parameter and result
metadata, events) costs 50-150 us of Python per call on these machines: several times SQLite's own work
for a one-row statement, and a decision runs ten. Here SQLAlchemy still compiles each statement (once per
set of parameter names) and its parameters and results pass through the same type processors, but it runs
on the DBAPI connection inside the transaction SQLAlchemy began, and errors surface as SQLAlchemy's.

SQLAlchemy's own path is kept where this one would change what a caller sees: on PostgreSQL (whose
statements here are few and server-bound), outside a transaction, for a statement it cannot run as
compiled (expanding parameters, Python-side defaults it would compute per row), and while anyone listens
to the connection's statement events (tests and benchmarks counting statements see every one)."""

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Connection, Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.dml import UpdateBase
from sqlalchemy.sql.schema import ScalarElementColumnDefault
from sqlalchemy.sql.selectable import Select

Row = Mapping[str, Any]
Statement = Select[Any] | UpdateBase
Processor = Callable[[Any], Any] | None


@dataclass(frozen=True)
class _Compiled:
    sql: str
    names: tuple[str, ...]  # bound parameters, in the order of the statement's placeholders
    fixed: Mapping[str, Any]  # values the statement binds itself (literals, scalar column defaults)
    processors: tuple[Processor, ...]  # per placeholder
    columns: tuple[str, ...]  # result columns
    results: tuple[Processor, ...]  # per result column

    def parameters(self, given: Row) -> tuple[Any, ...]:
        values = []
        for name, process in zip(self.names, self.processors, strict=True):
            value = given[name] if name in given else self.fixed[name]
            values.append(value if process is None else process(value))
        return tuple(values)

    def row(self, values: Sequence[Any]) -> dict[str, Any]:
        return {
            column: value if process is None else process(value)
            for column, process, value in zip(self.columns, self.results, values, strict=True)
        }


@functools.lru_cache(maxsize=512)
def _compile(statement: Statement, dialect: Dialect, keys: frozenset[str]) -> _Compiled | None:
    """``statement`` as the driver runs it with parameters named ``keys``; None if only SQLAlchemy can."""
    compiled = statement.compile(dialect=dialect, column_keys=sorted(keys))
    assert isinstance(compiled, SQLCompiler)
    if compiled.positiontup is None or compiled.post_compile_params or compiled.literal_execute_params:
        return None
    fixed: dict[str, Any] = {}
    for column in (*compiled.insert_prefetch, *compiled.update_prefetch):
        if not isinstance(column.default, ScalarElementColumnDefault):
            return None  # a default SQLAlchemy computes per execution
        fixed[column.key] = column.default.arg
    binds = compiled.binds
    for name, bind in binds.items():
        if bind.callable is not None:
            return None  # a value SQLAlchemy computes per execution
        if not bind.required and name not in fixed:
            fixed[name] = bind.value
    names = tuple(compiled.positiontup)
    if any(name not in keys and name not in fixed for name in names):
        return None  # a parameter SQLAlchemy would fill some other way
    columns = _result_columns(statement)
    return _Compiled(
        sql=compiled.string,
        names=names,
        fixed=fixed,
        processors=tuple(binds[name].type.dialect_impl(dialect).bind_processor(dialect) for name in names),
        columns=tuple(column.key for column in columns),
        results=tuple(
            column.type.dialect_impl(dialect).result_processor(dialect, None) for column in columns
        ),
    )


def _result_columns(statement: Statement) -> list[Any]:
    return list(statement.selected_columns if isinstance(statement, Select) else statement.exported_columns)


def _prepared(conn: Connection, statement: Statement, keys: frozenset[str]) -> _Compiled | None:
    # Any listener to the connection's events takes SQLAlchemy's path (the test SQLAlchemy makes itself).
    if (
        conn.dialect.name != "sqlite"
        or not conn.in_transaction()
        or conn._has_events
        or conn.engine._has_events
    ):
        return None
    return _compile(statement, conn.dialect, keys)


def _run(conn: Connection, prepared: _Compiled, parameters: Any, many: bool) -> Any:
    driver = conn.connection.dbapi_connection
    assert driver is not None
    try:
        return (
            driver.executemany(prepared.sql, parameters) if many else driver.execute(prepared.sql, parameters)
        )
    except conn.dialect.loaded_dbapi.Error as error:
        raise DBAPIError.instance(
            prepared.sql,
            parameters,
            error,
            conn.dialect.loaded_dbapi.Error,
            dialect=conn.dialect,
            ismulti=many,
        ) from error


def execute(conn: Connection, statement: UpdateBase, rows: Row | Sequence[Row]) -> None:
    """Run a statement that returns nothing: once, or once per row of parameters (the same names in each)."""
    batch = [rows] if isinstance(rows, Mapping) else rows
    prepared = _prepared(conn, statement, frozenset(batch[0]))
    if prepared is None:
        conn.execute(statement, rows if isinstance(rows, Mapping) else list(rows))
    elif isinstance(rows, Mapping):
        _run(conn, prepared, prepared.parameters(rows), many=False)
    else:
        _run(conn, prepared, [prepared.parameters(row) for row in rows], many=True)


def rows(conn: Connection, statement: Select[Any], parameters: Row) -> list[Row]:
    """The rows a statement returns, each a mapping of its columns' names to their values."""
    prepared = _prepared(conn, statement, frozenset(parameters))
    if prepared is None:
        return cast(list[Row], conn.execute(statement, parameters).mappings().all())
    return [
        prepared.row(values) for values in _run(conn, prepared, prepared.parameters(parameters), many=False)
    ]


def scalar(conn: Connection, statement: Statement, parameters: Row) -> Any:
    """The first column of the first row a statement returns, or None."""
    prepared = _prepared(conn, statement, frozenset(parameters))
    if prepared is None:
        return conn.execute(statement, parameters).scalar()
    found = _run(conn, prepared, prepared.parameters(parameters), many=False).fetchall()  # ends the statement
    return prepared.row(found[0])[prepared.columns[0]] if found else None
