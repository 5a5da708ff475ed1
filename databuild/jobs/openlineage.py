"""OpenLineage export of job runs (off unless ``DATABUILD_OPENLINEAGE_URL`` is set).

Every job run that executes is reported as one OpenLineage run: ``START`` when an attempt starts,
then one final event: ``COMPLETE`` when it succeeded, ``FAIL`` when it failed past its retry policy,
and ``ABORT`` for a dep-miss. A dep-miss is a normal DataBuild result, not an error: the job found
missing inputs, stopped without writing anything, and will run again (as a new job run) once they
are built, so the run neither completed nor failed. Job runs that never execute (delegated or
skipped) emit nothing.

Datasets name the data where users find it, not one dataset per partition path (which floods lineage
servers, OpenLineage #3306): a ref whose pattern is a catalog table is dataset ``<database>.<table>`` in
the catalog's namespace (``hive://host:port`` of a metastore service, ``hive://embedded`` for the
embedded one); any other ref is its output pattern under the storage root (namespace ``file`` or
``scheme://authority``, name ``<root path>/<pattern>``, e.g. ``/data/lake/raw/{date}/part``). The
partition is in the custom ``databuild`` dataset facet (ref, placeholder values, instance UUID), and the
instance UUID is also the standard ``version`` facet; the outputs on ``START`` (and on a final event
that wrote nothing) have no instance yet. Job namespace is configurable (default
``databuild``), job name = job label. The OpenLineage run id is a UUID derived from the job run id,
so every event of one job run, across attempts, shares it.

Emitting never fails or slows a job: events are built on the caller's thread and handed to one
sender thread through a bounded queue, so a slow or unreachable HTTP endpoint (and the client's
retries) costs a job nothing. Errors are logged as warnings and the event is dropped; events still
queued when a worker is killed are lost (lineage is best effort; the BEL stays the record).

The file transport (the client's ``FileTransport`` with ``append=True``) appends one JSON event per
line to a single file. It opens the file per event and writes through Python's buffered I/O, which
by itself promises nothing about concurrent writers; here the single sender thread is the only
writer in a worker process, so lines are whole and in order. Several worker processes appending to
one file are not coordinated: give each its own file, or use HTTP.
"""

import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from urllib.request import url2pathname

import attr
from openlineage.client.client import OpenLineageClient
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import (
    DatasetFacet,
    InputDatasetFacet,
    JobFacet,
    RunFacet,
    data_quality_assertions_dataset,
    dataset_version_dataset,
    error_message_run,
    job_type_job,
    symlinks_dataset,
)
from openlineage.client.transport.file import FileConfig, FileTransport
from openlineage.client.transport.http import ApiKeyTokenProvider, HttpConfig, HttpTransport, TokenProvider
from openlineage.client.transport.http_common import DEFAULT_RETRY_CONFIG
from openlineage.client.transport.transport import Transport

from databuild import __version__
from databuild.config import Settings
from databuild.domain.cost import NO_COST, RunCost
from databuild.errors import InvalidInputError
from databuild.graph import Graph
from databuild.jobs.tables.spec import TableSpec, graph_tables, table_folder
from databuild.models import CheckResult, CheckSeverity, InstanceRef, JobRun, JobRunState
from databuild.refs import storage_uri, validate_ref

log = logging.getLogger(__name__)

# URIs naming DataBuild as the producer of events and facets, and the schema of its custom facet.
PRODUCER = f"urn:databuild:{__version__}"
FACET_SCHEMA_URL = "urn:databuild:openlineage:facets:1-0-0:DataBuildRunFacet"
COST_FACET_SCHEMA_URL = "urn:databuild:openlineage:facets:1-0-0:DataBuildCostRunFacet"
DATASET_FACET_SCHEMA_URL = "urn:databuild:openlineage:facets:1-0-0:DataBuildDatasetFacet"
RUN_ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "urn:databuild:job-run")
HTTP_ENDPOINT = "api/v1/lineage"
HTTP_TIMEOUT_SECONDS = 5.0
# The client's retry policy (POST retried on connection errors and 5xx), shortened: the sender thread
# must not fall far behind while an endpoint is down.
HTTP_RETRY = {**DEFAULT_RETRY_CONFIG, "total": 3, "connect": 3, "read": 3, "backoff_factor": 0.5}
QUEUE_SIZE = 10_000

