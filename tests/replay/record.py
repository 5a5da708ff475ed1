"""Record the workflow histories that tests/test_replay.py replays.

    python -m tests.replay.record [--only SCENARIO ...]

Each scenario runs on the real stack: the Temporal dev server (the time-skipping test server for the
SLA and TTL timers, a dev server that suggests continue-as-new early for that scenario), in-process
workers from worker/run.py with Spark in local mode, a SQLite BEL each. Every history it saves is
replayed once before it lands in tests/histories/<name>.json.

Record a history for a new workflow behaviour, beside the histories of the old one; never re-record
one to make a non-determinism error go away (docs/development-policy.md).
"""

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Literal

from pydantic import SecretStr
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from databuild.backfill import BackfillRequest
from databuild.jobs.spark import SparkRuntime
from databuild.models import JobRunState, WantSource, WantSpec, WantState
from databuild.temporal.protocol import (
    SCHEDULED_WANT_WORKFLOW,
    SIGNAL_PARTITION_AVAILABLE,
    SIGNAL_REDECIDE,
    Announcement,
    PartitionAvailable,
    RedecideNotice,
    ScheduledWantInput,
    UpstreamInput,
    alert_channel_workflow_id,
    backfill_window_workflow_id,
    check_workflow_id,
    upstream_workflow_id,
)
from databuild.temporal.schedules import backfill_want_schedule, create_want_schedule, delete_want_schedule
from databuild.temporal.wants import announce, start_upstream
from databuild.testing import free_port
from tests import graphs
from tests.conftest import DEMO_REF, Stack, binary, running_stack, start_dev_server
from tests.helpers import TOKEN, http_server, lake, until, waiting_for_feed
from tests.replay import HISTORY_DIR, SCENARIOS, history_path, replayer

Server = Literal["dev", "time-skipping", "short-history"]
# The short-history server suggests continue-as-new past this many events (default 4,096 and more).
SUGGEST_CONTINUE_AS_NEW = 100


@dataclass
class Recorder:
    spark: SparkRuntime
    home: Path
    servers: contextlib.AsyncExitStack
    envs: dict[Server, WorkflowEnvironment] = field(default_factory=dict)
    saved: list[str] = field(default_factory=list)

    async def env(self, server: Server) -> WorkflowEnvironment:
        """The server of that kind, started on first use and shut down when the recording ends."""
        if server not in self.envs:
            if server == "time-skipping":
                env = await WorkflowEnvironment.start_time_skipping(
                    test_server_existing_path=binary("temporal-test-server"),
                    data_converter=pydantic_data_converter,
                )
            elif server == "short-history":
                limit = f"limit.historyCount.suggestContinueAsNew={SUGGEST_CONTINUE_AS_NEW}"
                env = await start_dev_server("--dynamic-config-value", limit)
            else:
                env = await start_dev_server()
            self.envs[server] = env
            self.servers.push_async_callback(env.shutdown)
        return self.envs[server]

    @contextlib.asynccontextmanager
    async def stack(self, server: Server, graph: str, **extra: object) -> AsyncIterator[Stack]:
        client = (await self.env(server)).client
        home = Path(tempfile.mkdtemp(prefix="stack-", dir=self.home))
        async with running_stack(client, self.spark, home, graph, worker=True, **extra) as stack:
            yield stack

    async def save(
        self, name: str, client: Client, workflow_id: str, run_id: str | None = None
    ) -> WorkflowHistory:
        """Write the (closed) run's history, once it replays against the workflows checked out."""
        handle = client.get_workflow_handle(workflow_id, run_id=run_id)
        for _ in range(600):
            if (await handle.describe()).status is not WorkflowExecutionStatus.RUNNING:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"{name}: workflow {workflow_id} still runs")
        history = await handle.fetch_history()
        await replayer().replay_workflow(history)
        recorded = {"workflow_id": workflow_id, "history": history.to_json_dict()}
        history_path(name).write_text(json.dumps(recorded, indent=1) + "\n")
        self.saved.append(name)
        print(f"  {name}: {len(history.events)} events", flush=True)
        return history


