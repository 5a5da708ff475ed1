"""The `unit` tier, enforced rather than trusted (a pytest plugin, loaded by tests/conftest.py).

A test marked `unit` needs no Temporal server, no Spark and no PostgreSQL (SQLite, in memory or in a file,
is fine) and measures no latency (that is `serial`: it needs the machine to itself), so that `make fast`
(`pytest -m unit`) runs the tier on any machine in under two minutes; for that, the few tests that wait
out a store's retries (tens of seconds each) stay out of it too (tests/test_error_surfaces.py).

While a unit test runs, its fixtures included, starting a Temporal server, a SparkSession or a Temporal or
Spark program, or connecting to the tests' PostgreSQL, fails it at once; so does asking for a fixture
built on the session's Temporal server or SparkSession (which an earlier test may have started already),
or a `serial` marker. A marker that lied would otherwise rot unnoticed: the test would still pass, only
slower, and not anywhere.
"""

import contextlib
import os
import shlex
import subprocess
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any, NoReturn

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from pyspark.sql import SparkSession
from sqlalchemy.engine import make_url
from temporalio.testing import WorkflowEnvironment

from databuild.testing import POSTGRES_ADMIN_URL, POSTGRES_URL

MARKER = "unit"
# The session fixtures of tests/conftest.py that are a server; every fixture built on them (make_stack,
# demo_run, a module's own stack) has them in its closure.
SERVER_FIXTURES = frozenset({"temporal_env", "spark_runtime"})
# Programs that are a Temporal server or Spark (a JVM): a unit test starts none of them.
SERVER_PROGRAMS = frozenset(
    {"temporal", "temporal-test-server", "spark-submit", "spark-class", "pyspark", "beeline", "java"}
)
# psycopg's keyword arguments that are not connection parameters.
NOT_CONNINFO = frozenset({"autocommit", "prepare_threshold", "context", "row_factory", "cursor_factory"})
LOCAL_HOSTS = frozenset({"", "localhost", "127.0.0.1", "::1"})


def is_unit(item: pytest.Item) -> bool:
    return item.get_closest_marker(MARKER) is not None


def refuse(what: str) -> NoReturn:
    """Fail the running unit test. ``pytest.fail`` raises a BaseException, so no ``except Exception`` in
    the code under test (``require_postgres`` skips on any Exception) turns the refusal into a pass or a
    skip."""
    pytest.fail(
        f"a `{MARKER}` test {what}: unit tests need no Temporal server, Spark or PostgreSQL; "
        f"remove the `{MARKER}` marker, or what needs the server",
        pytrace=False,
    )


def refusing(what: str) -> Callable[..., NoReturn]:
    def refused(*_args: object, **_kwargs: object) -> NoReturn:
        refuse(what)

    return refused


def server_program(args: object) -> str | None:
    """The Temporal or Spark program a ``Popen`` of ``args`` would run, if it is one."""
    if isinstance(args, str | bytes | os.PathLike):
        words = shlex.split(os.fsdecode(args))  # a command line (shell=True) or one program
    else:
        words = [os.fsdecode(word) for word in args]  # type: ignore[attr-defined]
    name = Path(words[0]).name if words else ""
    return name if name in SERVER_PROGRAMS else None


def postgres_addresses() -> set[tuple[str, int]]:
    """Host and port of the tests' PostgreSQL (the administrative database and this worker's own)."""
    urls = [make_url(url) for url in (POSTGRES_ADMIN_URL, POSTGRES_URL)]
    return {(url.host or "", url.port or 5432) for url in urls}


def is_test_postgres(conninfo: str, params: dict[str, Any], tests: set[tuple[str, int]]) -> bool:
    """Whether a psycopg connection with these arguments goes to the tests' PostgreSQL (a port where
    nothing listens, as a test of a BEL that is down uses, is no server)."""
    given = conninfo_to_dict(conninfo, **{k: v for k, v in params.items() if k not in NOT_CONNINFO})
    host = str(given.get("host") or given.get("hostaddr") or os.environ.get("PGHOST", ""))
    port = int(given.get("port") or os.environ.get("PGPORT") or 5432)
    local = host in LOCAL_HOSTS or host.startswith("/")  # a Unix socket is this machine's server
    return any(port == p and (host == h or (local and h in LOCAL_HOSTS)) for h, p in tests)


@contextlib.contextmanager
def servers_refused() -> Iterator[None]:
    """Every way a test starts a Temporal server or Spark, or reaches the tests' PostgreSQL, refuses."""
    tests = postgres_addresses()
    original_popen = subprocess.Popen.__init__
    connect, connect_async = psycopg.Connection.connect, psycopg.AsyncConnection.connect

    def popen(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        program = server_program(kwargs.get("executable") or args)
        if program:
            refuse(f"started `{program}`")
        original_popen(self, args, *rest, **kwargs)

    def checked(connect: Callable[..., Any]) -> Callable[..., Any]:
        def guarded(conninfo: str = "", **params: Any) -> Any:
            if is_test_postgres(conninfo, params, tests):
                refuse("connected to the tests' PostgreSQL")
            return connect(conninfo, **params)

        return guarded

    with pytest.MonkeyPatch.context() as patch:
        for starter in ("start_local", "start_time_skipping"):
            patch.setattr(WorkflowEnvironment, starter, refusing(f"started a Temporal server ({starter})"))
        for starter in ("getOrCreate", "create"):
            patch.setattr(SparkSession.Builder, starter, refusing(f"started a SparkSession ({starter})"))
        patch.setattr(subprocess.Popen, "__init__", popen)
        patch.setattr(psycopg, "connect", checked(connect))
        patch.setattr(psycopg.Connection, "connect", checked(connect))
        patch.setattr(psycopg.AsyncConnection, "connect", checked(connect_async))
        yield


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if not is_unit(item):
        return
    if wanted := SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
        refuse(f"asks for {', '.join(sorted(wanted))}")
    if item.get_closest_marker("serial"):  # it measures latency: it needs the machine to itself
        refuse("is marked `serial` too; a test that measures latency runs alone, not in the fast tier")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    if not is_unit(item):
        return (yield)
    with servers_refused():
        return (yield)