FINAL_EVENT = {
    JobRunState.succeeded: RunState.COMPLETE,
    JobRunState.dep_miss: RunState.ABORT,
    JobRunState.failed: RunState.FAIL,
    JobRunState.cancelled: RunState.ABORT,
}


@attr.define
class DataBuildDatasetFacet(DatasetFacet):
    """Custom dataset facet ``databuild``: which partition of the dataset, and which instance of it."""

    ref: str
    partition: dict[str, str]
    instance_id: str | None = None
    # An output's check results, as the standard facet's assertions: that facet is for inputs (what a
    # run found of the data it read), and an output's checks are what DataBuild found of what it wrote.
    checks: list[data_quality_assertions_dataset.Assertion] | None = None

    @staticmethod
    def _get_schema() -> str:
        return DATASET_FACET_SCHEMA_URL


class DatasetNaming:
    """Names a ref's dataset: its Hive table, its Iceberg table's location (with the table's name as a
    symlink), or its output pattern under the storage root."""

    def __init__(self, settings: Settings, graph: Graph | None) -> None:
        self.root = storage_uri(settings.storage_root)
        self.graph = graph
        found = graph_tables(graph, settings.table_format) if graph is not None else {}
        self.tables = {
            pattern: spec
            for pattern, spec in found.items()
            if isinstance(spec, TableSpec) and (spec.format == "iceberg" or settings.catalog != "none")
        }
        self.database = settings.catalog_database
        metastore = urlsplit(settings.catalog)
        self.catalog_namespace = f"hive://{metastore.netloc}" if metastore.netloc else "hive://embedded"
        iceberg = urlsplit(
            settings.iceberg_catalog.get_secret_value() or settings.database_url.get_secret_value()
        )
        # The catalog as a namespace: its scheme and authority, never a password (as the Hive metastore's).
        self.iceberg_namespace = f"{iceberg.scheme.split('+')[0]}://{iceberg.hostname or 'localhost'}" + (
            f":{iceberg.port}" if iceberg.port else ""
        )

    def symlink(self, ref: str) -> tuple[str, str] | None:
        """The catalog name of an Iceberg table's dataset (namespace, ``<namespace>.<table>``), if ref's
        pattern is one: its dataset is named by its location, as Spark's OpenLineage integration names it."""
        pattern = self.graph.pattern_for(ref) if self.graph is not None else None
        table = self.tables.get(pattern.text) if pattern is not None else None
        if isinstance(table, TableSpec) and table.format == "iceberg":
            return self.iceberg_namespace, f"{self.database}.{table.name}"
        return None

    def __call__(self, ref: str) -> tuple[str, str, dict[str, str]]:
        """(namespace, name, the partition's placeholder values)."""
        pattern = self.graph.pattern_for(ref) if self.graph is not None else None
        if pattern is None:
            return (*self._path(validate_ref(ref)), {})
        values = pattern.match(ref) or {}
        table = self.tables.get(pattern.text)
        if isinstance(table, TableSpec) and table.format == "iceberg":
            return (*self._path(table_folder(self.database, table.name)), values)
        if isinstance(table, TableSpec):
            return self.catalog_namespace, f"{self.database}.{table.name}", values
        return (*self._path(pattern.text), values)

    def _path(self, tail: str) -> tuple[str, str]:
        """OpenLineage's naming of a path: namespace ``file`` or ``scheme://authority``, name the path."""
        parts = urlsplit(f"{self.root.rstrip('/')}/{tail}")
        return (f"{parts.scheme}://{parts.netloc}" if parts.netloc else parts.scheme), parts.path