Scenario = Callable[[Recorder], Awaitable[None]]
RUNS: dict[str, tuple[Server, Scenario]] = {}


def scenario(name: str, server: Server = "dev") -> Callable[[Scenario], Scenario]:
    def register(run: Scenario) -> Scenario:
        RUNS[name] = (server, run)
        return run

    return register


async def settled(stack: Stack, spec: WantSpec, state: WantState = WantState.successful) -> None:
    want = await asyncio.wait_for(stack.db.wait(spec), timeout=300)
    assert want.state is state, f"{spec.ref}: {want.state.value} ({want.reason}), not {state.value}"


def running(stack: Stack, ref: str) -> list[str]:
    """Job-run workflows building ``ref`` now."""
    return [
        r.workflow_id
        for r in stack.bel.job_runs.query()
        if ref in r.outputs and r.state is JobRunState.running
    ]


@contextlib.contextmanager
def slow_jobs(seconds: float) -> Iterator[None]:
    """How long tests.graphs:slow's Spark tasks sleep (read on the driver, so in-process workers see it)."""
    before, graphs.SLOW_SECONDS = graphs.SLOW_SECONDS, seconds
    try:
        yield
    finally:
        graphs.SLOW_SECONDS = before


def found(stack: Stack, ref: str) -> bool:
    return stack.bel.partitions.find(ref) is not None


async def run_id(client: Client, workflow_id: str) -> str:
    return (await client.get_workflow_handle(workflow_id).describe()).run_id or ""


async def one_build(rec: Recorder, ref: str, want_history: str, run_history: str) -> None:
    """A want of the chain graph that builds its partition with one job run: both histories saved."""
    async with rec.stack("dev", "tests.graphs:chain") as stack:
        spec = await stack.db.want(ref)
        await settled(stack, spec)
        [run] = stack.bel.job_runs.query()
        await rec.save(want_history, stack.client, spec.workflow_id)
        await rec.save(run_history, stack.client, run.workflow_id)


@scenario("execute")
async def execute(rec: Recorder) -> None:
    """A want that builds its partition with one job run."""
    await one_build(rec, "base/1", "want-execute", "job-run-success")


@scenario("delegate")
async def delegate(rec: Recorder) -> None:
    with slow_jobs(4):
        async with rec.stack("dev", "tests.graphs:slow") as stack:
            first = await stack.db.want("slow/shared")
            await until(lambda: bool(running(stack, "slow/shared")), seconds=120)
            second = await stack.db.want(
                "slow/shared", data_timestamp=first.data_timestamp + timedelta(seconds=1)
            )
            await settled(stack, first)
            await settled(stack, second)
            assert stack.bel.job_runs.of_want(second.want_id)[0][0] == "delegated"
            await rec.save("want-delegate", stack.client, second.workflow_id)


@scenario("watch-after-timer")
async def watch_after_timer(rec: Recorder) -> None:
    """A want whose run takes longer than a lease: it waits the lease on a timer, then starts its watch
    (patch ``watch-after-timer``), and the run's signal ends it."""
    with slow_jobs(8):
        async with rec.stack("dev", "tests.graphs:slow", job_lease=timedelta(seconds=2)) as stack:
            spec = await stack.db.want("slow/watched")
            await settled(stack, spec)
            await rec.save("want-watch-after-timer", stack.client, spec.workflow_id)


@scenario("fan-out-first-local")
async def fan_out_first_local(rec: Recorder) -> None:
    """A run that tells its one want from the local first page of its fan-out (patch
    ``fan-out-first-local``): no fan-out activity."""
    async with rec.stack("dev", "tests.graphs:chain") as stack:
        spec = await stack.db.want("base/2")
        await settled(stack, spec)
        [run] = stack.bel.job_runs.query()
        await rec.save("job-run-fan-out-first-local", stack.client, run.workflow_id)


