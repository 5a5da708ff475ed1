"""BEL coordination throughput on SQLite and PostgreSQL, measured in one run.

    python -m bench.bench_bel [--decisions 400] [--appends 1000] [--postgres URL]

(a) Claim/delegation decisions per second with 1, 4 and 16 concurrent clients (threads released
    together). Every partition is wanted by every client, so each one is claimed once (execute) and
    delegated to by the others: the contended case.
(b) Append throughput: registering N wants through the BEL (validation, key lock, head lock, event and
    projections in one transaction) against raw SQLAlchemy inserts of the same rows, one transaction
    per want. The ratio is the price of the log's guarantees.
"""

import argparse
import json
import os
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, insert, text

from databuild.bel import BuildEventLog
from databuild.bel import schema as s
from databuild.graph import Graph
from databuild.models import WantSpec

graph = Graph("bench-bel")
graph.job("x/{n}", "y/{n}")(lambda ctx, n: None)
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def reset(url: str) -> None:
    if url.startswith("sqlite"):
        return
    engine = create_engine(url)
    with engine.begin() as conn:
        s.metadata.drop_all(conn)
        conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
    engine.dispose()


def decisions_per_second(url: str, clients: int, total: int) -> float:
    reset(url)
    bel = BuildEventLog.create(url)
    per_client = max(total // clients, 1)
    barrier = threading.Barrier(clients + 1)

    def client(c: int) -> None:
        barrier.wait()
        for j in range(per_client):
            ref = f"x/{j}"
            want = WantSpec(ref=ref, data_timestamp=T0 + timedelta(minutes=c))
            bel.register_want(want)
            bel.decide(want.want_id, 1, graph.resolve(ref))

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    executed = len(bel.job_runs(limit=100_000))
    assert executed == per_client, f"{executed} job runs for {per_client} partitions"
    bel.dispose()
    return clients * per_client / elapsed


def append_ratio(url: str, count: int) -> dict[str, float]:
    reset(url)
    bel = BuildEventLog.create(url)
    specs = [WantSpec(ref=f"x/{i}", data_timestamp=T0) for i in range(count)]
    start = time.perf_counter()
    for spec in specs:
        bel.register_want(spec)
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
    for event, want, subscription in rows:
        with bel.writer.begin() as conn:
            conn.execute(insert(s.events).values(**event))
            conn.execute(insert(s.wants).values(**want))
            conn.execute(insert(s.subscriptions).values(**subscription))
    raw_s = time.perf_counter() - start
    bel.dispose()
    return {"bel_per_s": count / bel_s, "raw_per_s": count / raw_s, "ratio": bel_s / raw_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--decisions", type=int, default=400, help="decisions per client count")
    parser.add_argument("--appends", type=int, default=1000, help="wants appended for (b)")
    parser.add_argument(
        "--postgres",
        default=os.environ.get(
            "DATABUILD_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
        ),
        help="PostgreSQL URL (its BEL tables are dropped and recreated!)",
    )
    args = parser.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        backends = {"sqlite": f"sqlite:///{Path(tmp) / 'bench.sqlite'}", "postgresql": args.postgres}
        for name, base in backends.items():
            figures: dict[str, Any] = {"decisions_per_s": {}}
            for clients in (1, 4, 16):
                url = base if name == "postgresql" else base.replace(".sqlite", f"-{clients}.sqlite")
                figures["decisions_per_s"][clients] = decisions_per_second(url, clients, args.decisions)
            url = base if name == "postgresql" else base.replace(".sqlite", "-append.sqlite")
            figures["append"] = append_ratio(url, args.appends)
            results[name] = figures

    print(f"\n{'backend':<12}{'clients':>8}{'decisions/s':>14}")
    print("-" * 34)
    for name, figures in results.items():
        for clients, rate in figures["decisions_per_s"].items():
            print(f"{name:<12}{clients:>8}{rate:>14.0f}")
    print(f"\n{'backend':<12}{'BEL appends/s':>15}{'raw inserts/s':>15}{'ratio':>8}")
    print("-" * 50)
    for name, figures in results.items():
        a = figures["append"]
        print(f"{name:<12}{a['bel_per_s']:>15.0f}{a['raw_per_s']:>15.0f}{a['ratio']:>7.2f}x")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
