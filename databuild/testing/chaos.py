"""Proof under faults: the demo graph on a stack of real processes (a Temporal dev server on a file
database, `databuild worker` processes, a PostgreSQL BEL of its own), a backfill-sized workload, faults
at moments drawn from a seed, and the invariants that must hold afterwards.

Used by ``tests/test_chaos.py`` (a short run and two scripted restarts, in CI) and
``bench/bench_chaos.py`` (the soak, ``make chaos``).

Faults:

* ``kill_worker``: SIGKILL one worker's process group (Python and its Spark JVM), restart it a moment
  later;
* ``restart_temporal``: SIGKILL the Temporal dev server, start it again on the same database file;
* ``terminate_bel``: ``pg_terminate_backend`` every connection to the BEL's database;
* ``restart_stack``: SIGKILL the Temporal server and every worker at once, then start them all again.

Steering (``steer``): the first round also registers a real backfill of the ``daily_users`` its wants
need, and pauses, resumes, cancels and retries it at moments drawn from the seed, under the faults;
after the last retry every want of it must still end successful.

The seed fixes the schedule (which fault, which worker, the gaps between them); the interleaving with
the work still depends on timing, so a seed reproduces the schedule, not the exact run.

Invariants, checked after the faults stop:

* no want open in the BEL whose workflow is closed: every want that is not final in the BEL has a
  running Temporal workflow, and within the settle time every want ends, successfully;
* each (ref, taint generation) built at most once: at most one ``PartitionLive`` of a job run per ref
  between two taints of it (a retried attempt may write data, but only one commit makes an instance);
* no build lock held by a dead run: every partition ``building`` is locked by a job run whose workflow
  is running;
* the projections equal a rebuild from the events alone;
* every live partition is readable and complete: its folder holds the instance the BEL says is live,
  it reads back as Parquet, and its content adds up (the demo's data is deterministic).
"""

import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Concatenate, Literal, ParamSpec, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sqlalchemy import create_engine, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from databuild.backfill import BackfillRequest
from databuild.bel import BuildEventLog
from databuild.bel import schema as s
from databuild.client import DataBuild
from databuild.config import Settings
from databuild.errors import TemporalUnavailableError
from databuild.graph import load_graph
from databuild.jobs.storage import Storage
from databuild.models import FINAL_WANT_STATES, PartitionStatus, WantSource, WantSpec, WantState
from databuild.operations.garbage import collect_garbage
from databuild.temporal.connection import connect, ensure_search_attributes
from databuild.testing import free_port, postgres_database, projection_rows
from databuild.testing.cluster import start_databuild_worker, stop_group

# The harness runs the whole product as a user would: the demo graph, and the Temporal dev server as
# `databuild dev` starts it (on a file database, so it restarts with its state).
from examples.demo import EVENTS_PER_DAY, WINDOW_DAYS
from worker.dev import start_dev_server, wait_for_server

FaultKind = Literal["kill_worker", "restart_temporal", "terminate_bel", "restart_stack"]
FAULT_KINDS: tuple[FaultKind, ...] = ("kill_worker", "restart_temporal", "terminate_bel", "restart_stack")
# How often each kind is drawn after the first of each: killing the whole stack is the rarest.
FAULT_WEIGHTS: dict[FaultKind, int] = {
    "kill_worker": 3,
    "restart_temporal": 2,
    "terminate_bel": 2,
    "restart_stack": 1,
}
FIRST_DAY = date(2024, 1, 7)  # the first daily_summary wanted; its window starts on 2024-01-01
FINAL = {state.value for state in FINAL_WANT_STATES}
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


@dataclass(frozen=True)
class ChaosConfig:
    seed: int
    backfill: str = "daily_summary"  # what the backfill wants, one a day from FIRST_DAY
    days: int = 1  # how many (a daily_summary reads 7 days of daily_users, each its day of raw_events)
    extra_wants: int = 20  # concurrent wants for partitions the backfill needs too (other data times)
    workers: int = 2
    fault_gap: tuple[float, float] = (4.0, 10.0)  # seconds between two faults, uniformly drawn
    kinds: tuple[FaultKind, ...] = FAULT_KINDS  # () for a run without faults (a baseline)
    max_faults: int | None = None  # stop injecting after this many
    # Instead of random faults: these, in order, each once a job is running (mid-build).
    script: tuple[FaultKind, ...] = ()
    minutes: float = 0.0  # soak: after the first round, taint-and-rebuild rounds until this long
    settle_seconds: float = 300.0  # after the faults stop, how long every want has to end
    steer: bool = True  # pause, resume, cancel and retry a backfill of the first round meanwhile
    steer_gap: tuple[float, float] = (1.0, 5.0)  # seconds before each steering step, uniformly drawn