@scenario("finish-after-run")
async def finish_after_run(rec: Recorder) -> None:
    """A want that built its partition ends after the run it started (patch ``finish-after-run``): no
    failed workflow task in its history."""
    async with rec.stack("dev", "tests.graphs:chain") as stack:
        spec = await stack.db.want("base/3")
        await settled(stack, spec)
        await rec.save("want-finish-after-run", stack.client, spec.workflow_id)


@scenario("run-started-by-decision")
async def run_started_by_decision(rec: Recorder) -> None:
    """The demo discovering its inputs, with each run started by the decision that queued it (patch
    ``run-started-by-decision``): the top want decides twice (a dep-miss, then the build), and starts no
    child workflow."""
    async with rec.stack("dev", "examples.demo:discovering") as stack:
        spec = await stack.db.want(DEMO_REF)
        await settled(stack, spec)
        runs = [r for r in stack.bel.job_runs.of_want(spec.want_id)]
        built = next(run for _, run in runs if run.state is JobRunState.succeeded)
        assert any(run.state is JobRunState.dep_miss for _, run in runs), runs
        await rec.save("want-run-started-by-decision", stack.client, spec.workflow_id)
        await rec.save("job-run-started-by-decision", stack.client, built.workflow_id)


@scenario("input-version")
async def input_version(rec: Recorder) -> None:
    """A want and its run started at input version 1 (workflows/changes.py): they take the changes folded
    into it without asking, so their histories have no patch marker."""
    await one_build(rec, "base/5", "want-input-version-1", "job-run-input-version-1")


@scenario("dep-miss-chain")
async def dep_miss_chain(rec: Recorder) -> None:
    """The demo discovering its inputs: daily_summary dep-misses seven daily_users, each of which
    dep-misses its raw_events."""
    async with rec.stack("dev", "examples.demo:discovering") as stack:
        spec = await stack.db.want(DEMO_REF)
        await settled(stack, spec)
        missed = next(r for r in stack.bel.job_runs.query(limit=100) if r.state is JobRunState.dep_miss)
        day = DEMO_REF.rsplit("/", 1)[1]
        [derivative] = stack.bel.wants.query(ref_prefix=f"daily_users/{day}")
        assert derivative.source is WantSource.derivative
        await rec.save("want-dep-miss-chain", stack.client, spec.workflow_id)
        await rec.save("want-derivative", stack.client, derivative.workflow_id)
        await rec.save("job-run-dep-miss", stack.client, missed.workflow_id)


@scenario("declared-inputs")
async def declared_inputs(rec: Recorder) -> None:
    """The demo declaring its inputs: daily_summary's want starts derivative wants for them before its
    first run, which then builds without a dep-miss."""
    async with rec.stack("dev", "examples.demo:graph") as stack:
        spec = await stack.db.want(DEMO_REF)
        await settled(stack, spec)
        assert not [r for r in stack.bel.job_runs.query(limit=100) if r.state is JobRunState.dep_miss]
        await rec.save("want-declared-inputs", stack.client, spec.workflow_id)


@scenario("declared-inputs-in-decision")
async def declared_inputs_in_decision(rec: Recorder) -> None:
    """The same since a decision that finds a few declared inputs missing starts their derivative wants
    itself: the want's history has no ``await_dependencies`` activity."""
    async with rec.stack("dev", "examples.demo:graph") as stack:
        spec = await stack.db.want(DEMO_REF)
        await settled(stack, spec)
        history = await stack.client.get_workflow_handle(spec.workflow_id).fetch_history()
        assert not [
            e for e in history.events if e.activity_task_scheduled_event_attributes.activity_type.name
        ]
        await rec.save("want-declared-inputs-in-decision", stack.client, spec.workflow_id)


