"""BEL write throughput on SQLite and PostgreSQL, against the database's own commit rate, in one run.

    python -m bench.bench_bel [--decisions 400] [--commits 2000] [--appends 1000] [--reads 2000] [--postgres URL]

(a) Claim decisions per second (``Decisions.decide``: key locks, state read, events appended and
    projected, committed and visible to readers) with 1, 4 and 16 concurrent clients (threads released
    together; each client's wants are registered beforehand, untimed):
    - distinct: each client decides about partitions of its own, so no two commands share a key;
    - contended: every client wants the same partition at each step, so one claims it (execute) and
      the others delegate to its run, one at a time under the partition's lock.
(b) Raw commits per second with the same client counts: one INSERT of a row into a trivial table and
    COMMIT per iteration, each client on its own connection of the same engine settings (on SQLite
    behind the same in-process writer queue): what the database itself commits on this machine.
    The table's ratio is decisions/s over raw commits/s at the same client count.
(c) Append price: registering N wants through the BEL against raw SQLAlchemy inserts of the same rows,
    one transaction per want.
(d) Read price: reading one want N times through the BEL against a raw SELECT of its row by primary key,
    each on a connection checked out for it (on PostgreSQL the BEL reads a single statement in autocommit;
    the raw SELECT pays for the BEGIN and ROLLBACK around it).
(e) A job run's path: its attempt's start (``start_attempt``, planning each output's instance) and its
    publish (``job_runs.succeed``, which brings back what the fan-out reads), one run after another, against
    two raw commits of (b) at one client; and the connections and statements each run takes.

Without ``--postgres`` the PostgreSQL figures use a database of their own next to
``DATABUILD_TEST_POSTGRES_URL``'s, dropped afterwards.
"""

import argparse
import contextlib
import json
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Column, Integer, MetaData, Table, create_engine, event, insert, text

from bench.common import python_loop_ms
from databuild.bel import BuildEventLog
from databuild.bel import schema as s
from databuild.bel.engine.transaction import make_engines, write_lock
from databuild.domain.decisions import Execute
from databuild.graph import Graph
from databuild.models import InstanceRef, WantSpec
from databuild.testing import POSTGRES_ADMIN_URL, postgres_database

graph = Graph("bench-bel")
graph.job("x/{n}", "y/{n}")(lambda ctx, n: None)
T0 = datetime(2024, 1, 1, tzinfo=UTC)
CLIENTS = (1, 4, 16)

raw_metadata = MetaData()
raw_table = Table(
    "bench_raw_commits",
    raw_metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("client", Integer, nullable=False),
    Column("n", Integer, nullable=False),
)


def reset(url: str) -> None:
    if url.startswith("sqlite"):
        return
    engine = create_engine(url)
    with engine.begin() as conn:
        s.metadata.drop_all(conn)
        raw_metadata.drop_all(conn)
        conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
    engine.dispose()


def released_together(clients: int, work: Callable[[int], None]) -> float:
    """Seconds from releasing ``clients`` threads running ``work(c)`` together until the last ends."""
    barrier = threading.Barrier(clients + 1)
    errors: list[BaseException] = []

    def run(c: int) -> None:
        barrier.wait()
        try:
            work(c)
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(c,)) for c in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return elapsed


WARM_DECISIONS = 20