@dataclass
class ChaosReport:
    seed: int
    faults: Counter[str] = field(default_factory=Counter)
    steering: Counter[str] = field(default_factory=Counter)  # backfill pauses, resumes, cancels, retries
    rounds: int = 0
    wants: int = 0
    successful: int = 0
    builds: int = 0
    retries: int = 0  # job attempts beyond each run's first (a killed attempt is retried)
    unfinished: list[str] = field(default_factory=list)  # wants not successful after the settle time
    stuck: list[str] = field(default_factory=list)  # wants open in the BEL whose workflow is closed
    duplicates: list[str] = field(default_factory=list)  # (ref, generation) built more than once
    dead_locks: list[str] = field(default_factory=list)  # building partitions whose run is not running
    projection_diffs: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    worker_exits: int = 0  # workers that exited without being killed (restarted, as a supervisor would)
    wall_s: float = 0.0

    def violations(self) -> list[str]:
        checks = {
            "wants not successful": self.unfinished,
            "wants open in the BEL whose workflow is closed": self.stuck,
            "duplicate builds": self.duplicates,
            "build locks held by dead runs": self.dead_locks,
            "projections differ from a rebuild": self.projection_diffs,
            "live partitions unreadable or incomplete": self.unreadable,
        }
        return [f"{name} ({len(found)}): {'; '.join(found[:5])}" for name, found in checks.items() if found]

    def summary(self) -> str:
        faults = ", ".join(f"{kind} {n}" for kind, n in sorted(self.faults.items())) or "none"
        steering = ", ".join(f"{step} {n}" for step, n in sorted(self.steering.items())) or "none"
        lines = [
            f"seed                 {self.seed}",
            f"faults injected      {sum(self.faults.values())} ({faults})",
            f"backfill steered     {sum(self.steering.values())} ({steering})",
            f"rounds               {self.rounds}",
            f"wants completed      {self.successful} of {self.wants}",
            f"partitions built     {self.builds} (job attempts retried: {self.retries})",
            f"duplicate builds     {len(self.duplicates)}",
            f"stuck wants          {len(self.stuck)} (open in the BEL, workflow closed)",
            f"dead build locks     {len(self.dead_locks)}",
            f"projection diffs     {len(self.projection_diffs)}",
            f"unreadable           {len(self.unreadable)}",
            f"worker self-exits    {self.worker_exits}",
            f"wall time            {self.wall_s:.1f} s",
        ]
        return "\n".join(lines)


Log = Callable[[str], None]


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
        return {**os.environ, **self.settings.process_env(), **WORKER_ENV}

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
        graph="examples.demo:graph",
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


async def retrying(call: Callable[[], Awaitable[T]], what: str, seconds: float = 120) -> T:
    """``call`` again while Temporal or the BEL is down (a fault in progress), up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return await call()
        except (RPCError, DBAPIError, TemporalUnavailableError) as error:
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: still failing after {seconds:.0f} s: {error}") from error
            await asyncio.sleep(0.5)


def read(
    stack: ChaosStack, query: Callable[Concatenate[BuildEventLog, P], T], *args: P.args, **kwargs: P.kwargs
) -> Awaitable[T]:
    """``query(bel, *args, **kwargs)`` in a thread, retried while the BEL's connections are killed."""
    return retrying(lambda: asyncio.to_thread(query, stack.bel, *args, **kwargs), query.__name__)


# The workload -----------------------------------------------------------------------------------------


def backfill_refs(config: "ChaosConfig") -> list[str]:
    return [f"{config.backfill}/{FIRST_DAY + timedelta(days=d)}" for d in range(config.days)]