async def fail_then_block(stack: Stack, n: str) -> tuple[WantSpec, WantSpec]:
    """A want whose build fails (fail-locking a/{n}, b/{n}, c/{n}), then one blocked on the lock."""
    graphs.BROKEN.add(n)
    failed = await stack.db.want(f"a/{n}")
    await settled(stack, failed, WantState.failed)
    blocked = await stack.db.want(f"c/{n}", source=WantSource.api)
    await until(lambda: stack.bel.wants.get(blocked.want_id).state is WantState.upstream_building)
    return failed, blocked


async def resolve(stack: Stack, n: str, blocked: WantSpec) -> None:
    graphs.BROKEN.discard(n)
    _, woken = await stack.db.resolve(f"a/{n}")
    assert woken >= 1
    await settled(stack, blocked)


@scenario("fail-lock")
async def fail_lock(rec: Recorder) -> None:
    async with rec.stack("dev", "tests.graphs:trio", job_attempts=1) as stack:
        failed, blocked = await fail_then_block(stack, "locked")
        [run] = stack.bel.job_runs.query()
        await resolve(stack, "locked", blocked)
        await rec.save("want-failed", stack.client, failed.workflow_id)
        await rec.save("job-run-failed", stack.client, run.workflow_id)
        await rec.save("want-fail-lock-resolve", stack.client, blocked.workflow_id)


@scenario("retry")
async def retry(rec: Recorder) -> None:
    graphs.FLAKY["retry"] = 1
    async with rec.stack("dev", "tests.graphs:trio", job_attempts=3) as stack:
        spec = await stack.db.want("a/retry")
        await settled(stack, spec)
        [run] = stack.bel.job_runs.query()
        assert run.attempts == 2
        await rec.save("job-run-retry", stack.client, run.workflow_id)


@scenario("cancel")
async def cancel(rec: Recorder) -> None:
    """A want waiting for its input's external publish is cancelled."""
    async with rec.stack("dev", "tests.graphs:late") as stack:
        spec = await stack.db.want("report/cancel")
        await until(
            lambda: stack.bel.wants.get(spec.want_id).state is WantState.upstream_building, seconds=120
        )
        await stack.client.get_workflow_handle(spec.workflow_id).cancel()
        await settled(stack, spec, WantState.canceled)
        await rec.save("want-cancel", stack.client, spec.workflow_id)


@scenario("want-replaced")
async def want_replaced(rec: Recorder) -> None:
    """A run that a retry replaced goes on (the retry attached to it): its next decision is refused, and
    it continues as new for the want's new opening, which decides from the BEL."""
    async with rec.stack("dev", "tests.graphs:late") as stack:
        spec = await stack.db.want("report/replaced")
        await until(
            lambda: stack.bel.wants.get(spec.want_id).state is WantState.upstream_building, seconds=120
        )
        first = await run_id(stack.client, spec.workflow_id)
        stack.bel.wants.cancel([spec.want_id], "recording: ended in the BEL only")
        (reopened,) = stack.bel.wants.reopen([spec.want_id])
        assert reopened.opening == 1
        await stack.db.publish("feed/replaced")
        # The reopen subscribed the want to its own ref only: its input's news comes as the fan-out's would.
        feed = stack.bel.partitions.get("feed/replaced")
        notice = PartitionAvailable(ref=feed.ref, instance_id=feed.instance_id or "")
        await stack.client.get_workflow_handle(spec.workflow_id).signal(SIGNAL_PARTITION_AVAILABLE, notice)
        # The new run builds; the feed announced has no data, so its job fails (the first run is the point).
        await settled(stack, spec, WantState.failed)
        await rec.save("want-replaced", stack.client, spec.workflow_id, first)