def decisions_per_second(url: str, clients: int, total: int, contended: bool) -> float:
    """Decisions per second of ``clients`` clients, ``total`` decisions between them, after a few
    untimed ones on the same log (a new log's first statements are compiled, its connections opened)."""
    reset(url)
    bel = BuildEventLog.create(url)
    per_client = max(total // clients, 1)

    def ref(c: int, j: int) -> str:
        return f"x/{j}" if contended else f"x/{c}-{j}"

    wants = [
        [WantSpec(ref=ref(c, j), data_timestamp=T0 + timedelta(minutes=c)) for j in range(per_client)]
        for c in range(clients)
    ]
    warm = [WantSpec(ref=f"x/warm-{j}", data_timestamp=T0) for j in range(WARM_DECISIONS)]
    for want in (*warm, *(want for client_wants in wants for want in client_wants)):
        bel.wants.register(want)
    for want in warm:  # untimed: statements compiled, connections pooled, as in a running worker
        bel.decisions.decide(want.want_id, 1, graph.resolve(want.ref))

    def client(c: int) -> None:
        for want in wants[c]:
            bel.decisions.decide(want.want_id, 1, graph.resolve(want.ref))

    elapsed = released_together(clients, client)
    executed = len(bel.job_runs.query(limit=100_000))
    expected = len(warm) + (per_client if contended else clients * per_client)
    assert executed == expected, f"{executed} job runs for {expected} partitions"
    bel.dispose()
    return clients * per_client / elapsed


def statements_per_decision(url: str, decisions: int, contended: bool, clients: int = 1) -> dict[str, float]:
    """What one decision sends the database: statements (reads, locks, writes) and commits. With many
    clients released together, a process's decisions share transactions (group commit), and independent
    ones their statements too."""
    reset(url)
    bel = BuildEventLog.create(url)
    per_client = max(decisions // clients, 1)
    specs = [
        [
            WantSpec(ref=f"x/{0 if contended else f'{c}-{j}'}", data_timestamp=T0 + timedelta(minutes=j))
            for j in range(per_client)
        ]
        for c in range(clients)
    ]
    for spec in (spec for client_specs in specs for spec in client_specs):
        bel.wants.register(spec)
    counts = {"statements": 0, "commits": 0}

    def statement(*_: Any) -> None:
        counts["statements"] += 1

    def commit(*_: Any) -> None:
        counts["commits"] += 1

    engines = {bel.writer, bel.reader}
    for engine in engines:
        event.listen(engine, "before_cursor_execute", statement)
        event.listen(engine, "commit", commit)

    def client(c: int) -> None:
        for spec in specs[c]:
            bel.decisions.decide(spec.want_id, 1, graph.resolve(spec.ref))

    released_together(clients, client)
    for engine in engines:
        event.remove(engine, "before_cursor_execute", statement)
        event.remove(engine, "commit", commit)
    bel.dispose()
    return {name: count / (clients * per_client) for name, count in counts.items()}


def raw_commits_per_second(url: str, clients: int, total: int) -> float:
    """Single-row INSERT + COMMIT per iteration, each client on its own connection."""
    reset(url)
    engine, reader = make_engines(url)
    lock = write_lock(url)
    with lock, engine.begin() as conn:
        raw_metadata.drop_all(conn)
        raw_metadata.create_all(conn)
    per_client = max(total // clients, 1)
    statement = insert(raw_table)

    def client(c: int, commits: int = per_client) -> None:
        with engine.connect() as conn:
            for n in range(commits):
                with lock:
                    conn.execute(statement, {"client": c, "n": n})
                    conn.commit()

    client(-1, WARM_DECISIONS)  # untimed, as the decisions' warm-up
    elapsed = released_together(clients, client)
    with engine.connect() as conn:
        count = conn.execute(text("SELECT count(*) FROM bench_raw_commits")).scalar_one()
    assert count == WARM_DECISIONS + clients * per_client, count
    engine.dispose()
    reader.dispose()
    return clients * per_client / elapsed


def append_ratio(url: str, count: int) -> dict[str, float]:
    reset(url)
    bel = BuildEventLog.create(url)
    specs = [WantSpec(ref=f"x/{i}", data_timestamp=T0) for i in range(count)]
    start = time.perf_counter()
    for spec in specs:
        bel.wants.register(spec)
    bel_s = time.perf_counter() - start
    rows = [
        (
            {
                "idx": 10_000_000 + i,
                "type": "WantCreated",
                "at": T0,
                "want_id": w.want_id + "r",
                "job_run_id": None,
                "ref": w.ref,
                "data": {"spec": w.model_dump(mode="json")},
            },
            {
                "want_id": w.want_id + "r",
                "ref": w.ref,
                "data_timestamp": w.data_timestamp,
                "sla_seconds": None,
                "ttl_seconds": None,
                "source": "cli",
                "parent_want_id": None,
                "root_want_id": w.want_id,
                "state": "new",
                "sla_missed": False,
                "sla_deadline": None,
                "reason": None,
                "job_run_id": None,
                "decision_seq": 0,
                "workflow_id": w.workflow_id,
                "created_at": T0,
                "updated_at": T0,
            },
            {"ref": w.ref, "want_id": w.want_id + "r", "workflow_id": w.workflow_id},
        )
        for i, w in enumerate(specs)
    ]
    start = time.perf_counter()
    for row, want, subscription in rows:
        with bel.writer.begin() as conn:
            conn.execute(insert(s.events).values(**row))
            conn.execute(insert(s.wants).values(**want))
            conn.execute(insert(s.subscriptions).values(**subscription))
    raw_s = time.perf_counter() - start
    bel.dispose()
    return {"bel_per_s": count / bel_s, "raw_per_s": count / raw_s, "ratio": bel_s / raw_s}


def read_ratio(url: str, count: int) -> dict[str, float]:
    """Reading one want through the BEL (``wants.get``: a row, made a model) against a raw SELECT of the same
    row by primary key on a connection of the same engine checked out per read, as the BEL does."""
    reset(url)
    bel = BuildEventLog.create(url)
    spec = WantSpec(ref="x/read", data_timestamp=T0)
    bel.wants.register(spec)
    by_key = s.wants.select().where(s.wants.c.want_id == spec.want_id)
    for _ in range(min(count, 50)):  # warm both paths (compiled statements, pooled connections)
        bel.wants.get(spec.want_id)
    start = time.perf_counter()
    for _ in range(count):
        bel.wants.get(spec.want_id)
    bel_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(count):
        with bel.reader.connect() as conn:
            conn.execute(by_key).one()
    raw_s = time.perf_counter() - start
    bel.dispose()
    return {"bel_per_s": count / bel_s, "raw_per_s": count / raw_s, "ratio": bel_s / raw_s}


def job_run_path(url: str, runs: int, raw_per_s: float) -> dict[str, float]:
    reset(url)
    bel = BuildEventLog.create(url)
    specs = [WantSpec(ref=f"x/{i}", data_timestamp=T0) for i in range(runs + WARM_DECISIONS)]
    run_ids = []
    for spec in specs:
        bel.wants.register(spec)
        verdict = bel.decisions.decide(spec.want_id, 1, graph.resolve(spec.ref))
        assert isinstance(verdict, Execute), verdict
        run_ids.append(verdict.job_run_id)

    def run(job_run_id: str) -> None:
        started = bel.job_runs.start_attempt(job_run_id, 1, "bench", timedelta(minutes=5))
        written = [InstanceRef(ref=ref, instance_id=i) for ref, i in started.instances.items()]
        bel.job_runs.succeed(job_run_id, [], written, attempt=1)

    for job_run_id in run_ids[:WARM_DECISIONS]:
        run(job_run_id)
    timed, counted = run_ids[WARM_DECISIONS:-10], run_ids[-10:]
    start = time.perf_counter()
    for job_run_id in timed:
        run(job_run_id)
    per_run = (time.perf_counter() - start) / max(len(timed), 1)
    counts = {"checkouts": 0, "statements": 0}  # listening takes SQLite off its direct path: counted apart

    def checked_out(*_: Any) -> None:
        counts["checkouts"] += 1

    def statement(*_: Any) -> None:
        counts["statements"] += 1

    for engine in {bel.writer, bel.reader}:
        event.listen(engine, "checkout", checked_out)
        event.listen(engine, "before_cursor_execute", statement)
    for job_run_id in counted:
        run(job_run_id)
    bel.dispose()
    return {
        "ms": per_run * 1000,
        "ratio": per_run / (2 / raw_per_s),
        "checkouts": counts["checkouts"] / len(counted),
        "statements": counts["statements"] / len(counted),
    }


def measure(name: str, base: str, args: argparse.Namespace) -> dict[str, Any]:
    def url(case: str) -> str:  # a fresh SQLite file per case; PostgreSQL's tables are reset instead
        return base if name == "postgresql" else base.replace(".sqlite", f"-{case}.sqlite")

    figures: dict[str, Any] = {"distinct": {}, "contended": {}, "raw": {}}
    for clients in CLIENTS:
        figures["raw"][clients] = raw_commits_per_second(url(f"raw-{clients}"), clients, args.commits)
        for case in ("distinct", "contended"):
            figures[case][clients] = decisions_per_second(
                url(f"{case}-{clients}"), clients, args.decisions, contended=case == "contended"
            )
        print(
            f"  {name} {clients:>2} clients: "
            + ", ".join(f"{k} {figures[k][clients]:.0f}/s" for k in ("distinct", "contended", "raw")),
            flush=True,
        )
    figures["append"] = append_ratio(url("append"), args.appends)
    figures["read"] = read_ratio(url("read"), args.reads)
    figures["job_run"] = job_run_path(url("job-run"), args.runs, figures["raw"][1])
    figures["per_decision"] = {
        case: statements_per_decision(url(f"count-{case}"), min(args.decisions, 100), case == "contended")
        for case in ("distinct", "contended")
    }
    # 16 clients at once: how much of a decision's statements its group shares.
    figures["per_decision"]["distinct-16"] = statements_per_decision(url("count-16"), 320, False, clients=16)
    return figures


@contextlib.contextmanager
def postgres_url(given: str | None, wanted: bool) -> Iterator[str]:
    if given or not wanted:
        yield given or ""
    else:
        with postgres_database(POSTGRES_ADMIN_URL, "bench_bel") as url:
            yield url


def table(results: dict[str, Any]) -> str:
    lines = [
        f"{'backend':<12}{'clients':>8}{'distinct/s':>12}{'contended/s':>13}{'raw commits/s':>15}"
        f"{'distinct/raw':>14}{'contended/raw':>15}",
        "-" * 89,
    ]
    for name, figures in results.items():
        for clients in CLIENTS:
            d, c, r = (figures[k][clients] for k in ("distinct", "contended", "raw"))
            lines.append(f"{name:<12}{clients:>8}{d:>12.0f}{c:>13.0f}{r:>15.0f}{d / r:>14.2f}{c / r:>15.2f}")
    lines += [
        "",
        f"{'backend':<12}{'BEL appends/s':>15}{'raw inserts/s':>15}{'ratio':>8}",
        "-" * 50,
    ]
    for name, figures in results.items():
        a = figures["append"]
        lines.append(f"{name:<12}{a['bel_per_s']:>15.0f}{a['raw_per_s']:>15.0f}{a['ratio']:>7.2f}x")
    lines += ["", f"{'backend':<12}{'BEL reads/s':>15}{'raw reads/s':>15}{'ratio':>8}", "-" * 50]
    for name, figures in results.items():
        r = figures["read"]
        lines.append(f"{name:<12}{r['bel_per_s']:>15.0f}{r['raw_per_s']:>15.0f}{r['ratio']:>7.2f}x")
    lines += [
        "",
        f"{'backend':<12}{'job run ms':>11}{'/ 2 raw commits':>17}{'connections':>13}{'statements':>12}",
    ]
    lines.append("-" * 65)
    for name, figures in results.items():
        j = figures["job_run"]
        lines.append(
            f"{name:<12}{j['ms']:>11.2f}{j['ratio']:>16.2f}x{j['checkouts']:>13.1f}{j['statements']:>12.1f}"
        )
    lines += ["", f"{'backend':<12}{'case':<13}{'statements/decision':>21}{'commits/decision':>18}", "-" * 64]
    for name, figures in results.items():
        for case, per in figures["per_decision"].items():
            lines.append(f"{name:<12}{case:<13}{per['statements']:>21.1f}{per['commits']:>18.2f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--decisions", type=int, default=400, help="decisions per case and client count")
    parser.add_argument("--commits", type=int, default=2000, help="raw commits per client count")
    parser.add_argument("--appends", type=int, default=1000, help="wants appended for (c)")
    parser.add_argument("--reads", type=int, default=2000, help="reads of one want for (d)")
    parser.add_argument("--runs", type=int, default=300, help="job runs started and published for (e)")
    parser.add_argument(
        "--postgres",
        default=None,
        help="PostgreSQL URL (its BEL tables are dropped and recreated!); default: a database of "
        "its own, created and dropped by this run",
    )
    parser.add_argument("--backends", default="sqlite,postgresql", help="comma-separated")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    names = args.backends.split(",")
    with tempfile.TemporaryDirectory() as tmp, postgres_url(args.postgres, "postgresql" in names) as postgres:
        backends = {"sqlite": f"sqlite:///{Path(tmp) / 'bench.sqlite'}", "postgresql": postgres}
        for name in names:
            results[name] = measure(name, backends[name], args)
    judged = verdict(results)
    speed = {"python_loop_ms": python_loop_ms()}
    print()
    print(table(results))
    print(f"this machine's Python: {speed['python_loop_ms']:.2f} ms for bench.common's fixed loop")
    print(f"verdict {judged['verdict']}" + "".join(f"\n    {miss}" for miss in judged["misses"]))
    print(json.dumps(results | judged | speed))


# The targets (issue 23): decisions keep up with the database as clients grow.
SQLITE_TARGET_PER_S = 1000  # distinct decisions per second, one client
POSTGRES_TARGET_RATIO = 0.2  # distinct decisions over raw commits, 16 clients


def verdict(results: dict[str, Any]) -> dict[str, Any]:
    misses = []
    if "sqlite" in results and (rate := results["sqlite"]["distinct"][1]) < SQLITE_TARGET_PER_S:
        misses.append(f"sqlite: {rate:.0f} decisions/s < {SQLITE_TARGET_PER_S}")
    if "postgresql" in results:
        figures = results["postgresql"]
        ratio = figures["distinct"][16] / figures["raw"][16]
        if ratio < POSTGRES_TARGET_RATIO:
            misses.append(
                f"postgresql: decisions/raw commits at 16 clients {ratio:.2f} < {POSTGRES_TARGET_RATIO}"
            )
    return {"verdict": "FAIL" if misses else "PASS", "misses": misses}


if __name__ == "__main__":
    main()
