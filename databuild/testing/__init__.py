"""What tests and benchmarks share (as ``temporalio.testing`` is for workflows), so that bench/ holds only
scripts that measure and tests/ imports nothing from it.

Here: throwaway environments (a Temporal dev server, settings for a scratch home, a PostgreSQL database of
one's own, a free port), the check that a log's projections are what its events alone say, and a build
recorded as a worker records it without Temporal. In the
submodules: a Spark standalone cluster and `databuild worker` processes on loopback (``cluster``), the
proof under faults (``chaos``), and the graphs the benchmarks run (``graphs``)."""

import asyncio
import contextlib
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, create_engine, select
from sqlalchemy.engine import make_url
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError

from databuild.bel import BuildEventLog
from databuild.bel import schema as s
from databuild.config import Settings
from databuild.temporal.connection import CACHED_SEARCH_ATTRIBUTES, temporal_binary
from databuild.temporal.protocol import SEARCH_ATTRIBUTES

if TYPE_CHECKING:  # imported where used: a graph of ``graphs`` loads in a `databuild` command's start
    from temporalio.testing import WorkflowEnvironment

    from databuild.graph import Graph
    from databuild.jobs.storage import Storage
    from databuild.models import InstanceRef

log = logging.getLogger(__name__)

# Wall time after which a time-skipping sleep whose clock only keeps pace is taken as held by a leaked lock.
STUCK_AFTER = timedelta(seconds=20)

# The PostgreSQL the tests and benchmarks use (an existing database; CI provides one).
POSTGRES_ADMIN_URL = os.environ.get(
    "DATABUILD_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def worker_database_url(admin_url: str, worker: str | None, run: str | None) -> str:
    """Each pytest-xdist worker of each test run gets a database of its own next to ``admin_url``'s
    (``test_gw0_<run>``): the BEL tests drop and recreate their tables, which two workers sharing one
    database would race, and a run must not meet the schema another checkout left behind."""
    if not worker:
        return admin_url
    url = make_url(admin_url)
    suffix = f"_{run[:8]}" if run else ""
    return url.set(database=f"{url.database}_{worker}{suffix}").render_as_string(hide_password=False)


POSTGRES_URL = worker_database_url(
    POSTGRES_ADMIN_URL, os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_TESTRUNUID")
)


def drop_database(admin_url: str, url: str) -> None:
    """Drops ``url``'s database through ``admin_url``, connections and all."""
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)')
    finally:
        admin.dispose()


def _create_database(conn: Connection, name: str, durable: bool) -> None:
    conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    if not durable:
        # A commit returns before its WAL reaches the disk: a third off the PostgreSQL tests' time here
        # (fsync is slow on these machines). Only a crash of the server could lose the last commits.
        conn.exec_driver_sql(f'ALTER DATABASE "{name}" SET synchronous_commit = off')


def ensure_database(admin_url: str, url: str, durable: bool = True) -> None:
    """Creates ``url``'s database through ``admin_url`` unless it exists already (``durable``: see
    ``postgres_database``)."""
    name = make_url(url).database
    assert name is not None
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            exists = conn.exec_driver_sql("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).first()
            if not exists:
                _create_database(conn, name, durable)
    finally:
        admin.dispose()


def cut_off(admin_url: str, url: str, seconds: float) -> threading.Thread:
    """An outage of ``url``'s database as a failover looks to its clients: every connection to it
    terminated and new ones refused, for ``seconds`` (in a thread: returned, already running)."""
    name = make_url(url).database
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        conn.exec_driver_sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )

    def back() -> None:
        time.sleep(seconds)
        try:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        finally:
            admin.dispose()

    thread = threading.Thread(target=back, name=f"outage of {name}", daemon=True)
    thread.start()
    return thread


def make_settings(
    tmp_path: Path, client: Client, graph: str = "examples.demo:graph", **extra: Any
) -> Settings:
    """Settings for a graph under ``tmp_path`` on ``client``'s server, on a task queue of its own; no
    catalog tables unless ``catalog`` says so."""
    return Settings(
        home=tmp_path,
        temporal_address=client.service_client.config.target_host,
        namespace=client.namespace,
        task_queue=f"tq-{uuid.uuid4().hex[:8]}",
        graph=graph,
        **{"catalog": "none", **extra},
    )