@scenario("job-run-cancel")
async def job_run_cancel(rec: Recorder) -> None:
    with slow_jobs(30):
        async with rec.stack("dev", "tests.graphs:slow") as stack:
            spec = await stack.db.want("slow/cancel")
            await until(lambda: bool(running(stack, "slow/cancel")), seconds=120)
            await asyncio.sleep(1.5)  # into the Spark tasks
            [job_run] = running(stack, "slow/cancel")
            await stack.client.get_workflow_handle(job_run).cancel()
            await settled(stack, spec, WantState.failed)
            await rec.save("job-run-cancel", stack.client, job_run)


@scenario("abandon")
async def abandon(rec: Recorder) -> None:
    """A want alone on its build is cancelled: the build is abandoned."""
    with slow_jobs(30):
        async with rec.stack("dev", "tests.graphs:slow") as stack:
            spec = await stack.db.want("slow/alone")
            await until(lambda: bool(running(stack, "slow/alone")), seconds=120)
            await asyncio.sleep(1.5)
            [job_run] = running(stack, "slow/alone")
            await stack.client.get_workflow_handle(spec.workflow_id).cancel()
            await settled(stack, spec, WantState.canceled)
            await rec.save("want-cancel-building", stack.client, spec.workflow_id)
            await rec.save("job-run-abandon", stack.client, job_run)


@scenario("upstream-pull")
async def upstream_pull(rec: Recorder) -> None:
    """The downstream pulls a partition the upstream built: its first run pulls twice and continues
    as new."""
    shared = rec.home / "lake"  # one storage root for both graphs
    up_tokens, down_tokens = SecretStr(f"down={TOKEN}"), SecretStr(f"up={TOKEN}")
    async with (
        rec.stack("dev", "tests.graphs:feeds", storage_root=shared, api_tokens=up_tokens) as up,
        rec.stack("dev", "tests.graphs:late", storage_root=shared, upstream_tokens=down_tokens) as down,
    ):
        await settled(up, await up.db.want("feed/2024-01-01"))
        port = free_port()
        async with http_server(up, port):
            subscription = UpstreamInput(
                name="up",
                url=f"http://127.0.0.1:{port}",
                patterns=["feed/*"],
                poll_every=timedelta(milliseconds=300),
                steps_per_run=2,
            )
            await start_upstream(down.client, down.settings.task_queue, subscription)
            workflow_id = upstream_workflow_id(down.settings.task_queue, "up")
            first = await run_id(down.client, workflow_id)
            await until(partial(found, down, "feed/2024-01-01"))
            await rec.save("upstream-sync-pull", down.client, workflow_id, first)
            await down.client.get_workflow_handle(workflow_id).terminate("recorded")


@scenario("upstream-push")
async def upstream_push(rec: Recorder) -> None:
    """Two announcements pushed by signal, one batch each: the run then continues as new."""
    async with rec.stack("dev", "tests.graphs:late") as stack:
        queue = stack.settings.task_queue
        await start_upstream(
            stack.client, queue, UpstreamInput(name="up", patterns=["feed/*"], steps_per_run=2)
        )
        workflow_id = upstream_workflow_id(queue, "up")
        first = await run_id(stack.client, workflow_id)
        for day in ("2024-02-01", "2024-02-02"):
            ref = f"feed/{day}"
            await announce(
                stack.client, queue, Announcement(ref=ref, instance_id=str(uuid.uuid4()), graph="up")
            )
            await until(partial(found, stack, ref))
        await rec.save("upstream-sync-push", stack.client, workflow_id, first)
        await stack.client.get_workflow_handle(workflow_id).terminate("recorded")


@scenario("scheduled")
async def scheduled(rec: Recorder) -> None:
    """A backfill of one day of a paused schedule registers that day's want."""
    pattern = "feed/{date}"
    async with rec.stack("dev", "tests.graphs:late") as stack:
        queue = stack.settings.task_queue
        want = ScheduledWantInput(pattern=pattern, ttl=timedelta(days=3650))
        await create_want_schedule(stack.client, queue, want, "0 0 * * *", paused=True)
        day = datetime(2024, 1, 1, tzinfo=UTC)
        await backfill_want_schedule(stack.client, pattern, day, day + timedelta(hours=12))
        query = f"WorkflowType = '{SCHEDULED_WANT_WORKFLOW}' AND TaskQueue = '{queue}'"
        for _ in range(300):
            done = [
                w
                async for w in stack.client.list_workflows(query)
                if w.status is WorkflowExecutionStatus.COMPLETED
            ]
            if done:
                break
            await asyncio.sleep(0.2)
        [run] = done
        await rec.save("scheduled-want", stack.client, run.id, run.run_id)
        await delete_want_schedule(stack.client, pattern)