@attr.define
class DataBuildRunFacet(RunFacet):
    """Custom run facet ``databuild``: how to find this run in DataBuild (`databuild job-runs show`)."""

    job_run_id: str
    attempt: int
    want_id: str | None = None

    @staticmethod
    def _get_schema() -> str:
        return FACET_SCHEMA_URL


@attr.define
class DataBuildCostRunFacet(RunFacet):
    """Custom run facet ``databuildCost``: what the run's attempts cost, from Spark's accounting of their
    job groups (docs/cost.md). ``known`` false: an executor could not report it (Spark Connect), and the
    figures count only the attempts that could."""

    known: bool
    attempts: int
    task_seconds: float
    cpu_seconds: float
    input_bytes: int
    output_bytes: int
    shuffle_read_bytes: int
    shuffle_write_bytes: int
    tasks: int
    unknown_reason: str | None = None

    @staticmethod
    def _get_schema() -> str:
        return COST_FACET_SCHEMA_URL

    @classmethod
    def of(cls, cost: RunCost) -> "DataBuildCostRunFacet":
        total = NO_COST  # of the attempts whose cost is known (all of them when ``known``)
        for a in cost.attempts:
            total = total if a.cost is None else total.plus(a.cost)
        return cls(
            known=cost.total is not None,
            attempts=len(cost.attempts),
            task_seconds=total.task_seconds,
            cpu_seconds=total.cpu_seconds,
            input_bytes=total.input_bytes,
            output_bytes=total.output_bytes,
            shuffle_read_bytes=total.shuffle_read_bytes,
            shuffle_write_bytes=total.shuffle_write_bytes,
            tasks=total.tasks,
            unknown_reason=cost.unknown_reason,
            producer=PRODUCER,
        )


def assertions_facet(checks: Sequence[CheckResult]) -> InputDatasetFacet:
    """The standard ``dataQualityAssertions`` input facet of the check results of an instance a run read."""
    facet: InputDatasetFacet = data_quality_assertions_dataset.DataQualityAssertionsDatasetFacet(
        assertions=assertions(checks), producer=PRODUCER
    )
    return facet


def assertions(checks: Sequence[CheckResult]) -> list[data_quality_assertions_dataset.Assertion]:
    """Check results as OpenLineage assertions: a blocking check is severity ``error`` (its failure
    blocks the pipeline), a warning ``warn``."""
    return [
        data_quality_assertions_dataset.Assertion(
            assertion=check.name,
            name=check.name,
            success=check.passed,
            severity="error" if check.severity is CheckSeverity.blocking else "warn",
            description=check.message,
            params=dict(check.metrics),
        )
        for check in checks
    ]


def run_id(job_run_id: str) -> str:
    """The OpenLineage run id of a job run: deterministic, so all its events share it."""
    return str(uuid.uuid5(RUN_ID_NAMESPACE, job_run_id))


def transport_from_settings(settings: Settings) -> Transport | None:
    """The transport ``DATABUILD_OPENLINEAGE_URL`` names, or None when export is off."""
    url = settings.openlineage_url
    if not url:
        return None
    parts = urlsplit(url)
    try:
        if parts.scheme in ("http", "https"):
            key = settings.openlineage_api_key
            auth = ApiKeyTokenProvider({"api_key": key.get_secret_value()}) if key else TokenProvider({})
            base = f"{parts.scheme}://{parts.netloc}"
            endpoint = url[len(base) :].lstrip("/") or HTTP_ENDPOINT  # a URL with a path names the endpoint
            return HttpTransport(
                HttpConfig(
                    url=base, endpoint=endpoint, timeout=HTTP_TIMEOUT_SECONDS, auth=auth, retry=HTTP_RETRY
                )
            )
        path = Path(url2pathname(parts.path) if parts.scheme == "file" else url).resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        return FileTransport(FileConfig(log_file_path=str(path), append=True))
    except (OSError, ValueError, KeyError) as error:
        # An OSError's own text quotes the path, a ValueError's may quote the URL: the setting's value.
        problem = error.strerror if isinstance(error, OSError) and error.strerror else type(error).__name__
        raise InvalidInputError(f"bad setting DATABUILD_OPENLINEAGE_URL: cannot use it ({problem})") from None


