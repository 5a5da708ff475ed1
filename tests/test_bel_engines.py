"""The BEL's PostgreSQL engine pings a pooled connection before using it only if the connection sat idle
(``engine.postgres.PING_AFTER_IDLE``): a ping is a round trip, and a read in autocommit paid two. A connection
the server dropped while idle is replaced; one dropped within the second fails its statement as a
connection lost mid-transaction would, and the pool renews itself."""

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.exc import DBAPIError

from databuild.bel.engine import postgres, transaction
from databuild.testing import POSTGRES_URL
from tests.conftest import require_postgres

IDLE = 2.0  # long enough that a loaded machine never stalls that long between two uses


@pytest.fixture
def pings(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The pings the engines made from now on send to the server."""
    sent: list[object] = []
    ping = PGDialect_psycopg.do_ping

    def counted(self: PGDialect_psycopg, dbapi_connection: object) -> bool:
        sent.append(dbapi_connection)
        return ping(self, dbapi_connection)

    monkeypatch.setattr(PGDialect_psycopg, "do_ping", counted)
    monkeypatch.setattr(postgres, "PING_AFTER_IDLE", IDLE)
    return sent


@pytest.fixture
def engine(pings: list[object]) -> Iterator[Engine]:
    require_postgres()
    writer, _ = transaction.make_engines(POSTGRES_URL)
    yield writer
    writer.dispose()


def backend_pid(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def terminate(pid: int) -> None:
    other, _ = transaction.make_engines(POSTGRES_URL)
    try:
        with other.connect() as conn:
            assert conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar_one()
    finally:
        other.dispose()


def test_a_connection_back_in_the_pool_within_the_second_is_not_pinged_an_idle_one_is(
    engine: Engine, pings: list[object]
) -> None:
    first = backend_pid(engine)  # a new connection: SQLAlchemy never pings those
    for _ in range(5):
        assert backend_pid(engine) == first
    assert pings == []
    time.sleep(IDLE + 0.5)
    assert backend_pid(engine) == first
    assert len(pings) == 1
    assert backend_pid(engine) == first and len(pings) == 1  # used just now again


def test_a_connection_the_server_dropped_while_idle_is_replaced_before_use(
    engine: Engine, pings: list[object]
) -> None:
    dropped = backend_pid(engine)
    terminate(dropped)
    time.sleep(IDLE + 0.5)
    assert backend_pid(engine) != dropped  # the ping found it gone; the statement ran on a new one
    assert len(pings) == 1


def test_a_connection_dropped_within_the_second_fails_one_statement_and_the_pool_renews(
    engine: Engine, pings: list[object]
) -> None:
    dropped = backend_pid(engine)
    terminate(dropped)
    with pytest.raises(DBAPIError) as failed, engine.connect() as conn:
        conn.execute(text("SELECT 1"))
    assert failed.value.connection_invalidated
    assert backend_pid(engine) != dropped and pings == []


def test_statements_are_planned_for_their_values_even_once_prepared(engine: Engine) -> None:
    """A generic plan compares each row with every element of an ``= ANY($1)`` list: the BEL's statements,
    prepared by psycopg after five runs, keep being planned for the values they are given (a list's
    elements hashed). Its lock timeout stays set beside it."""
    with engine.connect() as conn:
        assert conn.execute(text("SHOW plan_cache_mode")).scalar_one() == "force_custom_plan"
        assert conn.execute(text("SHOW lock_timeout")).scalar_one() == "20s"
