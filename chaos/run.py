"""The run: start a stack, play the workload under faults, then check every invariant."""

import asyncio
import random
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

from chaos.config import ChaosConfig, Log
from chaos.faults import Faults
from chaos.invariants import (
    ChaosReport,
    check_builds,
    check_fail_locks,
    check_liveness,
    check_news,
    check_outcomes,
    check_partitions,
    check_projections,
    dump_events,
)
from chaos.stack import ChaosStack, chaos_stack
from chaos.steering import steer_backfill
from chaos.workload import (
    announce,
    backfill_refs,
    corrected_days,
    late_news,
    register_round,
    taint_round,
    until_caught_up,
    until_settled,
)
from databuild.jobs.storage import Storage
from databuild.operations.garbage import collect_garbage
from databuild.testing import postgres_database


async def run_chaos(config: ChaosConfig, home: Path, admin_url: str, log: Log = print) -> ChaosReport:
    """Start a stack, run the workload under faults, then check every invariant."""
    started = time.monotonic()
    report = ChaosReport(seed=config.seed)
    rng = random.Random(config.seed)
    log(f"chaos seed {config.seed} (rerun with --seed {config.seed})")
    # Its faults kill connections, never the PostgreSQL server: commits that wait for the disk prove nothing more.
    with postgres_database(admin_url, prefix="chaos", durable=False) as database_url:
        async with chaos_stack(home, database_url, config.workers, log) as stack:
            faults = Faults(stack, rng, admin_url, started, config.outage_seconds)
            stop = asyncio.Event()
            supervisor = asyncio.create_task(stack.supervise(stop))
            injector = asyncio.create_task(faults.injected(config, stop))
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
            check_fail_locks(bel, report)
            check_news(bel, report)
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
    versions: Counter[str] = Counter(dict.fromkeys(corrected_days(config), 1))
    for day in versions:  # the first corrections, before anything wants them
        await announce(stack, day, 1)
    refs += [f"user_totals/{day}" for day in versions]
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
        # Late corrections: their rebuilds start by themselves, and end before the round is done.
        await late_news(stack, rng, config, versions)
        patience = max(config.settle_seconds, 60 * config.minutes)
        caught_up = await until_caught_up(stack, list(versions), patience)
        if not caught_up or await until_settled(stack, patience) == "timeout":
            return rounds  # the checks after the faults report what is behind or open
        rounds += 1
        log(f"[chaos +{time.monotonic() - started:6.1f}s] round {rounds} done")
        if time.monotonic() - started >= 60 * config.minutes:
            return rounds
        refs = await taint_round(stack, rng, config)