@scenario("sla-miss", "time-skipping")
async def sla_miss(rec: Recorder) -> None:
    """Its SLA passes while it waits for an external input; fulfilled late."""
    env = await rec.env("time-skipping")
    async with rec.stack("time-skipping", "tests.graphs:late") as stack:
        start = await env.get_current_time()
        spec = await stack.db.want(
            "report/late", data_timestamp=start, sla=timedelta(hours=9), ttl=timedelta(days=30)
        )
        await until(lambda: waiting_for_feed(stack.db, "feed/late"), seconds=120)
        await env.sleep(timedelta(hours=10))
        await until(lambda: stack.bel.wants.get(spec.want_id).sla_missed)
        stack.parts.spark.session().range(5).write.parquet(str(lake(stack.settings) / "feed/late"))
        await stack.db.publish("feed/late")
        await settled(stack, spec)
        assert stack.bel.wants.get(spec.want_id).sla_missed
        await rec.save("want-sla-miss", stack.client, spec.workflow_id)


@scenario("ttl-expiry", "time-skipping")
async def ttl_expiry(rec: Recorder) -> None:
    env = await rec.env("time-skipping")
    async with rec.stack("time-skipping", "tests.graphs:late") as stack:
        start = await env.get_current_time()
        spec = await stack.db.want(
            "report/never", data_timestamp=start, sla=timedelta(hours=9), ttl=timedelta(days=30)
        )
        await until(lambda: waiting_for_feed(stack.db, "feed/never"), seconds=120)
        await env.sleep(timedelta(days=31))
        await settled(stack, spec, WantState.expired)
        await rec.save("want-ttl-expiry", stack.client, spec.workflow_id)


@scenario("continue-as-new", "short-history")
async def continue_as_new(rec: Recorder) -> None:
    """A fail-locked want told to decide again until the server suggests continuing as new; then the
    lock is resolved and the next run builds."""
    async with rec.stack("short-history", "tests.graphs:trio", job_attempts=1) as stack:
        _, blocked = await fail_then_block(stack, "long")
        first = await run_id(stack.client, blocked.workflow_id)
        handle = stack.client.get_workflow_handle(blocked.workflow_id)
        notice = RedecideNotice(ref="a/long", reason="recording a long history")
        for _ in range(SUGGEST_CONTINUE_AS_NEW):
            if await run_id(stack.client, blocked.workflow_id) != first:
                break
            await handle.signal(SIGNAL_REDECIDE, notice)
            await asyncio.sleep(0.3)
        else:
            raise AssertionError("the want never continued as new")
        await resolve(stack, "long", blocked)
        last = await run_id(stack.client, blocked.workflow_id)
        await rec.save("want-continue-as-new-1", stack.client, blocked.workflow_id, first)
        await rec.save("want-continue-as-new-2", stack.client, blocked.workflow_id, last)