def demo_inputs(ref: str) -> list[str]:
    """What a demo partition is built from (and, for the rollup, its sibling output)."""
    name, _, day = ref.partition("/")
    end = date.fromisoformat(day)
    if name in ("daily_summary", "top_spenders"):
        sibling = "top_spenders" if name == "daily_summary" else "daily_summary"
        return [f"{sibling}/{day}", *(f"daily_users/{end - timedelta(days=b)}" for b in range(WINDOW_DAYS))]
    return [f"raw_events/{day}"] if name == "daily_users" else []


def needed_refs(refs: list[str]) -> list[str]:
    """``refs`` and every partition building them builds."""
    found: dict[str, None] = {}
    frontier = list(refs)
    while frontier:
        ref = frontier.pop()
        if ref not in found:
            found[ref] = None
            frontier += demo_inputs(ref)
    return sorted(found)


async def want(stack: ChaosStack, ref: str, offset: int = 0) -> WantSpec:
    """Register a want (idempotent, so retried through faults). ``offset`` > 0: the same partition at
    a data time ``offset`` minutes later, from the API: another want, racing the backfill's."""
    assert stack.db is not None
    db = stack.db
    day = datetime.combine(date.fromisoformat(ref.rpartition("/")[2]), datetime.min.time(), UTC)
    timestamp = day + timedelta(minutes=offset)
    source = WantSource.api if offset else WantSource.cli
    return await retrying(lambda: db.want(ref, data_timestamp=timestamp, source=source), f"want {ref}")


async def register_round(
    stack: ChaosStack, rng: random.Random, config: "ChaosConfig", refs: list[str]
) -> None:
    """The round's wants and ``config.extra_wants`` concurrent ones for partitions the backfill needs
    (other data times, so other wants), all at once."""
    pool = needed_refs(backfill_refs(config))
    extras = [(rng.choice(pool), 1 + i) for i in range(config.extra_wants)]
    await asyncio.gather(*(want(stack, ref) for ref in refs), *(want(stack, ref, n) for ref, n in extras))


def open_wants(bel: BuildEventLog) -> Counter[str]:
    """Wants that are not final, by state."""
    with bel.reader.connect() as conn:
        rows = conn.execute(select(s.wants.c.state).where(s.wants.c.state.not_in(FINAL))).all()
    return Counter(state for (state,) in rows)


Settled = Literal["final", "stuck", "timeout"]


async def until_settled(stack: ChaosStack, seconds: float, every: float = 15.0) -> Settled:
    """Until every want has ended ("final"), or no open want has a running workflow any more, so
    nothing can move them ("stuck"), or ``seconds`` have passed ("timeout"). Says what is open every
    ``every`` seconds."""
    started = time.monotonic()
    shown = started
    while True:
        open_now = await read(stack, open_wants)
        if not open_now:
            return "final"
        now = time.monotonic()
        if now - started > seconds:
            return "timeout"
        if now - shown >= every:
            shown = now
            stack.log(f"open wants: {dict(open_now)}")
            if not stack.paused and await all_open_wants_dead(stack):
                stack.log(f"no open want has a running workflow: {sum(open_now.values())} stuck")
                return "stuck"
        await asyncio.sleep(1.0)


async def all_open_wants_dead(stack: ChaosStack) -> bool:
    try:
        return len(await stuck_wants(stack)) == sum((await read(stack, open_wants)).values())
    except RPCError:  # Temporal went down meanwhile: look again later
        return False


STEERING_STEPS = ("pause", "resume", "cancel", "retry")


def steered_request(config: "ChaosConfig") -> BackfillRequest:
    """A backfill of every daily_users the round's wants need (other wants than theirs: racing them)."""
    days = sorted(
        ref.partition("/")[2] for ref in needed_refs(backfill_refs(config)) if ref.startswith("daily_users/")
    )
    first, last = (
        datetime.combine(date.fromisoformat(day), datetime.min.time(), UTC) for day in (days[0], days[-1])
    )
    return BackfillRequest(pattern="daily_users/{date}", start=first, end=last)


