"""Announcement fan-out: N wants blocked on one external partition, woken by one publish, against
signalling N bare workflows from one client on the same Temporal server, measured in one run.

    python -m bench.bench_announce [--n 2000] [--memory]

N wants for the external ref ``live/announce-...`` (distinct data timestamps, so N distinct wants and
workflows) each decide ``wait_external`` and subscribe to that ref. Once all N wait (BEL state and the
workflows' own search attribute), ``DataBuild.publish`` announces the ref.

(a) headline: announcement -> all signalled. The time ``publish`` takes: the BEL write, then
    ``notify_subscribers`` paging through the subscriptions and signalling every want; it returns once
    the server has accepted all N signals.
    Baseline: N bare workflows (no activities; each waits for one ``partition_available`` signal) are
    signalled from one client the way ``notify_subscribers`` does it: pages of its ``page_size``, each
    page's signals gathered, the pages one after another. Two baseline groups are signalled, one before
    and one after the announcement, so drift shows; the baseline is their mean.
(b) extra: announcement -> last want workflow closed (each want's own work after its signal included:
    the finish activity writing the BEL), from the server's close times; for the bare groups, first
    signal -> last bare workflow closed.

The worker runs in this process (as in ``databuild dev``), built by ``worker.run.build_worker``; its
workflow cache (DATABUILD_WORKFLOW_CACHE) holds every waiting want. The dev server keeps its state
in a file with the pragmas of ``databuild dev``
(``--memory``: in memory, as the tests run it). The last line printed is JSON.
"""

import argparse
import asyncio
import inspect
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    # The sandbox re-runs this module for the bare workflow; keep these out of it.
    from sqlalchemy import func, select
    from temporalio.client import Client
    from temporalio.common import SearchAttributePair, TypedSearchAttributes
    from temporalio.worker import Worker

    from bench.common import counting_stalled_tasks, run_and_exit
    from databuild.bel import BuildEventLog
    from databuild.bel import schema as s
    from databuild.bel.aggregates.partitions import Partitions
    from databuild.bel.aggregates.wants import Wants
    from databuild.bel.engine.recorder import Recorder
    from databuild.client import DataBuild
    from databuild.config import Settings
    from databuild.graph import load_graph
    from databuild.jobs.spark import SparkRuntime
    from databuild.models import Partition, Subscription, WantSpec, WantState
    from databuild.process import forward_core_logs
    from databuild.temporal.connection import ensure_search_attributes, file_database_args
    from databuild.temporal.protocol import (
        SA_PARTITION_REF,
        SA_WANT_STATE,
        SIGNAL_PARTITION_AVAILABLE,
        PartitionAvailable,
    )
    from databuild.temporal.wants import notify_subscribers
    from databuild.testing import make_settings, start_dev_server
    from worker.run import WorkerParts, build_worker

GRAPH = "databuild.testing.graphs:graph"  # declares live/{n} external
WARMUP = 20
START_CONCURRENCY = 64  # registrations / workflow starts in flight while setting up (untimed)
TARGET_RATIO = 1.5
SETTLE_S = 2.0
WAITING = WantState.upstream_building.value
# The product's page: notify_subscribers signals one page of subscriptions at a time, gathered.
PAGE_SIZE: int = inspect.signature(notify_subscribers).parameters["page_size"].default


# --- the baseline: a bare workflow that waits for one signal, no activities --------------------


@workflow.defn(name="BenchSignalBare")
class SignalBareWorkflow:
    def __init__(self) -> None:
        self._notice: PartitionAvailable | None = None

    @workflow.run
    async def run(self) -> str:
        # Say "waiting" the way a want does (a search attribute), so the bench sees when all wait.
        workflow.upsert_search_attributes([SA_WANT_STATE.value_set(WAITING)])
        await workflow.wait_condition(lambda: self._notice is not None)
        assert self._notice is not None
        return self._notice.instance_id

    @workflow.signal(name=SIGNAL_PARTITION_AVAILABLE)
    def partition_available(self, notice: PartitionAvailable) -> None:
        self._notice = notice


# --- a BEL that times the client's calls (the worker has its own, untimed) ------------------------


@dataclass
class Spans:
    publish_external: list[tuple[float, float]] = field(default_factory=list)
    subscriptions: list[tuple[float, float]] = field(default_factory=list)


