"""The `unit` marker is enforced (tests/unit_tier.py): a unit test that starts a Temporal server or Spark,
reaches the tests' PostgreSQL, asks for a fixture built on the session's servers or is marked `serial`
(it measures latency) fails loudly, even where the code under it catches every Exception; what needs no
server runs as before."""

import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from pyspark.sql import SparkSession
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import create_async_engine
from temporalio.testing import WorkflowEnvironment

from databuild.jobs.spark import SparkRuntime
from databuild.testing import POSTGRES_URL, free_port, start_dev_server
from tests.conftest import require_postgres

pytestmark = pytest.mark.unit

REFUSED = pytest.fail.Exception  # a BaseException: no `except Exception` swallows it


async def test_a_temporal_server_is_refused() -> None:
    for start in (WorkflowEnvironment.start_local, WorkflowEnvironment.start_time_skipping, start_dev_server):
        with pytest.raises(REFUSED, match="a `unit` test started a Temporal server"):
            await start()


def test_spark_and_the_servers_programs_are_refused() -> None:
    with pytest.raises(REFUSED, match="started a SparkSession"):
        SparkSession.builder.master("local[1]").getOrCreate()
    with pytest.raises(REFUSED, match="a `unit` test started"):
        SparkRuntime("local[1]", "512m").session()
    bin_dir = Path(sys.executable).parent
    for command in (
        ["spark-submit", "--version"],
        [str(bin_dir / "temporal"), "server", "start-dev"],
        "temporal-test-server 7233",
    ):
        with pytest.raises(REFUSED, match="a `unit` test started `"):
            subprocess.run(command, shell=isinstance(command, str), capture_output=True)
    # Other programs, Python among them, still run.
    done = subprocess.run([sys.executable, "-c", "print('ran')"], capture_output=True, text=True)
    assert done.stdout == "ran\n"


async def test_the_tests_postgresql_is_refused_even_where_errors_are_caught() -> None:
    url = make_url(POSTGRES_URL)
    with pytest.raises(REFUSED, match="connected to the tests' PostgreSQL"):
        require_postgres()  # which skips the test on any Exception
    with pytest.raises(REFUSED, match="PostgreSQL"):
        create_engine(POSTGRES_URL).connect()
    with pytest.raises(REFUSED, match="PostgreSQL"):
        psycopg.connect(host=url.host, port=url.port or 5432, dbname=url.database, user=url.username)
    engine = create_async_engine(POSTGRES_URL)
    with pytest.raises(REFUSED, match="PostgreSQL"):
        await engine.connect().start()
    await engine.dispose()
    # A port where nothing listens is no server (as a test of a BEL that is down uses), and SQLite is fine.
    with pytest.raises(OperationalError):
        create_engine(f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/none").connect()
    with create_engine("sqlite://").connect() as conn:
        assert conn.execute(text("select 1")).scalar() == 1


def test_a_unit_test_on_a_server_fixture_or_serial_errors_even_once_the_server_is_up(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(
        """
        import pytest

        pytest_plugins = ["tests.unit_tier"]

        @pytest.fixture(scope="session")
        def temporal_env():
            yield "a server"

        @pytest.fixture
        def make_stack(temporal_env):
            yield temporal_env
        """
    )
    pytester.makeini(
        "[pytest]\nasyncio_default_fixture_loop_scope = session\nmarkers =\n    unit: no servers\n"
    )
    pytester.makepyfile(
        """
        import pytest

        def test_on_the_stack(make_stack):
            assert make_stack == "a server"

        @pytest.mark.unit
        def test_marked_unit_on_the_stack(make_stack):
            pass

        @pytest.mark.unit
        def test_marked_unit():
            pass

        @pytest.mark.unit
        @pytest.mark.serial
        def test_marked_unit_and_serial():
            pass
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, errors=2)
    result.stdout.fnmatch_lines(["*a `unit` test asks for temporal_env: unit tests need no Temporal server*"])
    result.stdout.fnmatch_lines(["*a `unit` test is marked `serial` too*"])