@contextlib.contextmanager
def postgres_database(admin_url: str, prefix: str, durable: bool = True) -> Iterator[str]:
    """A throwaway PostgreSQL database next to ``admin_url``'s (``<prefix>_<random>``), dropped
    afterwards, connections and all. Not ``durable``: its commits do not wait for the disk (for tests and the
    chaos run, which never crash the server; the benchmarks measure what production would see)."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            _create_database(conn, name, durable)
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def record_build(
    bel: BuildEventLog, graph: "Graph", storage: "Storage", ref: str, write: "Callable[[str], None]"
) -> "InstanceRef":
    """A job run of ``ref`` as a worker records it (a want, its decision, the run's start, the commit that
    makes its instance live), ``write(location)`` writing the instance between the start and the commit."""
    from databuild.domain.decisions import Execute
    from databuild.models import InstanceRef, WantSource, WantSpec

    want = WantSpec(ref=ref, data_timestamp=datetime(2024, 1, 1, tzinfo=UTC), source=WantSource.cli)
    bel.wants.register(want)
    run = bel.decisions.decide(want.want_id, 1, graph.resolve(ref))
    assert isinstance(run, Execute), f"{ref} is not to be built: {run}"
    instance = InstanceRef(ref=ref, instance_id=str(uuid.uuid4()))
    bel.job_runs.start(run.job_run_id, 1, "recorded")
    location = storage.location(ref, instance.instance_id or "")
    write(location)
    bel.job_runs.succeed(run.job_run_id, [], [instance], 1, {ref: location})
    return instance


def projection_rows(bel: BuildEventLog) -> dict[str, list[tuple[str, ...]]]:
    """Every row of every projection table, without surrogate ids, sorted: equal before and after
    ``rebuild_projections()`` when state is exactly what the events say."""
    result = {}
    with bel.reader.connect() as conn:
        for table in s.PROJECTIONS:
            columns = [c for c in table.columns if c.name != "id"]
            rows = conn.execute(select(*columns)).all()
            result[table.name] = sorted(tuple(map(str, r)) for r in rows)
    return result


DEV_SERVER_TRIES = 3


async def start_dev_server(*extra_args: str) -> "WorkflowEnvironment":
    """A Temporal dev server with DataBuild's search attributes and converter, for tests and benchmarks;
    ``extra_args`` go to `temporal server start-dev` (e.g. ``--dynamic-config-value``). The SDK gives it
    5 s to open its port, which a loaded machine can take longer than: it is started again, up to
    ``DEV_SERVER_TRIES`` times in all."""
    from temporalio.testing import WorkflowEnvironment

    tries = DEV_SERVER_TRIES
    while True:
        try:
            return await WorkflowEnvironment.start_local(
                dev_server_existing_path=temporal_binary(),
                data_converter=pydantic_data_converter,
                search_attributes=SEARCH_ATTRIBUTES,
                dev_server_log_level="error",
                dev_server_extra_args=[*CACHED_SEARCH_ATTRIBUTES, *extra_args],  # registered just above
            )
        except RuntimeError as error:
            tries -= 1
            if tries == 0 or "did not start within" not in str(error):
                raise


async def skip_time(
    env: "WorkflowEnvironment",
    span: timedelta,
    step: timedelta = timedelta(days=1),
    stuck_after: timedelta = STUCK_AFTER,
) -> None:
    """Skip ``span`` of workflow time on the time-skipping server, a ``step`` at a time: one long sleep is
    one RPC, and the SDK gives it 30 seconds of wall time, which a month of timers outlasts under load.
    A sleep the server or the connection cut off is taken up from where the server's clock got to.

    The test server never releases the time-skipping lock of an activity still scheduled or running when
    its workflow ends (temporalio/sdk-java#1138; a want ending while its watch looks, say), and virtual
    time then only keeps pace with the wall clock: a sleep of hours hangs. Nothing else holds that lock
    for ``stuck_after`` of wall time here, so a sleep whose clock has not run ahead of the wall clock
    by then releases the leaked lock once, and goes on."""
    target = await env.get_current_time() + span
    while (now := await env.get_current_time()) < target:
        sleep = asyncio.ensure_future(env.sleep(min(step, target - now)))
        try:
            await _release_a_leaked_lock(env, sleep, stuck_after)
            await sleep
        except RPCError as error:
            log.warning("a time-skipping sleep was cut off (%s); going on from the server's time", error)


async def _release_a_leaked_lock(
    env: "WorkflowEnvironment", sleep: "asyncio.Future[None]", after: timedelta
) -> None:
    """Wait for ``sleep``; if virtual time has kept only the wall clock's pace for ``after``, unlock once."""
    started, virtual = time.monotonic(), await env.get_current_time()
    done, _ = await asyncio.wait([sleep], timeout=after.total_seconds())
    if done:
        return
    skipped = (await env.get_current_time() - virtual).total_seconds()
    if skipped < 2 * (time.monotonic() - started):
        log.warning("virtual time stopped skipping (a lock leaked by temporalio/sdk-java#1138): releasing it")
        from temporalio.api.testservice.v1 import UnlockTimeSkippingRequest

        await env.client.test_service.unlock_time_skipping(UnlockTimeSkippingRequest())


def free_port() -> int:
    """A loopback port nobody listens on right now, below the kernel's ephemeral range: a port handed out
    for binding port 0 (what Spark's JVMs and Temporal's own test servers do, and every outgoing
    connection's local end) could be taken by one of those between this call and the bind of the server
    it is for (seen: a Spark JVM on the port a dev stack was then given)."""
    low = _ephemeral_low()
    for _ in range(100 if low > 11_000 else 0):
        port = random.randrange(10_000, low)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default where it cannot be read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768
