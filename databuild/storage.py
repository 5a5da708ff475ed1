"""Partition storage: jobs write to a private staging area; publishing moves each output into place
with an atomic rename. Availability itself is decided by the BEL, never by the file system."""

import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from databuild.models import attempt_name, parse_attempt_name
from databuild.refs import RESERVED_SEGMENT, storage_path

INSTANCE_MARKER = "_DATABUILD_INSTANCE"

AreaKind = Literal["staging", "submission"]


@dataclass(frozen=True)
class AttemptArea:
    """A folder one attempt of a job run wrote besides the partitions (see ``Storage.attempt_areas``)."""

    kind: AreaKind
    job_run_id: str
    attempt: int
    path: Path


@dataclass(frozen=True)
class Retired:
    """A partition a publish moved aside, in that publish's trash folder."""

    path: Path
    instance_id: str | None


class Storage:
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._staging = self.root / RESERVED_SEGMENT / "staging"
        self._trash = self.root / RESERVED_SEGMENT / "trash"
        self._submissions = self.root / RESERVED_SEGMENT / "submissions"

    def path(self, ref: str) -> Path:
        return storage_path(self.root, ref)

    def staging_area(self, job_run_id: str, attempt: int) -> Path:
        """A fresh, empty directory private to one attempt of one job run."""
        return _fresh(self._staging / attempt_name(job_run_id, attempt))

    def submission_area(self, job_run_id: str, attempt: int) -> Path:
        """A fresh directory for one attempt submitted as its own Spark application, on the same
        (shared) storage as the partitions, so its driver can reach it wherever it runs."""
        return _fresh(self._submissions / attempt_name(job_run_id, attempt))

    def staged(self, area: Path, ref: str) -> Path:
        return storage_path(area, ref)

    def publish(self, area: Path, instances: dict[str, str]) -> Path:
        """Move each staged output into place. Each rename is atomic, so a reader sees the old data or
        the new, never a mix; the BEL commit that follows is what makes the new instance live.

        Returns the trash folder holding the partitions it replaced: discard it once the BEL commit
        has superseded them. If the commit never happens, the storage sweep puts them back."""
        # A trash folder of its own: publishes run concurrently (threads of one worker, other workers),
        # and clearing a shared one would pull it from under another publish's rename.
        trash = self._own_trash()
        for ref, instance_id in instances.items():
            staged = self.staged(area, ref)
            (staged / INSTANCE_MARKER).write_text(instance_id)
            self._replace(ref, staged, trash)
        self.discard(area)
        return trash

    def _own_trash(self) -> Path:
        trash = self._trash / uuid.uuid4().hex
        trash.mkdir(parents=True)
        return trash

    def _replace(self, ref: str, source: Path, trash: Path) -> None:
        """Move ``source`` to the ref, moving what is there now into ``trash`` first."""
        final = self.path(ref)
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():
            os.rename(final, trash / uuid.uuid4().hex)
        os.rename(source, final)

    def instance_on_disk(self, ref: str) -> str | None:
        marker = self.path(ref) / INSTANCE_MARKER
        return marker.read_text() if marker.exists() else None

    def discard(self, area: Path) -> None:
        shutil.rmtree(area, ignore_errors=True)

    def attempt_areas(self) -> Iterator[AttemptArea]:
        """Staging and submission folders on disk, named ``<job_run_id>-<attempt>``."""
        parents: tuple[tuple[AreaKind, Path], ...] = (
            ("staging", self._staging),
            ("submission", self._submissions),
        )
        for kind, parent in parents:
            for path in _folders(parent):
                if (named := parse_attempt_name(path.name)) is not None:
                    yield AttemptArea(kind, *named, path)

    def publishes(self) -> list[Path]:
        """The trash folder of every publish that has not cleared it: in flight, or killed midway."""
        return list(_folders(self._trash))

    def retired(self, publish: Path) -> list[Retired]:
        found = []
        for path in _folders(publish):
            try:
                instance_id: str | None = (path / INSTANCE_MARKER).read_text().strip()
            except FileNotFoundError:  # not a partition DataBuild published, or gone meanwhile
                instance_id = None
            found.append(Retired(path, instance_id))
        return found

    def restore(self, retired: Retired, ref: str) -> bool:
        """Put a retired partition back at its ref, in place of whatever the ref holds. False if another
        sweep claimed it first, or the ref changed under it (it then waits for a later sweep).

        It first moves into a trash folder of its own, out of the one other sweeps may be reading or
        removing; that folder is young, so they leave it alone. Of sweeps running at once, only the one
        whose rename claims it goes on to touch the ref."""
        own = self._own_trash()
        claimed = own / "restoring"
        try:
            os.rename(retired.path, claimed)
        except OSError:
            own.rmdir()
            return False
        try:
            self._replace(ref, claimed, own)  # what the ref held was never committed: it goes with own
        except OSError:
            return False
        shutil.rmtree(own, ignore_errors=True)
        return True


def _fresh(area: Path) -> Path:
    shutil.rmtree(area, ignore_errors=True)
    area.mkdir(parents=True)
    return area


def _folders(parent: Path) -> Iterator[Path]:
    try:
        children = list(parent.iterdir())
    except FileNotFoundError:
        return
    yield from (child for child in sorted(children) if child.is_dir())
