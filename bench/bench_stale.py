"""The cost of `databuild stale` over a large build event log (SQLite), against a plain read of the same rows.

    python -m bench.bench_stale [--partitions 100000] [--samples 3]

The log's projections are written directly, in bulk (staleness reads only them: the live partitions, their
instances with the run and version that built them, and the consumer index), in a chain and fan-in shape:
per day, raw/{day} (external) -> clean/{day} -> daily/{day}; weekly/{week} reads its seven days' daily
(fan-in); cumulative/{day} reads daily/{day} and cumulative/{day-1} (a chain as long as the history).
The graph's `clean` job has a new version since everything was built, and one raw day has a newer
instance: most partitions are stale, through chains of every length.

Timed (best of ``--samples``): `stale` over everything (``views.staleness.stale_partitions``, what the
CLI, SDK and API call), `stale` of one pattern (the last month, whose cumulative upstream reaches back to
day one), one partition's staleness as its view shows it (``stale_of``: the first cumulative day, three
instances upstream, and the last, the whole history upstream), and the baseline: a plain SELECT of the
live instances and of their consumer rows, the rows `stale` reads, in the same run. The last line printed
is JSON: the figures and the ratio to the baseline.
"""

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import insert, select

from databuild.bel import BuildEventLog
from databuild.bel import schema as s
from databuild.graph import Graph
from databuild.views.staleness import stale_of, stale_partitions

T0 = datetime(2024, 1, 1, tzinfo=UTC)
PER_DAY = 4  # raw, clean, daily, cumulative (+ a weekly every seventh day)
CHUNK = 10_000


def graph() -> Graph:
    g = Graph("bench_stale")
    g.external("raw/{day}")
    for label in ("clean", "daily", "weekly", "cumulative"):
        version = "2" if label == "clean" else "1"  # clean changed since the history was built
        g.job(f"{label}/{{key}}", label=label, version=version)(lambda ctx, key: None)
    return g


class Log:
    """Projection rows of a consistent history, written in bulk."""

    def __init__(self) -> None:
        self.partitions: list[dict[str, Any]] = []
        self.instances: list[dict[str, Any]] = []
        self.runs: list[dict[str, Any]] = []
        self.consumers: list[dict[str, Any]] = []

    def live(self, ref: str, label: str | None, reads: list[str], n: int = 1) -> str:
        instance = f"{ref}@{n}"
        run = None if label is None else f"jr-{ref}"
        self.partitions.append(
            {"ref": ref, "status": "live", "instance_id": instance, "built_by": run, "external": run is None}
            | {"updated_at": T0, "generation": 0}
        )
        self.instances.append(
            {"instance_id": instance, "ref": ref, "job_run_id": run, "external": run is None}
            | {"created_at": T0, "status": "live", "job_version": None if label is None else "1"}
        )
        if run is not None:
            self.runs.append(
                {"job_run_id": run, "job_label": label, "state": "succeeded", "outputs": [ref], "params": {}}
                | {"attempts": 1, "lost": False, "missing": [], "workflow_id": run}
                | {"created_at": T0, "updated_at": T0}
            )
        self.consumers += [
            {"input_instance_id": i, "output_instance_id": instance, "output_ref": ref, "job_run_id": run}
            for i in reads
        ]
        return instance

    def supersede(self, ref: str) -> None:
        """The upstream republished ``ref``: a newer instance is live, the old one superseded."""
        old = next(i for i in self.instances if i["ref"] == ref and i["status"] == "live")
        old["status"] = "superseded"
        self.instances.append(old | {"instance_id": f"{ref}@2", "status": "live"})
        next(p for p in self.partitions if p["ref"] == ref)["instance_id"] = f"{ref}@2"

    def write(self, bel: BuildEventLog) -> None:
        with bel.writer.begin() as conn:
            for table, rows in (
                (s.partitions, self.partitions),
                (s.partition_instances, self.instances),
                (s.job_runs, self.runs),
                (s.consumers, self.consumers),
            ):
                for start in range(0, len(rows), CHUNK):
                    conn.execute(insert(table), rows[start : start + CHUNK])