class LineageEmitter:
    """Emits the OpenLineage events of job runs; see the module docstring for what and when."""

    def __init__(
        self, transport: Transport, *, naming: DatasetNaming, job_namespace: str = "databuild"
    ) -> None:
        self.naming = naming
        self.job_namespace = job_namespace
        self.client = OpenLineageClient(transport=transport)
        self._queue: queue.Queue[RunEvent | None] = queue.Queue(maxsize=QUEUE_SIZE)
        self._closed = False
        self._sender = threading.Thread(target=self._send_loop, name="databuild-openlineage", daemon=True)
        self._sender.start()

    @classmethod
    def from_settings(cls, settings: Settings, graph: Graph | None = None) -> "LineageEmitter | None":
        """None when OpenLineage export is off (the default); raises InvalidInputError for a bad URL.
        ``graph`` names datasets by table or pattern (without it, by the partition's path)."""
        transport = transport_from_settings(settings)
        if transport is None:
            return None
        return cls(
            transport, naming=DatasetNaming(settings, graph), job_namespace=settings.openlineage_namespace
        )

    # Events ------------------------------------------------------------------------------------------
    def started(self, run: JobRun, attempt: int) -> None:
        """START for an attempt that is now running. Inputs are not known yet; outputs have no version."""
        self._submit(lambda: self._event(RunState.START, run, attempt, inputs=[], outputs=run.outputs))

    def finished(
        self,
        run: JobRun,
        checks: Mapping[str, Sequence[CheckResult]] | None = None,
        cost: RunCost | None = None,
        read_checks: Mapping[str, Sequence[CheckResult]] | None = None,
    ) -> None:
        """The final event of a run that ended: COMPLETE (succeeded), ABORT (dep-miss or cancelled) or
        FAIL (failed). ``checks``: the results of each output's checks (by ref), in the output's
        ``databuild`` facet (of a run whose blocking check failed, too: why it failed). ``read_checks``:
        those of each instance it read (by instance id), as the input's standard ``dataQualityAssertions``
        facet. ``cost``: what its attempts cost, the ``databuildCost`` run facet (when an attempt
        recorded one).

        A dep-miss is reported as ABORT: a normal result (inputs were missing, nothing was written),
        not an error. Runs in any other state emit nothing.
        """
        event_type = FINAL_EVENT.get(run.state)
        if event_type is None:
            log.debug("no OpenLineage event for job run %s in state %s", run.job_run_id, run.state)
            return
        outputs: list[InstanceRef] | list[str] = run.writes if run.writes else run.outputs
        found = dict(checks or {})
        read = dict(read_checks or {})
        self._submit(
            lambda: self._event(
                event_type,
                run,
                run.attempts,
                inputs=run.reads,
                outputs=outputs,
                checks=found,
                cost=cost,
                read_checks=read,
            )
        )

    def _event(
        self,
        event_type: RunState,
        run: JobRun,
        attempt: int,
        inputs: list[InstanceRef],
        outputs: list[InstanceRef] | list[str],
        checks: Mapping[str, Sequence[CheckResult]] | None = None,
        cost: RunCost | None = None,
        read_checks: Mapping[str, Sequence[CheckResult]] | None = None,
    ) -> RunEvent:
        run_facets: dict[str, RunFacet] = {
            "databuild": DataBuildRunFacet(
                job_run_id=run.job_run_id, attempt=attempt, want_id=run.want_id, producer=PRODUCER
            )
        }
        if cost is not None and cost.attempts:
            run_facets["databuildCost"] = DataBuildCostRunFacet.of(cost)
        if event_type is RunState.FAIL:
            run_facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
                message=run.reason or "failed", programmingLanguage="python", producer=PRODUCER
            )
        job_facets: dict[str, JobFacet] = {
            "jobType": job_type_job.JobTypeJobFacet(
                processingType="BATCH", integration="DATABUILD", jobType="JOB", producer=PRODUCER
            )
        }
        return RunEvent(
            eventType=event_type,
            eventTime=_iso(run.updated_at),
            run=Run(runId=run_id(run.job_run_id), facets=run_facets),
            job=Job(namespace=self.job_namespace, name=run.job_label, facets=job_facets),
            inputs=[self._input(i, (read_checks or {}).get(i.instance_id or "")) for i in inputs],
            outputs=[
                OutputDataset(**self._dataset(o, None, (checks or {}).get(o)))
                if isinstance(o, str)
                else OutputDataset(**self._dataset(o.ref, o.instance_id, (checks or {}).get(o.ref)))
                for o in outputs
            ],
            producer=PRODUCER,
        )

    def _dataset(
        self, ref: str, instance_id: str | None, checks: Sequence[CheckResult] | None = None
    ) -> dict[str, Any]:
        namespace, name, partition = self.naming(ref)
        facets: dict[str, Any] = {
            "databuild": DataBuildDatasetFacet(
                ref=ref, partition=partition, instance_id=instance_id, producer=PRODUCER
            )
        }
        if instance_id is not None:
            facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(
                datasetVersion=instance_id, producer=PRODUCER
            )
        if checks:
            facets["databuild"].checks = assertions(checks)
        if (table := self.naming.symlink(ref)) is not None:
            facets["symlinks"] = symlinks_dataset.SymlinksDatasetFacet(
                identifiers=[symlinks_dataset.Identifier(namespace=table[0], name=table[1], type="TABLE")],
                producer=PRODUCER,
            )
        return {"namespace": namespace, "name": name, "facets": facets}

    def _input(self, read: InstanceRef, checks: Sequence[CheckResult] | None) -> InputDataset:
        quality = {"dataQualityAssertions": assertions_facet(checks)} if checks else None
        return InputDataset(**self._dataset(read.ref, read.instance_id), inputFacets=quality)

    # Delivery ----------------------------------------------------------------------------------------
    def _submit(self, build: Callable[[], RunEvent]) -> None:
        try:
            if self._closed:
                raise RuntimeError("the emitter is closed")
            self._queue.put_nowait(build())
        except queue.Full:
            log.warning("OpenLineage event dropped: %d events are waiting to be sent", QUEUE_SIZE)
        except Exception as error:  # lineage must never break a job
            log.warning("could not emit an OpenLineage event: %s", error)

    def _send_loop(self) -> None:
        while True:
            event = self._queue.get()
            try:
                if event is None:
                    return
                self.client.emit(event)
            except Exception as error:
                log.warning(
                    "could not send the OpenLineage %s event of run %s: %s",
                    event.eventType.value if event and event.eventType else "?",
                    event.run.runId if event else "?",
                    error,
                )
            finally:
                self._queue.task_done()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every event submitted so far was sent (or failed). False on timeout."""
        deadline = time.monotonic() + timeout
        with self._queue.all_tasks_done:
            while self._queue.unfinished_tasks:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._queue.all_tasks_done.wait(remaining)
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (for at most ``timeout`` seconds), then stop the sender."""
        if self._closed:
            return
        self._closed = True
        if not self.flush(timeout):
            log.warning("OpenLineage: %d events not sent at shutdown", self._queue.qsize())
        try:
            self._queue.put_nowait(None)
            self._sender.join(timeout=1.0)
            self.client.close(timeout=1.0)
        except Exception as error:
            log.warning("could not close the OpenLineage transport: %s", error)


def _iso(at: datetime) -> str:
    return (at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)).isoformat()