class TimedPartitions(Partitions):
    def __init__(self, log: Recorder, spans: Spans) -> None:
        super().__init__(log)
        self.spans = spans

    def publish_external(
        self, ref: str, instance_id: str | None = None, source: str | None = None, location: str | None = None
    ) -> tuple[Partition, bool]:
        start = time.perf_counter()
        try:
            return super().publish_external(ref, instance_id, source, location)
        finally:
            self.spans.publish_external.append((start, time.perf_counter()))


class TimedWants(Wants):
    def __init__(self, log: Recorder, spans: Spans) -> None:
        super().__init__(log)
        self.spans = spans

    def subscriptions(self, refs: Sequence[str], after_id: int, limit: int) -> list[Subscription]:
        start = time.perf_counter()
        try:
            return super().subscriptions(refs, after_id, limit)
        finally:
            self.spans.subscriptions.append((start, time.perf_counter()))


class TimedBel(BuildEventLog):
    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.spans = Spans()
        self.partitions = TimedPartitions(self._log, self.spans)
        self.wants = TimedWants(self._log, self.spans)


# --- helpers ----------------------------------------------------------------------------------


def tagged(tag: str, state: str | None = None, running: bool | None = None) -> str:
    """A visibility query for the workflows of one group (wants: their ref; bare: their tag)."""
    query = f'{SA_PARTITION_REF.name} = "{tag}"'
    if state is not None:
        query += f' AND {SA_WANT_STATE.name} = "{state}"'
    if running is not None:
        query += f' AND ExecutionStatus {"=" if running else "!="} "Running"'
    return query


async def count(client: Client, query: str) -> int:
    return (await client.count_workflows(query)).count


async def last_close(client: Client, tag: str) -> float:
    """Epoch seconds at which the last workflow of the group closed (server clock, same host)."""
    latest = 0.0
    async for execution in client.list_workflows(tagged(tag), page_size=1000):
        if execution.close_time is None:
            raise RuntimeError(f"workflow {execution.id} of {tag} is still open")
        latest = max(latest, execution.close_time.timestamp())
    return latest


def want_states(bel: BuildEventLog, ref: str) -> dict[str, int]:
    query = select(s.wants.c.state, func.count()).where(s.wants.c.ref == ref).group_by(s.wants.c.state)
    with bel.reader.connect() as conn:
        return {str(state): int(n) for state, n in conn.execute(query)}


def subscribers(bel: BuildEventLog, ref: str) -> int:
    query = select(func.count()).select_from(s.subscriptions).where(s.subscriptions.c.ref == ref)
    with bel.reader.connect() as conn:
        return int(conn.execute(query).scalar_one())


async def wait_until(what: str, current: Callable[[], Awaitable[int]], target: int, limit_s: float) -> float:
    """Poll ``current()`` until it reaches ``target``; seconds waited. Prints progress every few seconds."""
    start = time.perf_counter()
    shown = start
    every = 0.05
    while True:
        now_at = await current()
        elapsed = time.perf_counter() - start
        if now_at >= target:
            return elapsed
        if elapsed > limit_s:
            raise RuntimeError(f"{what}: {now_at} of {target} after {elapsed:.0f} s")
        if time.perf_counter() - shown > 5:
            print(f"  {what}: {now_at}/{target} ({elapsed:.0f} s)", flush=True)
            shown = time.perf_counter()
        await asyncio.sleep(every)
        every = min(every * 2, 1.0)


