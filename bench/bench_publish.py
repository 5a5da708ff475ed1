"""Publish cost against partition size: the old rename publish against today's commit-only publish,
measured in one run.

    python -m bench.bench_publish [--files 1,8,64] [--file-kb 256] [--rounds 5]

For each partition size (N files of K KiB):
(a) rename publish, as the old layout did it: mark the staged folder, move it to the ref's folder,
    then the BEL commit. On a local disk the move is one directory rename; on an object store it is a
    copy and a delete per object (measured through pyarrow against moto's S3 server on loopback);
(b) commit-only publish, as DataBuild does now: the BEL transaction that records the instances (the
    data is already in its instance location). It does not read or move the data, so it must not
    grow with the size.

Prints the median milliseconds of each and the ratio old / new per size.
"""

import argparse
import json
import logging
import os
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from moto.server import ThreadedMotoServer
from pyarrow import fs

from databuild.bel import BuildEventLog
from databuild.domain.decisions import Execute
from databuild.graph import Graph
from databuild.models import InstanceRef, WantSpec
from databuild.storage import Storage
from databuild.testing import free_port

graph = Graph("bench-publish")
graph.job("p/{n}")(lambda ctx, n: None)


def fill(storage: Storage, key: str, files: int, payload: bytes) -> None:
    for i in range(files):
        storage.write_text(f"{key}/part-{i:05d}.parquet", payload.decode("latin-1"))


def claimed(bel: BuildEventLog) -> tuple[str, InstanceRef]:
    ref = f"p/{uuid.uuid4().hex[:12]}"
    want = WantSpec(ref=ref, data_timestamp=datetime(2024, 1, 1, tzinfo=UTC), source="cli")
    bel.register_want(want)
    decision = bel.decide(want.want_id, 1, graph.resolve(ref))
    assert isinstance(decision, Execute), decision
    instance = InstanceRef(ref=ref, instance_id=str(uuid.uuid4()))
    bel.start_job_run(decision.job_run_id, 1, "bench", [instance])
    return decision.job_run_id, instance


def rename_publish(bel: BuildEventLog, storage: Storage, files: int, payload: bytes) -> float:
    """The old publish: mark the staged folder, move it over the ref's folder, then the BEL commit."""
    job_run_id, instance = claimed(bel)
    staged = f"_databuild/staging/{job_run_id}-1/{instance.ref}"
    fill(storage, staged, files, payload)
    started = time.perf_counter()
    storage.write_text(f"{staged}/_DATABUILD_INSTANCE", instance.instance_id or "")
    storage.move(staged, instance.ref)
    bel.succeed_job_run(job_run_id, [], [instance], 1)
    return time.perf_counter() - started


def commit_publish(bel: BuildEventLog, storage: Storage, files: int, payload: bytes) -> float:
    """Today's publish: the job wrote straight into the instance location; publishing is the BEL
    commit alone."""
    job_run_id, instance = claimed(bel)
    fill(storage, Storage.instance_key(instance.ref, instance.instance_id or ""), files, payload)
    location = {instance.ref: storage.location(instance.ref, instance.instance_id or "")}
    started = time.perf_counter()
    bel.succeed_job_run(job_run_id, [], [instance], 1, location)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", default="1,8,64", help="partition sizes, in files")
    parser.add_argument("--file-kb", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sizes = [int(n) for n in args.files.split(",")]
    payload = os.urandom(args.file_kb * 1024)

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    os.environ.update(
        AWS_ENDPOINT_URL=endpoint,
        AWS_ACCESS_KEY_ID="k",
        AWS_SECRET_ACCESS_KEY="s",
        AWS_DEFAULT_REGION="us-east-1",
    )
    fs.S3FileSystem(endpoint_override=endpoint, allow_bucket_creation=True).create_dir("bench")
    rows = []
    try:
        with tempfile.TemporaryDirectory() as home:
            bel = BuildEventLog.create(f"sqlite:///{Path(home) / 'bel.sqlite'}")
            stores = {"local": Storage(Path(home) / "lake"), "s3": Storage("s3a://bench/lake")}
            for files in sizes:
                row: dict[str, float | int | str] = {"files": files, "mib": files * args.file_kb / 1024}
                for name, storage in stores.items():
                    renames = [rename_publish(bel, storage, files, payload) for _ in range(args.rounds)]
                    commits = [commit_publish(bel, storage, files, payload) for _ in range(args.rounds)]
                    row[f"{name}_rename_ms"] = statistics.median(renames) * 1000
                    row[f"{name}_commit_ms"] = statistics.median(commits) * 1000
                    row[f"{name}_ratio"] = row[f"{name}_rename_ms"] / row[f"{name}_commit_ms"]  # type: ignore[operator]
                rows.append(row)
            bel.dispose()
    finally:
        server.stop()

    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"publish cost by partition size ({args.file_kb} KiB files, median of {args.rounds})")
    print(
        f"{'files':>6} {'MiB':>7} | {'local rename':>12} {'commit':>8} {'ratio':>6} "
        f"| {'s3 rename':>10} {'commit':>8} {'ratio':>7}"
    )
    for r in rows:
        print(
            f"{r['files']:>6} {r['mib']:>7.1f} | {r['local_rename_ms']:>10.1f}ms "
            f"{r['local_commit_ms']:>6.1f}ms "
            f"{r['local_ratio']:>5.2f}x | {r['s3_rename_ms']:>8.1f}ms "
            f"{r['s3_commit_ms']:>6.1f}ms {r['s3_ratio']:>6.1f}x"
        )
    growth = rows[-1]["s3_commit_ms"] / rows[0]["s3_commit_ms"]  # type: ignore[operator]
    print(
        f"commit-only publish from {rows[0]['files']} to {rows[-1]['files']} files: {growth:.2f}x (flat is ~1x)"
    )


if __name__ == "__main__":
    main()
