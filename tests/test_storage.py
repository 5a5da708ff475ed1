"""Partition storage on a real file system: staging, atomic publish, replacement."""

import threading
import uuid
from pathlib import Path

from databuild.refs import RESERVED_SEGMENT
from databuild.storage import Storage


def stage(storage: Storage, job_run_id: str, ref: str, content: str) -> Path:
    area = storage.staging_area(job_run_id, 1)
    staged = storage.staged(area, ref)
    staged.mkdir(parents=True)
    (staged / "part-0.parquet").write_text(content)
    return area


def test_publish_replaces_a_partition_and_keeps_the_old_one_until_discarded(tmp_path: Path) -> None:
    storage = Storage(tmp_path / "lake")
    old, new = str(uuid.uuid4()), str(uuid.uuid4())
    storage.discard(
        storage.publish(stage(storage, "run-old", "daily/2024-01-01", "old"), {"daily/2024-01-01": old})
    )
    replaced = storage.publish(
        stage(storage, "run-new", "daily/2024-01-01", "new"), {"daily/2024-01-01": new}
    )
    assert storage.instance_on_disk("daily/2024-01-01") == new
    assert (storage.path("daily/2024-01-01") / "part-0.parquet").read_text() == "new"
    # The replaced instance waits in the publish's trash until the BEL commit supersedes it.
    assert [r.instance_id for r in storage.retired(replaced)] == [old]
    storage.discard(replaced)
    reserved = storage.root / RESERVED_SEGMENT
    assert [p for p in reserved.rglob("*") if p.is_file()] == []


def test_concurrent_publishes_never_trip_over_each_other(tmp_path: Path) -> None:
    """Jobs publish from many threads (and workers) at once; each replacement moves the old data to a
    trash folder, and one publish clearing its trash must not pull it from under another's rename."""
    storage = Storage(tmp_path / "lake")
    errors: list[Exception] = []
    start = threading.Barrier(8)

    def publish_repeatedly(worker: int) -> None:
        start.wait()
        try:
            for round_ in range(40):
                ref = f"t{worker}/p"
                area = stage(storage, f"run-{worker}-{round_}", ref, f"{worker}:{round_}")
                storage.discard(storage.publish(area, {ref: f"{worker}-{round_}"}))
        except Exception as error:  # reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=publish_repeatedly, args=(worker,)) for worker in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    for worker in range(8):
        assert storage.instance_on_disk(f"t{worker}/p") == f"{worker}-39"
        assert (storage.path(f"t{worker}/p") / "part-0.parquet").read_text() == f"{worker}:39"
    assert [p for p in (storage.root / RESERVED_SEGMENT).rglob("*") if p.is_file()] == []