async def in_flight(count_: int, what: str, one: Callable[[int], Awaitable[None]]) -> float:
    """Run ``one(i)`` for i < count_, START_CONCURRENCY at a time, printing progress; seconds taken."""
    gate = asyncio.Semaphore(START_CONCURRENCY)
    done = 0
    step = max(count_ // 10, 1)
    start = time.perf_counter()

    async def run_one(i: int) -> None:
        nonlocal done
        async with gate:
            await one(i)
        done += 1
        if done % step == 0 or done == count_:
            elapsed = time.perf_counter() - start
            print(f"  {what}: {done}/{count_} ({elapsed:.1f} s, {done / elapsed:.0f}/s)", flush=True)

    await asyncio.gather(*(run_one(i) for i in range(count_)))
    return time.perf_counter() - start


@dataclass
class Rig:
    client: Client
    db: DataBuild
    bel: TimedBel
    bare_queue: str
    timeout: float


# --- the wants: register, wait until all wait, announce ------------------------------------------


async def register_wants(rig: Rig, ref: str, n: int) -> float:
    base = datetime(2024, 1, 1, tzinfo=UTC)

    async def one(i: int) -> None:
        spec: WantSpec = await rig.db.want(ref, data_timestamp=base + timedelta(seconds=i))
        assert spec.ref == ref

    return await in_flight(n, f"wants registered for {ref}", one)


async def wants_waiting(rig: Rig, ref: str, n: int) -> float:
    """Until every want has decided to wait (BEL), is subscribed (BEL) and says so itself (visibility)."""
    start = time.perf_counter()
    await wait_until(
        "wants waiting (BEL)",
        lambda: asyncio.to_thread(lambda: want_states(rig.bel, ref).get(WAITING, 0)),
        n,
        rig.timeout,
    )
    await wait_until("subscriptions", lambda: asyncio.to_thread(subscribers, rig.bel, ref), n, rig.timeout)
    await wait_until(
        "want workflows waiting", lambda: count(rig.client, tagged(ref, WAITING)), n, rig.timeout
    )
    return time.perf_counter() - start


@dataclass
class Announced:
    signal_s: float  # (a): publish(), i.e. BEL write + notify_subscribers
    done_s: float  # (b): announcement -> last want workflow closed
    signalled: int
    publish_external_s: float
    pages: int
    page_query_s: float  # time in BEL subscription queries, all pages
    signalling_s: float  # the rest of notify_subscribers: the gathered signal RPCs
    states: dict[str, int]


async def announce(rig: Rig, ref: str, n: int) -> Announced:
    rig.bel.spans = Spans()
    wall = time.time()
    start = time.perf_counter()
    _, created, signalled = await rig.db.publish(ref, instance_id=str(uuid.uuid4()), source="bench")
    signal_s = time.perf_counter() - start
    if not created or signalled != n:
        raise RuntimeError(f"publish {ref}: created={created}, signalled {signalled} of {n} wants")
    await wait_until("wants done", lambda: count(rig.client, tagged(ref, running=False)), n, rig.timeout)
    done_s = await last_close(rig.client, ref) - wall
    states = await asyncio.to_thread(want_states, rig.bel, ref)
    spans = rig.bel.spans
    write_s = sum(end - begin for begin, end in spans.publish_external)
    query_s = sum(end - begin for begin, end in spans.subscriptions)
    return Announced(
        signal_s=signal_s,
        done_s=done_s,
        signalled=signalled,
        publish_external_s=write_s,
        pages=len(spans.subscriptions),
        page_query_s=query_s,
        signalling_s=signal_s - write_s - query_s,
        states=states,
    )


# --- the baseline: bare workflows, signalled as notify_subscribers does -------------------------


def bare_ids(tag: str, n: int) -> list[str]:
    return [f"{tag}-{i}" for i in range(n)]


async def start_bare(rig: Rig, tag: str, n: int) -> float:
    ids = bare_ids(tag, n)
    attributes = TypedSearchAttributes([SearchAttributePair(SA_PARTITION_REF, tag)])

    async def one(i: int) -> None:
        await rig.client.start_workflow(
            SignalBareWorkflow.run, id=ids[i], task_queue=rig.bare_queue, search_attributes=attributes
        )

    return await in_flight(n, f"bare workflows started ({tag})", one)


async def bare_waiting(rig: Rig, tag: str, n: int) -> float:
    return await wait_until(
        f"bare workflows waiting ({tag})", lambda: count(rig.client, tagged(tag, WAITING)), n, rig.timeout
    )


@dataclass
class Signalled:
    signal_s: float  # all N signals accepted by the server
    done_s: float  # first signal -> last bare workflow closed
    page_s: list[float]


async def signal_bare(rig: Rig, tag: str, n: int) -> Signalled:
    notice = PartitionAvailable(ref=tag, instance_id=str(uuid.uuid4()))
    ids = bare_ids(tag, n)
    page_s: list[float] = []
    wall = time.time()
    start = time.perf_counter()
    for first in range(0, n, PAGE_SIZE):
        page_start = time.perf_counter()
        await asyncio.gather(
            *(
                rig.client.get_workflow_handle(workflow_id).signal(SIGNAL_PARTITION_AVAILABLE, notice)
                for workflow_id in ids[first : first + PAGE_SIZE]
            )
        )
        page_s.append(time.perf_counter() - page_start)
    signal_s = time.perf_counter() - start
    await wait_until(
        f"bare done ({tag})", lambda: count(rig.client, tagged(tag, running=False)), n, rig.timeout
    )
    return Signalled(signal_s, await last_close(rig.client, tag) - wall, page_s)


# --- the run ------------------------------------------------------------------------------------


async def measure(rig: Rig, n: int) -> dict[str, Any]:
    run_tag = uuid.uuid4().hex[:6]
    ref, warm_ref = f"live/announce-{run_tag}", f"live/announce-warm-{run_tag}"
    before, after, warm_tag = f"bare-before-{run_tag}", f"bare-after-{run_tag}", f"bare-warm-{run_tag}"

    print(f"warming up ({WARMUP} wants, {WARMUP} bare workflows)", flush=True)
    await register_wants(rig, warm_ref, WARMUP)
    await wants_waiting(rig, warm_ref, WARMUP)
    warm = await announce(rig, warm_ref, WARMUP)
    if warm.states != {WantState.successful.value: WARMUP}:
        raise RuntimeError(f"warm-up wants ended {warm.states}")
    await start_bare(rig, warm_tag, WARMUP)
    await bare_waiting(rig, warm_tag, WARMUP)
    await signal_bare(rig, warm_tag, WARMUP)

    print(f"setting up: {n} wants waiting on {ref}, 2 x {n} bare workflows", flush=True)
    register_s = await register_wants(rig, ref, n)
    waiting_s = await wants_waiting(rig, ref, n)
    bare_start_s = await start_bare(rig, before, n) + await start_bare(rig, after, n)
    await bare_waiting(rig, before, n)
    await bare_waiting(rig, after, n)
    await asyncio.sleep(SETTLE_S)  # let the worker go idle: nothing but the N + 2N waiting workflows remain

    print("timing: baseline (before), announcement, baseline (after)", flush=True)
    # Each phase starts from an idle worker and server: the previous one's workflows have all closed.
    base_before = await signal_bare(rig, before, n)
    await asyncio.sleep(SETTLE_S)
    announced = await announce(rig, ref, n)
    await asyncio.sleep(SETTLE_S)
    base_after = await signal_bare(rig, after, n)

    baseline_s = statistics.fmean([base_before.signal_s, base_after.signal_s])
    bare_done_s = statistics.fmean([base_before.done_s, base_after.done_s])
    successful = announced.states.get(WantState.successful.value, 0)
    return {
        "n": n,
        "page_size": PAGE_SIZE,
        "announce_signal_s": announced.signal_s,
        "baseline_signal_s": baseline_s,
        "baseline_before_s": base_before.signal_s,
        "baseline_after_s": base_after.signal_s,
        "ratio": announced.signal_s / baseline_s,
        "pass": announced.signal_s / baseline_s <= TARGET_RATIO,
        "announce_done_s": announced.done_s,
        "bare_done_s": bare_done_s,
        "done_ratio": announced.done_s / bare_done_s,
        "signalled": announced.signalled,
        "publish_external_s": announced.publish_external_s,
        "pages": announced.pages,
        "page_query_s": announced.page_query_s,
        "announce_signalling_s": announced.signalling_s,
        "baseline_page_median_s": statistics.median(base_before.page_s + base_after.page_s),
        "want_states": announced.states,
        "wants_successful": successful,
        "register_s": register_s,
        "register_per_s": n / register_s,
        "waiting_after_register_s": waiting_s,
        "bare_start_s": bare_start_s,
    }


async def run(n: int, memory: bool) -> dict[str, Any]:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="databuild-bench-announce-") as tmp:
        home = Path(tmp)
        # As `databuild dev` runs it (worker/dev.py), unless --memory.
        server_args = file_database_args(home / "temporal.db")
        env = await start_dev_server(*([] if memory else server_args))
        spark = SparkRuntime("local[1]", "1g", app_name="databuild-bench-announce")  # never started
        try:
            client = env.client
            settings = make_settings(
                home / "databuild",
                client,
                GRAPH,
                # The product default (10,000) holds every waiting want up to --n 10000; beyond, as a
                # deployment would, size DATABUILD_WORKFLOW_CACHE to the wants waiting at once.
                workflow_cache=max(Settings().workflow_cache, n + 2 * WARMUP + 100),
            )
            worker_bel = BuildEventLog.create(settings.database_url.get_secret_value())
            client_bel = TimedBel(settings.database_url.get_secret_value())  # schema created just above
            graph = load_graph(GRAPH)
            parts = WorkerParts(settings, client, worker_bel, graph, spark)
            await ensure_search_attributes(client, settings.namespace)
            built = build_worker(parts)
            rig = Rig(
                client,
                DataBuild(client, client_bel, graph, settings),
                client_bel,
                f"bare-{uuid.uuid4().hex[:8]}",
                timeout=120 + n * 0.1,
            )
            bare_worker = Worker(
                client,
                task_queue=rig.bare_queue,
                workflows=[SignalBareWorkflow],
                max_cached_workflows=2 * n + WARMUP + 100,
            )
            with counting_stalled_tasks() as stalled:
                async with built.worker, bare_worker:
                    figures = await measure(rig, n)
                await built.shutdown()
                await asyncio.sleep(1)  # the SDK's core forwards its log lines a batch at a time
                figures["stalled_tasks"] = stalled()
            client_bel.dispose()
            worker_bel.dispose()
        finally:
            spark.stop()
            await env.shutdown()
    figures["server"] = "memory" if memory else "file, journal_mode=wal, synchronous=off"
    figures["worker"] = f"build_worker, workflow cache {max(Settings().workflow_cache, n + 2 * WARMUP + 100)}"
    figures["total_s"] = time.perf_counter() - started
    return figures