async def steer_backfill(
    stack: ChaosStack, rng: random.Random, config: "ChaosConfig", steering: Counter[str]
) -> None:
    """Register the steered backfill and, from its first recorded wants on, pause, resume, cancel and
    retry it, each after a pause drawn from ``rng`` and retried through faults; it ends retried and
    resumed, so every want of it must still end successful."""
    assert stack.db is not None
    db = stack.db
    request = steered_request(config)
    recorded = asyncio.Event()
    registering = asyncio.create_task(
        retrying(lambda: db.backfill(request, on_registered=lambda _done: recorded.set()), "backfill")
    )
    await recorded.wait()
    backfill_id = request.backfill_id

    async def cancel() -> str:
        return f"{await db.cancel_backfill(backfill_id)} want(s) cancelled"

    async def retry() -> str:
        return f"{(await db.retry_backfill(backfill_id)).reopened} want(s) reopened"

    async def pause(paused: bool) -> str:
        return f"{(await db.pause_backfill(backfill_id, paused=paused)).done} of its wants ended"

    steps: dict[str, Callable[[], Awaitable[str]]] = {
        "pause": partial(pause, True),
        "resume": partial(pause, False),
        "cancel": cancel,
        "retry": retry,
    }
    for step in STEERING_STEPS:
        await asyncio.sleep(rng.uniform(*config.steer_gap))
        said = await retrying(steps[step], f"backfill {step}")
        steering[step] += 1
        stack.log(f"backfill {backfill_id}: {step}: {said}")
    await registering


async def taint_round(stack: ChaosStack, rng: random.Random, config: "ChaosConfig") -> list[str]:
    """Late data: taint a few raw_events (cascading to everything built from them); the backfill's
    wants built from them are new wants now (a new generation), so they rebuild."""
    backfill = backfill_refs(config)
    raws = [ref for ref in needed_refs(backfill) if ref.startswith("raw_events/")]
    tainted = set(rng.sample(raws, k=min(3, len(raws))))
    for ref in sorted(tainted):
        await read(stack, BuildEventLog.taint, ref, reason="chaos: late data", cascade=True)
    stack.log(f"tainted {', '.join(sorted(tainted))} (cascading)")
    return [ref for ref in backfill if tainted & set(needed_refs([ref]))]


# Faults -----------------------------------------------------------------------------------------------


class Faults:
    def __init__(self, stack: ChaosStack, rng: random.Random, admin_url: str, started: float) -> None:
        self.stack = stack
        self.rng = rng
        self.admin_url = admin_url
        self.started = started
        self.counts: Counter[str] = Counter()

    def note(self, message: str) -> None:
        self.stack.log(f"[chaos +{time.monotonic() - self.started:6.1f}s] {message}")

    async def inject(self, kind: FaultKind) -> None:
        self.counts[kind] += 1
        stack = self.stack
        if kind == "terminate_bel":
            ended = await asyncio.to_thread(
                terminate_connections, self.admin_url, stack.settings.database_url.get_secret_value()
            )
            self.note(f"terminate_bel: {ended} BEL connection(s) terminated")
            return
        down = self.rng.uniform(0.5, 3.0)
        stack.paused = True
        try:
            if kind == "kill_worker":
                i = self.rng.randrange(len(stack.workers))
                self.note(f"kill_worker: SIGKILL worker {i}, restart in {down:.1f} s")
                stack.kill_worker(i)
                await asyncio.sleep(down)
                stack.start_worker(i)
                return
            everything = kind == "restart_stack"
            self.note(
                f"{kind}: SIGKILL the Temporal server{' and every worker' if everything else ''}, "
                f"restart in {down:.1f} s"
            )
            stack.kill_temporal()
            if everything:
                for i in range(len(stack.workers)):
                    stack.kill_worker(i)
            await asyncio.sleep(down)
            await stack.start_temporal()
            if everything:
                stack.start_workers()
            self.note(f"{kind}: back up")
        finally:
            stack.paused = False

    async def random(
        self, kinds: tuple[FaultKind, ...], gap: tuple[float, float], limit: int | None, stop: asyncio.Event
    ) -> None:
        """Faults at random moments until ``stop`` (or ``limit`` faults). Each kind comes once first, in
        random order, and all of those are played even if the work ends sooner, so every run sees
        every kind."""
        plan = self.rng.sample(kinds, k=len(kinds))
        weights = [FAULT_WEIGHTS[k] for k in kinds]
        while kinds and (limit is None or sum(self.counts.values()) < limit):
            pause = self.rng.uniform(*gap)
            if plan:
                await asyncio.sleep(pause)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), pause)
                if stop.is_set():
                    return
            await self.inject(plan.pop(0) if plan else self.rng.choices(kinds, weights)[0])

    async def scripted(self, script: tuple[FaultKind, ...]) -> None:
        """Each fault of ``script`` once a job's Spark tasks are running (mid-build)."""
        for kind in script:
            await until_spark_work(self.stack)
            await self.inject(kind)


