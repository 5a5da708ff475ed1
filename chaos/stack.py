"""The stack under faults: the Temporal dev server and worker processes, each killable and restartable, and
calls retried while a fault holds Temporal or the BEL down."""

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from sqlalchemy.exc import DBAPIError
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from chaos.config import Log
from databuild.bel import BuildEventLog
from databuild.client import DataBuild
from databuild.config import Settings
from databuild.errors import UnavailableError
from databuild.graph import load_graph
from databuild.temporal.connection import connect, ensure_search_attributes
from databuild.testing import free_port
from databuild.testing.cluster import start_databuild_worker, stop_group

# The harness runs the whole product as a user would: the Temporal dev server as `databuild dev` starts it
# (on a file database, so it restarts with its state).
from worker.dev import start_dev_server, wait_for_server

T = TypeVar("T")
P = ParamSpec("P")

# Settings of the worker processes: a killed attempt is retried within seconds (heartbeat timeout), a
# lock of a lost run lapses quickly (lease), faults do not use up a job's attempts (they are not the
# job's fault), and each worker's Spark is small enough for two of them on two cores.
WORKER_ENV = {
    "DATABUILD_JOB_HEARTBEAT_TIMEOUT": "5s",
    "DATABUILD_JOB_LEASE": "10s",
    "DATABUILD_JOB_ATTEMPTS": "20",
    "DATABUILD_MAX_CONCURRENT_JOBS": "2",
    "DATABUILD_SPARK_MASTER": "local[2]",
    "DATABUILD_SPARK_DRIVER_MEMORY": "512m",
    "PYSPARK_PYTHON": sys.executable,
}
# The soak's graph is this package's, which is not installed with the product: its workers find it here.
CHECKOUT = str(Path(__file__).resolve().parents[1])


class ChaosStack:
    """The Temporal dev server and the worker processes, each killable and restartable; a client."""

    def __init__(self, settings: Settings, workers: int, log: Log) -> None:
        self.settings = settings
        self.log = log
        self.ui_port = free_port()
        self.server: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes] | None] = [None] * workers
        self.worker_exits = 0
        self.paused = False  # while a fault holds processes down, the supervisor leaves them be
        self.db: DataBuild | None = None

    # Temporal -------------------------------------------------------------------------------------
    async def start_temporal(self) -> None:
        self.server = start_dev_server(self.settings, self.ui_port)  # same database file every time
        await wait_for_server(self.settings, self.server)

    def kill_temporal(self) -> None:
        if self.server is not None:
            kill_group(self.server)

    # Workers --------------------------------------------------------------------------------------
    def worker_env(self) -> dict[str, str]:
        paths = [CHECKOUT, *filter(None, [os.environ.get("PYTHONPATH")])]
        return {
            **os.environ,
            **self.settings.process_env(),
            **WORKER_ENV,
            "PYTHONPATH": os.pathsep.join(paths),
        }

    def start_worker(self, i: int) -> None:
        log = self.settings.home / f"worker-{i}.log"
        self.workers[i] = start_databuild_worker(self.worker_env(), log)

    def kill_worker(self, i: int) -> None:
        proc = self.workers[i]
        if proc is not None:
            kill_group(proc)

    def start_workers(self) -> None:
        for i in range(len(self.workers)):
            self.start_worker(i)

    async def supervise(self, stop: asyncio.Event) -> None:
        """Restart a worker that exited on its own (as systemd or Kubernetes would), and count it."""
        while not stop.is_set():
            if not self.paused:
                for i, proc in enumerate(self.workers):
                    if proc is not None and proc.poll() is not None:
                        self.worker_exits += 1
                        self.log(f"worker {i} exited on its own (code {proc.returncode}); restarting it")
                        self.start_worker(i)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)

    def stop(self) -> None:
        for proc in [*self.workers, self.server]:
            if proc is not None:
                stop_group(proc, grace=10)

    # The client -----------------------------------------------------------------------------------
    async def open_client(self) -> DataBuild:
        client = await connect(self.settings)
        await ensure_search_attributes(client, self.settings.namespace)
        bel = BuildEventLog.create(self.settings.database_url.get_secret_value())
        self.db = DataBuild(client, bel, load_graph(self.settings.graph), self.settings)
        return self.db

    @property
    def bel(self) -> BuildEventLog:
        assert self.db is not None
        return self.db.bel

    async def workflow_running(self, workflow_id: str) -> bool:
        assert self.db is not None
        try:
            described = await self.db.temporal.get_workflow_handle(workflow_id).describe()
        except RPCError as error:
            if error.status is RPCStatusCode.NOT_FOUND:
                return False
            raise
        return described.status is WorkflowExecutionStatus.RUNNING


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@contextlib.asynccontextmanager
async def chaos_stack(home: Path, database_url: str, workers: int, log: Log) -> AsyncIterator[ChaosStack]:
    settings = Settings(
        home=home,
        temporal_address=f"127.0.0.1:{free_port()}",
        task_queue=f"chaos-{uuid.uuid4().hex[:8]}",
        database_url=database_url,
        graph="chaos.graph:graph",
    )
    stack = ChaosStack(settings, workers, log)
    try:
        await stack.start_temporal()
        await stack.open_client()  # migrates the BEL before the workers open it
        stack.start_workers()
        yield stack
    finally:
        stack.stop()
        if stack.db is not None:
            stack.db.bel.dispose()


async def retrying(call: Callable[[], Awaitable[T]], what: str, seconds: float = 180) -> T:
    """``call`` again while Temporal or the BEL is down (a fault in progress), up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return await call()
        except (RPCError, DBAPIError, UnavailableError) as error:
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: still failing after {seconds:.0f} s: {error}") from error
            await asyncio.sleep(0.5)


def read(
    stack: ChaosStack, query: Callable[Concatenate[BuildEventLog, P], T], *args: P.args, **kwargs: P.kwargs
) -> Awaitable[T]:
    """``query(bel, *args, **kwargs)`` in a thread, retried while the BEL's connections are killed."""
    return retrying(lambda: asyncio.to_thread(query, stack.bel, *args, **kwargs), query.__name__)