@scenario("alert")
async def alert(rec: Recorder) -> None:
    """Two failed wants of one job, a few seconds apart: each alert goes to the channels' queues. The
    channel that is up gets the first of each kind at once and the second at the window's
    end; the one that is down is tried once, waits, and gives the alerts up."""
    from databuild.operations.alerts import channels
    from tests.test_alerts import Webhook

    hook = Webhook()
    hook.up()
    urls = f"json://127.0.0.1:{hook.port}/hook, json://127.0.0.1:{free_port()}/down"
    extra = {
        "job_attempts": 1,
        "alert_urls": urls,
        "alert_group_window": timedelta(seconds=10),
        "alert_give_up_after": timedelta(seconds=4),
    }
    try:
        async with rec.stack("dev", "tests.graphs:trio", **extra) as stack:
            failed = []
            for n in ("alert-1", "alert-2"):
                graphs.BROKEN.add(n)
                spec = await stack.db.want(f"a/{n}")
                await settled(stack, spec, WantState.failed)
                failed.append(spec)
            await until(lambda: sum(int(r["count"]) for r in hook.received) == 4, seconds=60)
            assert len(hook.received) == 4 and max(int(r["count"]) for r in hook.received) == 1, hook.received
            await rec.save("alert-queued", stack.client, f"alert:want_failed:{failed[0].want_id}")
            up, down = (c.id for c in sorted(channels(stack.settings), key=lambda c: "/down" in c.url))
            queue = stack.settings.task_queue
            await rec.save("alert-channel", stack.client, alert_channel_workflow_id(queue, up))
            await rec.save("alert-channel-down", stack.client, alert_channel_workflow_id(queue, down))
    finally:
        hook.down()


@scenario("backfill-window")
async def backfill_window(rec: Recorder) -> None:
    """A backfill whose window starts its six wants two at a time, woken by the end of the registration."""
    request = BackfillRequest(
        pattern="tick/{n}",
        start=datetime(2024, 8, 1, tzinfo=UTC),
        end=datetime(2024, 8, 1, 5, tzinfo=UTC),
        step=timedelta(hours=1),
    )
    async with rec.stack("dev", "tests.graphs:reach", backfill_window=2) as stack:
        await stack.db.backfill(request)
        for _ in range(600):
            if stack.bel.backfills.progress(request.backfill_id).finished:
                break
            await asyncio.sleep(0.1)
        progress = stack.bel.backfills.progress(request.backfill_id)
        assert progress.by_state == {WantState.successful: 6}, progress
        await rec.save("backfill-window", stack.client, backfill_window_workflow_id(request.backfill_id))


@scenario("check")
async def check(rec: Recorder) -> None:
    """`databuild check` re-runs a live partition's checks on the worker: one activity."""
    graphs.CLEAN.add("7")
    try:
        async with rec.stack("dev", "tests.graphs:checked") as stack:
            spec = await stack.db.want("events/7")
            await settled(stack, spec)
            recheck = await stack.db.check("events/7")
            assert not recheck.fail_locked, recheck
            await rec.save("check", stack.client, check_workflow_id("events/7"))
    finally:
        graphs.CLEAN.discard("7")


async def record(names: list[str]) -> None:
    HISTORY_DIR.mkdir(exist_ok=True)
    spark = SparkRuntime("local[2]", "2g", app_name="databuild-replay-recorder")
    try:
        with tempfile.TemporaryDirectory(prefix="databuild-replay-") as home:
            async with contextlib.AsyncExitStack() as servers:
                recorder = Recorder(spark, Path(home), servers)
                for name in names:
                    started = time.monotonic()
                    print(f"{name}:", flush=True)
                    server, run = RUNS[name]
                    await recorder.env(server)
                    await run(recorder)
                    missing = set(SCENARIOS[name]) - set(recorder.saved)
                    assert not missing, f"{name} did not save {sorted(missing)}"
                    print(f"  ({time.monotonic() - started:.0f} s)", flush=True)
    finally:
        spark.stop()


def main() -> None:
    assert RUNS.keys() == SCENARIOS.keys(), "tests/replay/__init__.py lists other scenarios"
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--only", action="append", choices=sorted(RUNS), help="a scenario (repeatable)")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    logging.basicConfig(level=logging.ERROR)  # the scenarios' failing jobs log warnings by design
    asyncio.run(record(parser.parse_args().only or list(RUNS)))


if __name__ == "__main__":
    main()