def running_workflows(bel: BuildEventLog) -> list[str]:
    with bel.reader.connect() as conn:
        rows = conn.execute(select(s.job_runs.c.workflow_id).where(s.job_runs.c.state == "running")).all()
    return [workflow_id for (workflow_id,) in rows]


async def spark_tasks_running(stack: ChaosStack, workflow_id: str, *, started_is_enough: bool) -> bool:
    """Whether the job run's activity last heartbeated Spark tasks in progress (or, with
    ``started_is_enough``, whether an attempt of it is running at all)."""
    assert stack.db is not None
    client = stack.db.temporal
    described = await client.get_workflow_handle(workflow_id).describe()
    for pending in described.raw_description.pending_activities:
        if started_is_enough and pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED:
            return True
        details = await client.data_converter.decode(pending.heartbeat_details.payloads)
        if any(isinstance(d, dict) and d.get("tasks_total", 0) > d.get("tasks_done", 0) for d in details):
            return True
    return False


async def until_spark_work(stack: ChaosStack, seconds: float = 180, tasks_for: float = 5) -> None:
    """Until a job attempt runs Spark tasks, as its heartbeats show them. A job whose tasks all ran
    between two heartbeats shows none: after ``tasks_for`` seconds of looking, any running attempt will
    do (the fault still lands mid-build)."""
    started = time.monotonic()
    while True:
        lenient = time.monotonic() - started > tasks_for
        for workflow_id in await read(stack, running_workflows):
            running = partial(spark_tasks_running, stack, workflow_id, started_is_enough=lenient)
            if await retrying(running, "describe"):
                return
        if time.monotonic() - started > seconds:
            raise AssertionError(f"no job ran within {seconds:.0f} s")
        await asyncio.sleep(0.2)


def terminate_connections(admin_url: str, database_url: str) -> int:
    name = make_url(database_url).database
    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            ended = conn.execute(
                text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = :name AND pid <> pg_backend_pid()"
                ),
                {"name": name},
            ).scalar_one()
        return int(ended)
    finally:
        engine.dispose()


# Invariants -------------------------------------------------------------------------------------------


async def check_liveness(stack: ChaosStack, report: ChaosReport) -> None:
    """Stuck wants and build locks of dead runs, with Temporal and every worker up again."""
    report.stuck = await stuck_wants(stack)
    report.dead_locks = await dead_locks(stack)


def _open_wants(bel: BuildEventLog) -> list[tuple[str, str]]:
    with bel.reader.connect() as conn:
        rows = conn.execute(
            select(s.wants.c.want_id, s.wants.c.workflow_id).where(s.wants.c.state.not_in(FINAL))
        ).all()
    return [(want_id, workflow_id) for want_id, workflow_id in rows]


def _locks(bel: BuildEventLog) -> list[tuple[str, str, str]]:
    with bel.reader.connect() as conn:
        rows = conn.execute(
            select(s.partitions.c.ref, s.job_runs.c.job_run_id, s.job_runs.c.workflow_id)
            .join(s.job_runs, s.job_runs.c.job_run_id == s.partitions.c.building_job_run_id)
            .where(s.partitions.c.status == PartitionStatus.building.value)
        ).all()
    return [(ref, job_run_id, workflow_id) for ref, job_run_id, workflow_id in rows]


async def stuck_wants(stack: ChaosStack) -> list[str]:
    """Wants not final in the BEL without a running workflow. A workflow records its want's final state
    before it ends, so a second look at the BEL settles a race with one that just ended."""
    stuck = []
    for want_id, workflow_id in await read(stack, _open_wants):
        if not await stack.workflow_running(workflow_id):
            now = await read(stack, BuildEventLog.want, want_id)
            if not now.state.is_final:
                stuck.append(f"{now.ref} {want_id} is {now.state.value} but {workflow_id} is not running")
    return stuck


