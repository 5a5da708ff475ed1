"""Partition storage by URI. Each build writes each output straight into its own instance location,
``<root>/<ref>/~<instance uuid>``, and nothing there is ever moved or overwritten: the BEL commit that
calls an instance live is the publish. ``~`` is outside the ref grammar, so an instance location never
equals another ref's path, and Spark does not take it for a hidden folder (``_`` or ``.``).

Spark reads and writes instance locations through its own Hadoop file systems; every other operation
DataBuild performs on the storage (listing for garbage collection, deleting, the submit executor's
files, logs) goes through this class, on ``pyarrow.fs``: the local file system, S3 (``s3a://``, as Spark
spells it), GCS, Azure and HDFS alike."""

import contextlib
import functools
import os
import posixpath
import re
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar
from urllib.parse import urlsplit, urlunsplit

from pyarrow import fs

from databuild.errors import InvalidInputError, StorageSetupError, StorageUnavailableError
from databuild.jobs.attempts import attempt_name, parse_attempt_name
from databuild.models import Instance
from databuild.refs import ARROW_SCHEMES, RESERVED_SEGMENT, ref_uri, storage_uri, validate_ref

INSTANCE_PREFIX = "~"
LOGS = f"{RESERVED_SEGMENT}/logs"
# pyarrow retries a GCS it cannot reach for 15 minutes by default: a command would seem to hang.
GCS_RETRY_SECONDS = 15
FOOTER_THREADS = 16  # Parquet footers of one instance read at once
_INSTANCE_SEGMENT = re.compile(r"~([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})")
# The folder of one attempt's partitioned write (``SparkJobContext.write_partitioned``): ``~<job run>-<attempt>``.
_WRITE_SEGMENT = re.compile(r"~(jr-[0-9a-f]{16})-([0-9]+)")
# What Spark escapes in a partition folder's value (its ExternalCatalogUtils.escapePathName), as %XX.
_SPARK_ESCAPED = frozenset("\"#%'*/:=?\\{[]^\x7f") | frozenset(chr(c) for c in range(1, 32))


@dataclass(frozen=True)
class StoredInstance:
    """An instance location found on the storage, with the newest modification of anything in it."""

    ref: str
    instance_id: str
    modified: datetime | None


@dataclass(frozen=True)
class StoredWrite:
    """The folder of one attempt's partitioned write found on the storage (each partition a sub-folder),
    with the newest modification of anything in it."""

    key: str
    job_run_id: str
    attempt: int
    modified: datetime | None


@dataclass(frozen=True)
class LogFolder:
    """The logs of one job run's attempts, with the newest modification of any of them."""

    job_run_id: str
    key: str
    modified: datetime | None


@dataclass(frozen=True)
class SubmissionArea:
    """The folder of one attempt submitted as its own Spark application (request, progress, result,
    log), kept under the reserved segment."""

    job_run_id: str
    attempt: int
    key: str
    modified: datetime | None


Listing = list[tuple[str, datetime | None]]  # keys relative to the root, with their modification times
R = TypeVar("R")
P = ParamSpec("P")


def _reached(method: "Callable[Concatenate[Storage, P], R]") -> "Callable[Concatenate[Storage, P], R]":
    """A method whose failures to use the store are ``Storage._reaching``'s one line."""

    @functools.wraps(method)
    def reaching(self: "Storage", /, *args: P.args, **kwargs: P.kwargs) -> R:
        with self._reaching():
            return method(self, *args, **kwargs)

    return reaching