def report(f: dict[str, Any]) -> None:
    verdict = "PASS" if f["pass"] else "FAIL"
    f["verdict"] = "PASS" if f["pass"] and not f["stalled_tasks"] else "FAIL"
    rows = [
        ("N (wants, and bare workflows per group)", f"{f['n']}", ""),
        (
            "(a) announcement -> all signalled",
            f"{f['announce_signal_s']:8.3f} s",
            f"{f['n'] / f['announce_signal_s']:.0f} signals/s",
        ),
        ("    BEL publish_external", f"{f['publish_external_s']:8.3f} s", ""),
        ("    BEL subscription pages", f"{f['page_query_s']:8.3f} s", f"{f['pages']} queries"),
        ("    signal RPCs (gathered pages)", f"{f['announce_signalling_s']:8.3f} s", ""),
        (
            "baseline: signal N bare workflows",
            f"{f['baseline_signal_s']:8.3f} s",
            f"before {f['baseline_before_s']:.3f} s, after {f['baseline_after_s']:.3f} s",
        ),
        ("    pattern", "", f"pages of {f['page_size']} gathered, pages in sequence"),
        ("ratio (a) / baseline", f"{f['ratio']:8.2f} x", f"target <= {TARGET_RATIO}x: {verdict}"),
        ("(b) announcement -> last want closed", f"{f['announce_done_s']:8.3f} s", ""),
        (
            "    bare: first signal -> last closed",
            f"{f['bare_done_s']:8.3f} s",
            f"ratio {f['done_ratio']:.2f} x",
        ),
        ("wants successful (BEL)", f"{f['wants_successful']} / {f['n']}", json.dumps(f["want_states"])),
        ("workflow tasks over 5 s", f"{f['stalled_tasks']}", "target: none"),
    ]
    print()
    print(f"{'measure':<40}{'value':>14}   notes")
    print("-" * 88)
    for name, value, extra in rows:
        print(f"{name:<40}{value:>14}   {extra}")
    print("-" * 88)
    print(
        f"set-up: {f['n']} wants registered in {f['register_s']:.1f} s ({f['register_per_s']:.0f}/s), "
        f"all waiting {f['waiting_after_register_s']:.1f} s later; 2 x {f['n']} bare started in "
        f"{f['bare_start_s']:.1f} s. Server: {f['server']}; worker: {f['worker']}; "
        f"whole run {f['total_s']:.1f} s"
    )
    print(json.dumps(f))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument(
        "--n", type=int, default=2000, help="wants blocked on the one partition (10000: full)"
    )
    parser.add_argument("--memory", action="store_true", help="dev server state in memory, not in a file")
    args = parser.parse_args()
    if args.n < 1:
        parser.error("--n must be at least 1")

    def work() -> int:
        forward_core_logs()  # the worker's stalled workflow tasks are counted
        figures = asyncio.run(run(args.n, args.memory))
        report(figures)
        if figures["wants_successful"] != args.n:
            print(f"only {figures['wants_successful']} of {args.n} wants succeeded", file=sys.stderr)
            return 1
        if figures["stalled_tasks"]:
            print(f"{figures['stalled_tasks']} workflow task(s) took over 5 s", file=sys.stderr)
            return 1
        return 0

    run_and_exit(work)


if __name__ == "__main__":
    main()