def history(partitions: int) -> tuple[Log, int, str]:
    """About ``partitions`` live partitions; the number of days and the last month's pattern."""
    days = max(partitions // (PER_DAY + 1 / 7), 8)
    log = Log()
    previous: str | None = None
    week: list[str] = []
    for d in range(int(days)):
        day = (date(2000, 1, 1) + timedelta(days=d)).isoformat()
        raw = log.live(f"raw/{day}", None, [])
        clean = log.live(f"clean/{day}", "clean", [raw])
        daily = log.live(f"daily/{day}", "daily", [clean])
        previous = log.live(f"cumulative/{day}", "cumulative", [daily, *([previous] if previous else [])])
        week.append(daily)
        if len(week) == 7:
            log.live(f"weekly/{day}", "weekly", week)
            last = day
            week = []
    log.supersede("raw/2000-01-01")
    return log, int(days), f"*/{last[:8]}*"


def best(samples: int, call: Callable[[], object]) -> tuple[float, object]:
    times, result = [], None
    for _ in range(samples):
        started = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - started)
    return min(times), result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=3)
    args = parser.parse_args()
    g = graph()
    with tempfile.TemporaryDirectory() as scratch:
        bel = BuildEventLog.create(f"sqlite:///{Path(scratch) / 'bel.sqlite'}")
        log, days, pattern = history(args.partitions)
        first_day = "2000-01-01"
        last_day = (date(2000, 1, 1) + timedelta(days=days - 1)).isoformat()
        started = time.perf_counter()
        log.write(bel)
        written_s = time.perf_counter() - started
        live = len(log.partitions)

        def baseline() -> int:
            with bel.snapshot_connection() as conn:
                rows = conn.execute(
                    select(s.partition_instances).where(s.partition_instances.c.status == "live")
                )
                reads = conn.execute(select(s.consumers))
                return len(rows.all()) + len(reads.all())

        base_s, base_rows = best(args.samples, baseline)
        all_s, found = best(args.samples, lambda: stale_partitions(bel, g))
        pattern_s, narrowed = best(args.samples, lambda: stale_partitions(bel, g, pattern))
        # One partition's view (partitions show, the dashboard): the first and the last cumulative day,
        # whose upstream is three instances and the whole history.
        first_s, _ = best(args.samples, lambda: stale_of(bel, g, [f"cumulative/{first_day}@1"]))
        last_s, _ = best(args.samples, lambda: stale_of(bel, g, [f"cumulative/{last_day}@1"]))
        bel.dispose()
    assert isinstance(found, list) and isinstance(narrowed, list)
    stale = len(found)
    # Every clean is stale by code and everything built from one through it: all but the raw days.
    assert stale == live - days, (stale, live, days)
    figures = {
        "live_partitions": live,
        "days": days,
        "consumer_rows": len(log.consumers),
        "write_s": round(written_s, 3),
        "baseline_s": round(base_s, 4),
        "baseline_rows": base_rows,
        "stale_all_s": round(all_s, 4),
        "stale_all": stale,
        "ratio_all": round(all_s / base_s, 2),
        "stale_pattern": pattern,
        "stale_pattern_s": round(pattern_s, 4),
        "stale_pattern_found": len(narrowed),
        "per_1000_live_ms": round(all_s / live * 1000 * 1000, 3),
        "one_shallow_s": round(first_s, 4),
        "one_deepest_s": round(last_s, 4),
    }
    print(
        f"{live:,} live partitions ({days:,} days, {len(log.consumers):,} reads), written in {written_s:.1f}s"
    )
    print(f"baseline (plain SELECT of the same rows): {base_s * 1000:.0f} ms")
    print(
        f"stale, everything: {all_s * 1000:.0f} ms for {stale:,} stale ({all_s / base_s:.1f}x the baseline)"
    )
    print(f"stale {pattern}: {pattern_s * 1000:.0f} ms for {len(narrowed):,} stale")
    print(
        f"one partition's staleness: {first_s * 1000:.1f} ms (3 upstream), {last_s * 1000:.0f} ms (all days)"
    )
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