async def dead_locks(stack: ChaosStack) -> list[str]:
    """Partitions being built by a job run whose workflow is not running (a run releases or commits
    its outputs before its workflow ends)."""
    dead = []
    for ref, job_run_id, workflow_id in await read(stack, _locks):
        if not await stack.workflow_running(workflow_id):
            now = await read(stack, BuildEventLog.partition, ref)
            if now.status is PartitionStatus.building and now.building_job_run_id == job_run_id:
                dead.append(f"{ref} locked by {job_run_id}, whose workflow is not running")
    return dead


def check_outcomes(bel: BuildEventLog, report: ChaosReport) -> None:
    with bel.reader.connect() as conn:
        wants = conn.execute(
            select(s.wants.c.ref, s.wants.c.want_id, s.wants.c.state, s.wants.c.reason)
        ).all()
    report.wants = len(wants)
    report.successful = sum(1 for w in wants if w.state == WantState.successful.value)
    report.unfinished = [
        f"{w.ref} {w.want_id} {w.state}: {w.reason or ''}"
        for w in wants
        if w.state != WantState.successful.value
    ]


def check_builds(bel: BuildEventLog, report: ChaosReport) -> None:
    """A build is a committed instance of a job run: a ``PartitionLive`` with a job run. Each ref may
    have one per taint generation (the generation counts the ``PartitionTainted`` events before it)."""
    with bel.reader.connect() as conn:
        rows = conn.execute(
            select(s.events.c.type, s.events.c.ref, s.events.c.data)
            .where(s.events.c.type.in_(["PartitionLive", "PartitionTainted"]))
            .order_by(s.events.c.idx)
        ).all()
    generation: Counter[str] = Counter()
    built: dict[tuple[str, int], list[str]] = {}
    for kind, ref, data in rows:
        if kind == "PartitionTainted":
            generation[ref] += 1
        elif data.get("job_run_id"):
            built.setdefault((ref, generation[ref]), []).append(data["job_run_id"])
    report.builds = len(built)
    with bel.reader.connect() as conn:
        attempts = conn.execute(select(s.job_runs.c.attempts).where(s.job_runs.c.attempts > 1)).all()
    report.retries = sum(n - 1 for (n,) in attempts)
    report.duplicates = [
        f"{ref} generation {gen} built {len(runs)} times (job runs {', '.join(runs)})"
        for (ref, gen), runs in built.items()
        if len(runs) > 1
    ]


def dump_events(bel: BuildEventLog, path: Path) -> None:
    with bel.reader.connect() as conn, path.open("w") as out:
        for idx, at, data in conn.execute(
            select(s.events.c.idx, s.events.c.at, s.events.c.data).order_by("idx")
        ):
            out.write(json.dumps({"idx": idx, "at": at.isoformat(), **data}) + "\n")


def check_projections(bel: BuildEventLog, report: ChaosReport) -> None:
    """Projections equal a rebuild from the events alone (with nothing else writing)."""
    before = projection_rows(bel)
    bel.rebuild_projections()
    after = projection_rows(bel)
    for table, rows in before.items():
        if rows != after[table]:
            only_now = sorted(set(rows) - set(after[table]))[:2]
            only_rebuilt = sorted(set(after[table]) - set(rows))[:2]
            report.projection_diffs.append(f"{table}: kept {only_now}, rebuilt {only_rebuilt}")


def check_partitions(bel: BuildEventLog, storage: Storage, report: ChaosReport) -> None:
    with bel.reader.connect() as conn:
        live = conn.execute(
            select(s.partitions.c.ref, s.partitions.c.instance_id).where(
                s.partitions.c.status == PartitionStatus.live.value
            )
        ).all()
    for ref, instance_id in live:
        location = storage.local_path(storage.instance_key(ref, instance_id))
        if location is None or not location.is_dir():
            report.unreadable.append(f"{ref}: the BEL says instance {instance_id}, whose location is missing")
            continue
        try:
            problem = content_problem(ref, pq.read_table(location))
        except Exception as error:  # anything pyarrow cannot read is the finding
            problem = f"unreadable: {error}"
        if problem:
            report.unreadable.append(f"{ref}: {problem}")


