"""The faults: kill a worker, restart Temporal, terminate the BEL's connections, restart the whole stack;
at random moments, or each once a job is mid-build."""

import asyncio
import contextlib
import random
import time
from collections import Counter
from functools import partial

from sqlalchemy import create_engine, select, text
from sqlalchemy.engine import make_url
from temporalio.api.enums.v1 import PendingActivityState

from chaos.config import FAULT_WEIGHTS, ChaosConfig, FaultKind
from chaos.stack import ChaosStack, read, retrying
from databuild.bel import BuildEventLog
from databuild.bel import schema as s
from databuild.testing import cut_off


class Faults:
    def __init__(
        self,
        stack: ChaosStack,
        rng: random.Random,
        admin_url: str,
        started: float,
        outage_seconds: tuple[float, float] = (30.0, 60.0),
    ) -> None:
        self.stack = stack
        self.outage_seconds = outage_seconds
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
        if kind == "bel_outage":
            seconds = self.rng.uniform(*self.outage_seconds)
            self.note(f"bel_outage: the BEL's database refuses every connection for {seconds:.0f} s")
            url = stack.settings.database_url.get_secret_value()
            back = await asyncio.to_thread(cut_off, self.admin_url, url, seconds)
            await asyncio.to_thread(back.join)
            self.note("bel_outage: the database is back")
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

    async def injected(self, config: ChaosConfig, stop: asyncio.Event) -> None:
        """The config's scripted faults (each mid-build), then random ones of its kinds."""
        await self.scripted(config.script)
        await self.random(config.kinds, config.fault_gap, config.max_faults, stop)

    async def random(
        self, kinds: tuple[FaultKind, ...], gap: tuple[float, float], limit: int | None, stop: asyncio.Event
    ) -> None:
        """Faults at random moments until ``stop`` (or ``limit`` faults, those injected before counted).
        Each kind not injected yet comes once first, in random order, and all of those are played even if
        the work ends sooner, so every run sees every kind."""
        fresh = [k for k in kinds if not self.counts[k]]
        plan = self.rng.sample(fresh, k=len(fresh))
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
