"""The chaos soak: the demo backfill under faults for as long as you like, then every invariant.

    python -m bench.bench_chaos [--seed N] [--minutes 10] [--days 21] [--extra-wants 50] [--workers 2]
                                [--gap 5 15] [--outage 30 60] [--keep]

A Temporal dev server on a file database, ``--workers`` `databuild worker` processes and a fresh
PostgreSQL BEL (a database of its own next to ``DATABUILD_TEST_POSTGRES_URL``'s, dropped afterwards).
It wants ``daily_summary`` for ``--days`` days plus ``--extra-wants`` concurrent wants for partitions
that backfill needs, then, until ``--minutes`` have passed, taints a few ``raw_events`` (cascading)
and wants the affected days again. Meanwhile it kills a worker, restarts the Temporal server, kills
the BEL's connections, takes the BEL's database away for ``--outage`` seconds (a failover) or kills the
whole stack, every ``--gap`` seconds (drawn from ``--seed``); late corrections of an incremental job's
feed are announced after every round. When time
is up the faults stop, every want has ``--settle`` seconds to end, and the invariants are checked
(see chaos/). It prints the faults by kind, wants completed, duplicate builds (must
be 0), stuck wants (must be 0) and the wall time; the last line is JSON. Exit code 1 if an invariant
failed.
"""

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from bench.common import run_and_exit
from chaos import ChaosConfig, ChaosReport, run_chaos
from databuild.testing import POSTGRES_URL


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


async def soak(config: ChaosConfig, home: Path) -> ChaosReport:
    # SIGTERM cancels the run as Ctrl-C does, so the processes and the database are cleaned up.
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await run_chaos(config, home, POSTGRES_URL, log)
    except asyncio.CancelledError:
        raise SystemExit("stopped by SIGTERM") from None


def report(result: ChaosReport, home: Path, kept: bool) -> None:
    print()
    print(result.summary())
    for violation in result.violations():
        print(f"VIOLATED: {violation}")
    if kept:
        print(f"logs (Temporal, workers) and the BEL's events: {home}")
    # Counts only: the findings themselves are printed above.
    figures = {k: len(v) if isinstance(v, list) else v for k, v in asdict(result).items()}
    figures["faults"] = dict(result.faults)
    figures["steering"] = dict(result.steering)
    print(json.dumps(figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--seed", type=int, default=None, help="fault schedule (default: random, printed)")
    parser.add_argument("--minutes", type=float, default=10.0, help="keep rebuilding under faults this long")
    parser.add_argument("--days", type=int, default=21, help="daily_summary partitions to backfill")
    parser.add_argument("--extra-wants", type=int, default=50, help="concurrent wants racing the backfill")
    parser.add_argument("--workers", type=int, default=2, help="databuild worker processes")
    parser.add_argument("--gap", type=float, nargs=2, default=(5.0, 15.0), metavar=("MIN", "MAX"))
    parser.add_argument("--settle", type=float, default=600.0, help="seconds every want has to end after")
    parser.add_argument(
        "--outage",
        type=float,
        nargs=2,
        default=(30.0, 60.0),
        metavar=("MIN", "MAX"),
        help="seconds a BEL outage lasts (every connection terminated, new ones refused)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the logs folder even if all held")
    args = parser.parse_args()
    if args.days < 1 or args.workers < 1 or args.extra_wants < 0 or args.minutes < 0:
        parser.error("--days and --workers must be at least 1, --extra-wants and --minutes at least 0")
    if not 0 < args.gap[0] <= args.gap[1]:
        parser.error("--gap MIN MAX: 0 < MIN <= MAX seconds")
    if not 0 < args.outage[0] <= args.outage[1]:
        parser.error("--outage MIN MAX: 0 < MIN <= MAX seconds")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    config = ChaosConfig(
        seed=random.randrange(1_000_000) if args.seed is None else args.seed,
        days=args.days,
        extra_wants=args.extra_wants,
        workers=args.workers,
        fault_gap=(args.gap[0], args.gap[1]),
        outage_seconds=(args.outage[0], args.outage[1]),
        minutes=args.minutes,
        settle_seconds=args.settle,
    )

    def work() -> int:
        home = Path(tempfile.mkdtemp(prefix="databuild-chaos-"))
        log(f"working in {home} (kept if an invariant fails)")
        result = asyncio.run(soak(config, home))
        failed = bool(result.violations())
        report(result, home, kept=failed or args.keep)
        if not (failed or args.keep):
            shutil.rmtree(home, ignore_errors=True)
        return 1 if failed else 0

    run_and_exit(work)


if __name__ == "__main__":
    main()
