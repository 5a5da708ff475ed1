"""A job that fills the disk (a real 16 MB tmpfs as the storage root): its failure says "No space left on
device" first, not 11,000 characters into a Java trace, and the worker's JVM lets go of the files the
failed write held, so the space comes back without a restart. Needs root, to mount the tmpfs."""

import asyncio
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from databuild.models import JobRunState, WantState
from tests.helpers import until

pytestmark = pytest.mark.slow
SIZE_MB = 16


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE_MB}m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a {SIZE_MB} MB tmpfs here (it needs root): {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def written_files(mount: Path) -> list[Path]:
    return [p for p in mount.rglob("*") if p.is_file() and "part-" in p.name]


def used_mb(mount: Path) -> float:
    return shutil.disk_usage(mount).used / 2**20


async def test_a_full_disk_is_said_first_and_its_space_comes_back(small_disk: Path, make_stack) -> None:
    stack = await make_stack(graph="tests.graphs:filler", storage_root=small_disk.as_uri(), job_attempts=1)
    spec = await stack.db.want("fill/1")
    done = await asyncio.wait_for(stack.db.wait(spec), timeout=300)
    assert done.state is WantState.failed
    (run,) = stack.bel.job_runs.query(job_label="fill", limit=5)
    assert run.state is JobRunState.failed
    reason = run.reason or ""
    assert reason.startswith("SparkJobError: No space left on device: the storage"), reason[:300]
    assert len(reason) < 2_500  # the deepest cause and the call, not the 15 KB trace (that is in the log)
    # The failed write's files are gone from the folder (Spark aborted it) and, once the JVM lets go of
    # them, from the disk: no restart needed. gc has nothing to wait for.
    leftovers = written_files(small_disk)
    assert leftovers == [], leftovers[:3]
    await until(lambda: used_mb(small_disk) < SIZE_MB / 4, "the failed write's space came back", seconds=30)
    assert os.statvfs(small_disk).f_bavail > 0