class Storage:
    def __init__(self, root: str | Path) -> None:
        self.uri = storage_uri(root)
        parts = urlsplit(self.uri)
        query = f"retry_limit_seconds={GCS_RETRY_SECONDS}" if parts.scheme == "gs" else ""
        arrow = urlunsplit(parts._replace(scheme=ARROW_SCHEMES[parts.scheme], query=query, fragment=""))
        try:
            self._fs, base = fs.FileSystem.from_uri(arrow)
        except Exception as error:  # pyarrow raises several types for a store it cannot reach or build
            raise InvalidInputError(f"cannot open storage {self.uri}: {error}") from None
        self._base = base.rstrip("/")

    @contextlib.contextmanager
    def _reaching(self) -> Iterator[None]:
        """What the file system raises for a store it cannot use, as one line naming the store and the
        fix; ``FileNotFoundError`` stays as it is (callers ask about what may be missing)."""
        try:
            yield
        except FileNotFoundError:
            raise
        except (StorageUnavailableError, StorageSetupError):
            raise
        except OSError as error:
            raise self._unusable(error) from error

    def _unusable(self, error: OSError) -> StorageSetupError | StorageUnavailableError:
        reason = os.strerror(error.errno) if error.errno else str(error).strip().split("\n")[0][:300]
        if isinstance(self._fs, fs.LocalFileSystem):
            return StorageSetupError(
                f"cannot use the storage at {self.uri}: {reason}; set DATABUILD_STORAGE_ROOT to a folder "
                "DataBuild may write"
            )
        return StorageUnavailableError(
            f"cannot reach the storage at {self.uri}: {reason}; check that it is up and that its "
            "endpoint and credentials are right, then repeat"
        )

    def probe(self) -> None:
        """Write and remove a file under the reserved segment: a worker refuses, when it starts and in one
        line, a root it cannot use, instead of failing each job at its first output."""
        key = f"{RESERVED_SEGMENT}/probe-{uuid.uuid4().hex}"
        try:
            self.write_text(key, "")
        except FileNotFoundError as error:  # the root's folders cannot be made
            raise self._unusable(error) from error
        self.delete(key)

    # Locations ---------------------------------------------------------------------------------
    def uri_of(self, key: str) -> str:
        """The URI of ``key`` (relative to the root), as Spark and messages name it."""
        return f"{self.uri.rstrip('/')}/{key}"

    def location(self, ref: str, instance_id: str) -> str:
        """Where one instance of ``ref`` lives, as a URI Spark reads and writes."""
        return self.uri_of(self.instance_key(ref, instance_id))

    def ref_location(self, ref: str) -> str:
        return ref_uri(self.uri, ref)

    def instance_location(self, instance: Instance) -> str:
        """Where an instance the BEL knows keeps its data: its own location if DataBuild built it; the
        announced location, or else the ref's own folder, if it came from outside."""
        if instance.location:
            return instance.location
        if instance.external:
            return self.ref_location(instance.ref)
        return self.location(instance.ref, instance.instance_id)

    @staticmethod
    def instance_key(ref: str, instance_id: str) -> str:
        uuid.UUID(instance_id)  # an instance id is a UUID; anything else could name another path
        return f"{validate_ref(ref)}/{INSTANCE_PREFIX}{instance_id}"

    def key_of(self, instance: Instance) -> str | None:
        """Where an instance's data is, relative to the root (None: outside it, an external location)."""
        location = self.instance_location(instance)
        root = f"{self.uri.rstrip('/')}/"
        return location.removeprefix(root) if location.startswith(root) else None

    @staticmethod
    def write_key(prefix: str, job_run_id: str, attempt: int) -> str:
        """The folder of one attempt's partitioned write of the outputs under ``prefix`` (a pattern's
        leading segments): each partition is a sub-folder, as Spark's ``partitionBy`` names it."""
        folder = f"{INSTANCE_PREFIX}{attempt_name(job_run_id, attempt)}"
        if not _WRITE_SEGMENT.fullmatch(folder):
            raise InvalidInputError(f"{job_run_id!r} is not a job run id")
        return f"{validate_ref(prefix)}/{folder}" if prefix else folder

    @staticmethod
    def partition_folder(columns: dict[str, str]) -> str:
        """The sub-folder Spark's ``partitionBy`` writes for these column values, in their order:
        ``date=2024-01-01``, escaped as Spark escapes them."""
        return "/".join(f"{_spark_escaped(name)}={_spark_escaped(value)}" for name, value in columns.items())

    # Files, by key relative to the root ------------------------------------------------------------
    def _path(self, key: str) -> str:
        clean = posixpath.normpath(key)
        if clean.startswith(("/", "..")) or clean == ".":
            raise InvalidInputError(f"storage key {key!r} is not inside the storage root")
        return f"{self._base}/{clean}"

    @_reached
    def write_text(self, key: str, text: str) -> None:
        """Readers see the old content or the new, never a part (an object store's put is atomic;
        locally the file is written aside and moved into place)."""
        path = self._path(key)
        self._fs.create_dir(posixpath.dirname(path), recursive=True)
        if isinstance(self._fs, fs.LocalFileSystem):
            partial = f"{posixpath.dirname(path)}/.{posixpath.basename(path)}.{uuid.uuid4().hex}"
            with self._fs.open_output_stream(partial) as out:
                out.write(text.encode())
            self._fs.move(partial, path)
        else:
            with self._fs.open_output_stream(path) as out:
                out.write(text.encode())

    @_reached
    def read_text(self, key: str) -> str:
        """Raises ``FileNotFoundError`` when there is nothing at ``key``."""
        with self._fs.open_input_stream(self._path(key)) as stream:  # pyarrow raises FileNotFoundError
            return bytes(stream.read()).decode(errors="replace")

    @_reached
    def exists(self, key: str) -> bool:
        return bool(self._fs.get_file_info(self._path(key)).type != fs.FileType.NotFound)

    @_reached
    def delete(self, key: str) -> None:
        """Remove a file or a folder and everything in it; nothing there is not an error."""
        path = self._path(key)
        kind = self._fs.get_file_info(path).type
        if kind == fs.FileType.Directory:
            self._fs.delete_dir(path)
        elif kind == fs.FileType.File:
            self._fs.delete_file(path)

    def files(self, key: str = "", *, folders: bool = False) -> Iterator[tuple[str, datetime | None]]:
        """Every file (and with ``folders``, every folder) under ``key``, recursively, as keys relative
        to the root, with its modification time. One paged listing on an object store."""
        base = self._path(key) if key else self._base
        selector = fs.FileSelector(base, allow_not_found=True, recursive=True)
        prefix = f"{self._base}/"
        with self._reaching():
            found = self._fs.get_file_info(selector)
        for info in found:
            if info.type == fs.FileType.File or (folders and info.type == fs.FileType.Directory):
                yield info.path.removeprefix(prefix), _utc(info.mtime)

    # What garbage collection looks at --------------------------------------------------------------
    def instances(self, listed: Listing | None = None) -> list[StoredInstance]:
        """Every instance location on the storage (outside the reserved segment), also one holding only
        empty folders (a write killed before its first file). ``listed``: ``files(folders=True)``, if the
        caller has it already."""

        def location(key: str) -> str | None:  # "<ref>/~<uuid>", the instance folder holding key
            segments = key.split("/")
            if segments[0] == RESERVED_SEGMENT:
                return None
            depth = next((d for d, s in enumerate(segments) if d and _INSTANCE_SEGMENT.fullmatch(s)), 0)
            return "/".join(segments[: depth + 1]) if depth else None

        found = []
        for folder, modified in _newest_by(
            location, self.files(folders=True) if listed is None else listed
        ).items():
            ref, _, segment = folder.rpartition("/")
            found.append(StoredInstance(ref, segment.removeprefix(INSTANCE_PREFIX), modified))
        return found

    def partitioned_writes(self, listed: Listing | None = None) -> list[StoredWrite]:
        """Every folder of an attempt's partitioned write on the storage (outside the reserved segment)."""

        def write(key: str) -> str | None:  # "<prefix>/~<job run>-<attempt>", the write holding key
            segments = key.split("/")
            if segments[0] == RESERVED_SEGMENT:
                return None
            depth = next((d for d, s in enumerate(segments) if _WRITE_SEGMENT.fullmatch(s)), None)
            return None if depth is None else "/".join(segments[: depth + 1])

        found = []
        for key, modified in _newest_by(
            write, self.files(folders=True) if listed is None else listed
        ).items():
            named = _WRITE_SEGMENT.fullmatch(key.rsplit("/", 1)[-1])
            assert named is not None
            found.append(StoredWrite(key, named[1], int(named[2]), modified))
        return found

    def submission_key(self, job_run_id: str, attempt: int) -> str:
        return f"{RESERVED_SEGMENT}/submissions/{attempt_name(job_run_id, attempt)}"

    def submission_areas(self) -> list[SubmissionArea]:
        def area(key: str) -> str:  # "_databuild/submissions/<job run>-<attempt>"
            return "/".join(key.split("/")[:3])

        found = []
        for key, modified in _newest_by(area, self.files(f"{RESERVED_SEGMENT}/submissions")).items():
            named = parse_attempt_name(key.rsplit("/", 1)[-1])
            if named is not None:
                found.append(SubmissionArea(*named, key=key, modified=modified))
        return found

    def log_key(self, job_run_id: str, attempt: int) -> str:
        """Where one attempt's log is kept: beside the submissions, under the reserved segment, one folder
        per job run so that garbage collection removes a run's logs together."""
        if not job_run_id or "/" in job_run_id or job_run_id in (".", ".."):
            raise InvalidInputError(f"{job_run_id!r} is not a job run id")
        return f"{LOGS}/{job_run_id}/{attempt}.log"

    def log_folders(self) -> list[LogFolder]:
        def folder(key: str) -> str:  # "_databuild/logs/<job run>"
            return "/".join(key.split("/")[:3])

        return [
            LogFolder(key.rsplit("/", 1)[-1], key, modified)
            for key, modified in _newest_by(folder, self.files(LOGS)).items()
        ]

    @_reached
    def parquet_summary(self, key: str) -> tuple[int, int, int]:
        """Rows, bytes and files of the Parquet data under ``key``: one listing, then each file's footer
        (a ranged read of its end, on parallel threads); no data is read."""
        return self.summary_of(self._data_files(self._path(key)))

    @_reached
    def partition_files(self, key: str, *, depth: int) -> dict[str, list[fs.FileInfo]]:
        """The data files of each partition sub-folder (``depth`` segments, ``date=2024-01-01``) of a
        partitioned write at ``key``, from one listing of the write; ``summary_of`` summarises each."""
        base = self._path(key)
        found: dict[str, list[fs.FileInfo]] = {}
        for info in self._data_files(base, allow_not_found=True):
            parts = info.path[len(base) + 1 :].split("/")
            if len(parts) > depth:
                found.setdefault("/".join(parts[:depth]), []).append(info)
        return found

    @_reached
    def is_flat(self, key: str) -> bool:
        """Whether the folder at ``key`` holds data files, all directly in it (as DataBuild writes an
        instance), so that Spark reads nothing from a sub-folder of it."""
        base = self._path(key)
        try:
            data = self._data_files(base)
        except (FileNotFoundError, NotADirectoryError):
            return False
        return bool(data) and all("/" not in info.path[len(base) + 1 :] for info in data)

    @_reached
    def summary_of(self, files: list[fs.FileInfo]) -> tuple[int, int, int]:
        """Rows, bytes and files of these Parquet files, from their footers: each file's metadata read
        alone (a dataset over them inferred a schema first, 0.5 to 2 ms for one small file, 20 times the
        footer's read), several files on parallel threads, as an object store's reads mostly wait."""
        import pyarrow.parquet as pq

        def rows_of(info: fs.FileInfo) -> int:
            return int(pq.read_metadata(info.path, filesystem=self._fs).num_rows)

        if len(files) <= 1:
            rows = sum(map(rows_of, files))
        else:
            with ThreadPoolExecutor(min(len(files), FOOTER_THREADS)) as pool:
                rows = sum(pool.map(rows_of, files))
        return rows, sum(info.size or 0 for info in files), len(files)

    def _data_files(self, base: str, *, allow_not_found: bool = False) -> list[fs.FileInfo]:
        """The files under ``base`` that are data: files and folders whose names start with ``_`` or ``.``
        (``_SUCCESS``, checksums, leftovers of a commit) are not."""
        selector = fs.FileSelector(base, recursive=True, allow_not_found=allow_not_found)
        return [
            info
            for info in self._fs.get_file_info(selector)
            if info.type == fs.FileType.File
            and not any(part.startswith(("_", ".")) for part in info.path[len(base) :].split("/"))
        ]

    @_reached
    def data_files_at(self, location: str) -> list[str]:
        """The URIs of the data files of the instance at ``location`` (under the root), in order."""
        root = f"{self.uri.rstrip('/')}/"
        if not location.startswith(root):
            raise InvalidInputError(f"{location} is not under the storage root {self.uri}")
        base = self._path(location.removeprefix(root))
        return sorted(self.uri_of(info.path[len(self._base) + 1 :]) for info in self._data_files(base))

    def arrow_path(self, uri: str) -> str:
        """The path of a URI under the root, as the storage's file system (``filesystem``) names it."""
        return self._path(uri.removeprefix(f"{self.uri.rstrip('/')}/"))

    @property
    def filesystem(self) -> fs.FileSystem:
        return self._fs

    def local_path(self, key: str) -> Path | None:
        """The local path of ``key`` when the storage is the local file system (tests, benchmarks)."""
        if not isinstance(self._fs, fs.LocalFileSystem):
            return None
        return Path(self._path(key))


def _newest_by(
    group: Callable[[str], str | None], files: Iterable[tuple[str, datetime | None]]
) -> dict[str, datetime | None]:
    """The newest modification time of the files in each group (None: not in any), by group, sorted."""
    newest: dict[str, datetime | None] = {}
    for key, modified in files:
        name = group(key)
        if name is not None:
            before = newest.get(name)
            newest[name] = modified if before is None or (modified and modified > before) else before
    return dict(sorted(newest.items()))


def _spark_escaped(text: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _SPARK_ESCAPED else c for c in text)


def _utc(moment: datetime | None) -> datetime | None:
    if moment is None:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