# What adds up in each demo partition (its data is deterministic): the row count, or a column's sum.
DEMO_CONTENT: dict[str, tuple[str | None, int]] = {
    "raw_events": (None, EVENTS_PER_DAY),
    "daily_users": ("events", EVENTS_PER_DAY),  # every event of the day, counted per user
    "daily_summary": ("events", WINDOW_DAYS * EVENTS_PER_DAY),
    "top_spenders": (None, 10),
}


def content_problem(ref: str, table: pa.Table) -> str | None:
    """What does not add up in a demo partition, or None."""
    column, expected = DEMO_CONTENT[ref.partition("/")[0]]
    found = table.num_rows if column is None else int(pc.sum(table.column(column)).as_py() or 0)
    what = "rows" if column is None else f"sum({column})"
    return None if found == expected else f"{what} is {found}, expected {expected}"


# The run ----------------------------------------------------------------------------------------------


async def run_chaos(config: ChaosConfig, home: Path, admin_url: str, log: Log = print) -> ChaosReport:
    """Start a stack, run the workload under faults, then check every invariant."""
    started = time.monotonic()
    report = ChaosReport(seed=config.seed)
    rng = random.Random(config.seed)
    log(f"chaos seed {config.seed} (rerun with --seed {config.seed})")
    with postgres_database(admin_url, prefix="chaos") as database_url:
        async with chaos_stack(home, database_url, config.workers, log) as stack:
            faults = Faults(stack, rng, admin_url, started)
            stop = asyncio.Event()
            supervisor = asyncio.create_task(stack.supervise(stop))
            if config.script:
                injector = asyncio.create_task(faults.scripted(config.script))
            else:
                injector = asyncio.create_task(
                    faults.random(config.kinds, config.fault_gap, config.max_faults, stop)
                )
            try:
                report.rounds = await soak(stack, rng, config, started, log, report.steering)
            finally:
                stop.set()
                await injector
                await supervisor
            report.faults = faults.counts
            report.worker_exits = stack.worker_exits
            faults.note("faults stopped; checking liveness")
            await check_liveness(stack, report)
            if await until_settled(stack, config.settle_seconds) != "final":
                faults.note("some wants did not end")
                first = (report.stuck, report.dead_locks)
                await check_liveness(stack, report)
                report.stuck = sorted({*first[0], *report.stuck})
                report.dead_locks = sorted({*first[1], *report.dead_locks})
            faults.note("settled; stopping the stack to check the BEL and the storage")
            stack.stop()
            bel = stack.bel
            dump_events(bel, home / "events.ndjson")  # for a post-mortem: the database is dropped
            check_outcomes(bel, report)
            check_builds(bel, report)
            storage = Storage(stack.settings.storage_root)
            # Garbage collection with no retention after the faults: whatever killed attempts left goes,
            # and every live partition must still be complete and readable.
            collect_garbage(storage, bel, keep=timedelta(0))
            check_partitions(bel, storage, report)
            check_projections(bel, report)
    report.wall_s = time.monotonic() - started
    return report


async def soak(
    stack: ChaosStack,
    rng: random.Random,
    config: ChaosConfig,
    started: float,
    log: Log,
    steering: Counter[str] | None = None,
) -> int:
    """The backfill and its concurrent wants; in a soak, then taint-and-rebuild rounds until time is up.
    Each round ends when every want is final or stuck (under faults). The first round's real backfill is
    steered meanwhile (``config.steer``; its steps counted in ``steering``). Returns the rounds completed."""
    refs = backfill_refs(config)
    rounds = 0
    while True:
        if rounds == 0 and config.steer:
            # Its own generator, so the fault schedule stays the seed's whatever the steering draws.
            steer_rng = random.Random(config.seed + 1)
            steered = steer_backfill(stack, steer_rng, config, Counter() if steering is None else steering)
            await asyncio.gather(register_round(stack, rng, config, refs), steered)
        else:
            await register_round(stack, rng, config, refs)
        # Stuck wants never end: the checks at the end report them, and the soak goes on without them.
        if await until_settled(stack, max(config.settle_seconds, 60 * config.minutes)) == "timeout":
            return rounds  # the settle check after the faults reports what is open
        rounds += 1
        log(f"[chaos +{time.monotonic() - started:6.1f}s] round {rounds} done")
        if time.monotonic() - started >= 60 * config.minutes:
            return rounds
        refs = await taint_round(stack, rng, config)
