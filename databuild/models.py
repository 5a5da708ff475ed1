"""Pydantic models shared by the SDK, the CLI, the workflows and the build event log."""

import functools
import hashlib
import math
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal, Self, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from databuild.durations import Duration, Timestamp, later
from databuild.errors import InvalidInputError
from databuild.refs import validate_ref


class WantSource(StrEnum):
    cli = "cli"
    api = "api"
    dashboard = "dashboard"
    schedule = "schedule"
    derivative = "derivative"
    backfill = "backfill"
    rebuild = "rebuild"  # made by the system: late data (a job's rebuild_on_new_inputs)


class WantState(StrEnum):
    new = "new"
    building = "building"
    upstream_building = "upstream_building"
    successful = "successful"
    failed = "failed"
    expired = "expired"
    canceled = "canceled"

    @property
    def is_final(self) -> bool:
        return self in FINAL_WANT_STATES


FINAL_WANT_STATES = frozenset({WantState.successful, WantState.failed, WantState.expired, WantState.canceled})


class PartitionStatus(StrEnum):
    missing = "missing"
    building = "building"
    live = "live"
    failed = "failed"  # fail-locked: no new build until an operator runs `databuild resolve`
    tainted = "tainted"
    skipped = "skipped"  # retired with `databuild skip`: never built again


class JobRunState(StrEnum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    dep_miss = "dep_miss"
    skipped = "skipped"
    cancelled = "cancelled"  # stopped on request, abandoned by its wants, or lost with its worker

    @property
    def is_final(self) -> bool:
        return self not in (JobRunState.queued, JobRunState.running)


class JobRunCause(StrEnum):
    """Why a job run ended without building its outputs."""

    error = "error"  # the job failed: its outputs are fail-locked
    cancelled = "cancelled"  # cancelled on request: fail-locked, so an operator decides when to rebuild
    abandoned = "abandoned"  # every want that needed it was cancelled or expired: released
    lost = "lost"  # its workflow was gone and its lease lapsed: released

    @property
    def state(self) -> JobRunState:
        return JobRunState.failed if self is JobRunCause.error else JobRunState.cancelled

    @property
    def releases_outputs(self) -> bool:
        """Nothing is wrong with the outputs: whoever still wants them builds them again."""
        return self in (JobRunCause.abandoned, JobRunCause.lost)


E = TypeVar("E", bound=StrEnum)


def parse_choice(kind: type[E], value: str | None, what: str = "state") -> E | None:
    """An optional enum from user input (empty = none), with an error listing the choices."""
    if not value:
        return None
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(m.value for m in kind)
        raise InvalidInputError(f"unknown {what} {value!r}; choose one of: {choices}") from None


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


M = TypeVar("M", bound=BaseModel)


def first_error(error: ValueError) -> str:
    """The first problem pydantic found, as ``field: message``."""
    errors = getattr(error, "errors", None)
    if callable(errors):
        first = errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ()))
        message = str(first.get("msg", error)).removeprefix("Value error, ")
        return f"{where}: {message}" if where else message
    return str(error)


def validated(kind: type[M], **values: object) -> M:
    """``kind(**values)`` from user input: a bad value is an ``InvalidInputError`` naming it."""
    try:
        return kind(**values)
    except ValidationError as error:
        raise InvalidInputError(first_error(error)) from None


class WantSpec(Model):
    """What a client asks for. Its identity is ``hash(ref, data_timestamp, source)``."""

    ref: str
    data_timestamp: Timestamp
    sla: Duration | None = None
    ttl: Duration | None = None
    source: WantSource = WantSource.cli
    parent_want_id: str | None = None
    root_want_id: str | None = None
    requires: list[str] = Field(
        default=[],
        max_length=100,
        description="external partitions that must be available before the want's job is dispatched",
    )
    generation: int = Field(
        default=0,
        ge=0,
        description="how many times the ref had been tainted when the want was made: a want after a "
        "taint is a new want, so it rebuilds",
    )
    fresh: bool = Field(default=False, description="rebuild the partition and its stale inputs if stale")
    # Of a fresh want: what it was asked against, so asking again after a rebuild or a change is a new want.
    fresh_of: str | None = Field(default=None, max_length=128)
    cause: str | None = Field(default=None, max_length=2000, description="why the system made it (late data)")

    @field_validator("ref")
    @classmethod
    def _valid_ref(cls, ref: str) -> str:
        return validate_ref(ref)

    @field_validator("requires")
    @classmethod
    def _valid_requires(cls, refs: list[str]) -> list[str]:
        return list(dict.fromkeys(validate_ref(ref) for ref in refs))

    @model_validator(mode="after")
    def _deadlines_exist(self) -> Self:
        # A deadline past datetime's range cannot be computed; no stored want has one.
        for name, duration in (("sla", self.sla), ("ttl", self.ttl)):
            if duration is not None and later(self.data_timestamp, duration) is None:
                raise ValueError(
                    f"data_timestamp + {name} is after the year 9999; give a shorter {name} "
                    "or an earlier data_timestamp"
                )
        return self

    @model_validator(mode="after")
    def _lineage_fields(self) -> Self:
        derivative = self.source == WantSource.derivative
        if derivative and not (self.parent_want_id and self.root_want_id):
            raise ValueError("a derivative want needs parent_want_id and root_want_id")
        if not derivative and self.parent_want_id:
            raise ValueError("only derivative wants have a parent_want_id")
        return self

    @property
    def want_id(self) -> str:
        fresh = (self.fresh_of or "") if self.fresh else None
        return want_id_of(self.ref, self.data_timestamp, self.source, self.generation, fresh)

    @property
    def workflow_id(self) -> str:
        return want_workflow_id(self.ref, self.want_id)

    @property
    def sla_deadline(self) -> datetime | None:
        return None if self.sla is None else self.data_timestamp + self.sla

    @property
    def ttl_deadline(self) -> datetime | None:
        return None if self.ttl is None else self.data_timestamp + self.ttl

    def derive(self, ref: str, parent_want_id: str, generation: int = 0) -> "WantSpec":
        """The derivative want for a missing input: same data time and deadlines, linked to its root.
        ``generation`` is the input's taint count, so an input tainted since an earlier build is wanted anew."""
        return WantSpec(
            ref=ref,
            data_timestamp=self.data_timestamp,
            sla=self.sla,
            ttl=self.ttl,
            source=WantSource.derivative,
            parent_want_id=parent_want_id,
            root_want_id=self.root_want_id or parent_want_id,
            generation=generation,
            fresh=self.fresh,  # a fresh want's inputs are wanted fresh too, once per root
            fresh_of=(self.root_want_id or parent_want_id) if self.fresh else None,
        )


# A backfill's registration asks each of its 100,000 specs for its id several times.
@functools.lru_cache(maxsize=1 << 17)
def want_id_of(
    ref: str, at: datetime, source: "WantSource", generation: int, fresh: str | None = None
) -> str:
    key = f"{ref}\n{at.isoformat()}\n{source.value}"
    if generation:
        key += f"\n{generation}"
    if fresh is not None:  # a fresh want's fresh_of; every other want keeps the id it always had
        key += f"\nfresh\n{fresh}"
    return "w-" + hashlib.sha256(key.encode()).hexdigest()[:20]


def want_workflow_id(ref: str, want_id: str) -> str:
    return f"want:{ref}:{want_id}"


def want_id_of_workflow(workflow_id: str) -> str:
    return workflow_id.rpartition(":")[2]  # refs have no ':'


def job_run_workflow_id(job_label: str, job_run_id: str) -> str:
    return f"job-run:{job_label}:{job_run_id}"


class Want(Model):
    want_id: str
    ref: str
    data_timestamp: datetime
    sla: timedelta | None
    ttl: timedelta | None
    source: WantSource
    parent_want_id: str | None
    root_want_id: str | None
    state: WantState
    sla_missed: bool
    sla_at_risk: bool = Field(default=False, description="predicted (p90) to miss its SLA; stays raised")
    reason: str | None
    job_run_id: str | None = Field(description="the job run the want currently waits on or last waited on")
    workflow_id: str
    created_at: datetime
    updated_at: datetime
    generation: int = 0
    instance_id: str | None = Field(default=None, description="the partition instance that fulfilled it")
    fresh: bool = Field(default=False, description="rebuilds its partition (and stale inputs) if stale")
    fresh_of: str | None = None
    cause: str | None = Field(default=None, description="why the system made it (late data)")
    opening: int = Field(default=0, description="how often a retry reopened it")

    @property
    def sla_deadline(self) -> datetime | None:
        return None if self.sla is None else self.data_timestamp + self.sla

    @property
    def spec(self) -> WantSpec:
        derivative = self.source is WantSource.derivative
        return WantSpec(
            ref=self.ref,
            data_timestamp=self.data_timestamp,
            sla=self.sla,
            ttl=self.ttl,
            source=self.source,
            parent_want_id=self.parent_want_id if derivative else None,
            root_want_id=self.root_want_id if derivative else None,
            generation=self.generation,
            fresh=self.fresh,
            fresh_of=self.fresh_of,
            cause=self.cause,
        )


class Partition(Model):
    ref: str
    status: PartitionStatus
    instance_id: str | None = Field(description="the live instance, if any")
    built_by: str | None = Field(description="job run that built the live instance; None if external")
    building_job_run_id: str | None
    external: bool
    updated_at: datetime
    generation: int = Field(default=0, description="how many times the ref has been tainted")
    reason: str | None = Field(default=None, description="why it is tainted or failed")


class Subscription(Model):
    """A want waiting to hear about ``ref``, with what a notifier needs to know of that want (read in
    the same query, so deciding whom to tell is pure)."""

    id: int
    ref: str
    want_id: str
    workflow_id: str
    want_ref: str
    data_timestamp: datetime


class InstanceStatus(StrEnum):
    live = "live"  # the partition's current instance
    superseded = "superseded"  # a later build replaced it
    tainted = "tainted"  # an operator invalidated it with `databuild taint`


class Column(Model):
    name: str
    type: str = Field(description="its Spark SQL type, e.g. `bigint`, `string`, `array<string>`")
    nullable: bool = True


class InstanceFacts(Model):
    """What an instance holds, recorded when the job wrote it: counts from its Parquet footers (no data
    read), the schema from the DataFrame that was written."""

    rows: int | None = Field(description="row count; None if the footers could not be read")
    bytes: int | None = Field(description="size of its Parquet files; None if they could not be listed")
    files: int | None = Field(default=None, description="how many Parquet files")
    columns: list[Column] = Field(description="the schema: column names and types, in order")

    @property
    def summary(self) -> str:
        """``1,204 rows, 18.2 KiB in 2 files``, with ``?`` for what could not be read."""
        rows = "?" if self.rows is None else f"{self.rows:,}"
        size = "?" if self.bytes is None else format_bytes(self.bytes)
        files = "" if self.files is None else f" in {self.files} file{'s' if self.files != 1 else ''}"
        return f"{rows} rows, {size}{files}"


class CheckSeverity(StrEnum):
    blocking = "blocking"  # a failure keeps the instance from going live and fail-locks the partition
    warning = "warning"  # a failure is recorded and alerted; the instance goes live


def _finite(value: object) -> object:
    return None if isinstance(value, float) and not math.isfinite(value) else value


# A measurement that is not a number (NaN, an infinity) is unknown: JSON has no word for it, and the
# backends would disagree on one (SQLite's driver writes null, PostgreSQL refuses the document).
CheckMetric = Annotated[int | float | str | bool | None, AfterValidator(_finite)]


class CheckResult(Model):
    """What one check of one output found on one instance."""

    name: str = Field(description="the check's name, unique among the checks of its output")
    ref: str = Field(description="the partition ref of the instance checked")
    severity: CheckSeverity
    passed: bool
    message: str = Field(description="what it found, in one line")
    metrics: dict[str, CheckMetric] = Field(default={}, description="what it measured, by name")

    @property
    def blocks(self) -> bool:
        """It keeps its instance from going live."""
        return not self.passed and self.severity is CheckSeverity.blocking

    @property
    def line(self) -> str:
        """``check not_null(user_id) (blocking) failed: 3 null user_id``."""
        verdict = "passed" if self.passed else "failed"
        return f"check {self.name} ({self.severity.value}) {verdict}: {self.message}"


def format_bytes(n: int) -> str:
    """Sizes for people: 512 B, 1.5 KiB, 2.0 GiB."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


class TableCommit(Model):
    """The commit that put an instance into its partition's table, as DataBuild recorded it."""

    format: Literal["hive", "iceberg"]
    table: str = Field(description="`namespace.table` in its catalog")
    snapshot_id: int | None = Field(default=None, description="its snapshot (Iceberg): time travel reads it")
    committed_at: datetime
    removed_at: datetime | None = Field(default=None, description="when a later commit took it out")


class Instance(Model):
    """One materialisation of a ref. Its UUID never changes; a rebuild makes a new one."""

    instance_id: str
    ref: str
    job_run_id: str | None = Field(description="the job run that wrote it; None if announced externally")
    external: bool
    status: InstanceStatus
    stale_cause: str | None = Field(
        description="a tainted instance it was built from, directly or through others: its data is stale"
    )
    reason: str | None = Field(description="why it was tainted")
    created_at: datetime
    retired_at: datetime | None = Field(default=None, description="when it stopped being live")
    pinned: bool = Field(default=False, description="garbage collection keeps its data while pinned")
    location: str | None = Field(
        default=None, description="where its data is (a URI): read it with `ctx.read_instance(uuid)`"
    )
    facts: InstanceFacts | None = Field(
        default=None, description="row count, size and schema, recorded when the job wrote it"
    )
    schema_changed: bool = Field(
        default=False, description="its schema differs from the instance of the ref before it"
    )
    checks: list[CheckResult] = Field(
        default=[], description="the latest result of each check of its output, as recorded"
    )
    job_version: str | None = Field(
        default=None, description="the code version of the job that built it; None: external, or unknown"
    )
    table: TableCommit | None = Field(default=None, description="its commit to its table, if it has one")

    @property
    def stale(self) -> bool:
        return self.stale_cause is not None


class InstanceRef(Model):
    ref: str
    instance_id: str | None = None


class ImpactedInstance(Model):
    ref: str
    instance_id: str
    depth: int = Field(description="1 = read the tainted instance directly; 2 = read one of those; ...")
    current: bool = Field(description="it is its partition's live instance, so readers use it today")


class TaintImpact(Model):
    """What tainting a partition's live instance affects: every instance built from it, transitively."""

    ref: str
    instance_id: str
    downstream: list[ImpactedInstance]

    @property
    def current(self) -> list[ImpactedInstance]:
        return [d for d in self.downstream if d.current]


class TaintResult(Model):
    partition: Partition
    impact: TaintImpact
    tainted: list[InstanceRef] = Field(description="the instance, and with --cascade its current downstream")
    not_tainted: list[InstanceRef] = Field(
        default=[],
        description="current downstream that --cascade left alone: being rebuilt or replaced meanwhile",
    )


class AttemptOutput(Model):
    """The instance one output of one attempt is written to (live only if the attempt publishes)."""

    instance_id: str
    ref: str
    job_run_id: str
    attempt: int


class JobRun(Model):
    job_run_id: str
    lost: bool = Field(
        default=False, description="cancelled because its workflow was gone and its lease lapsed"
    )
    cause: JobRunCause | None = Field(
        default=None, description="why it ended without building (failed or cancelled runs)"
    )
    job_label: str
    outputs: list[str]
    params: dict[str, str]
    state: JobRunState
    want_id: str | None
    attempts: int
    reason: str | None
    missing: list[str]
    reads: list[InstanceRef]
    writes: list[InstanceRef]
    workflow_id: str
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None = Field(default=None, description="when its latest attempt started")
    ended_at: datetime | None = Field(default=None, description="when it ended")
    partitions: list[dict[str, str]] | None = Field(
        default=None, description="of a batch run: the placeholders of each partition it builds"
    )
    missing_for: dict[str, list[str]] | None = Field(
        default=None, description="of a batch that dep-missed: the missing inputs each output waits for"
    )
    waiting_for_pools: list[str] = Field(
        default=[], description="pools whose slot the queued run waits for (shown as `queued (pool full)`)"
    )

    status: str = Field(
        default="", description="the state as people read it: `queued (pool full: <pools>)` while waiting"
    )

    @model_validator(mode="before")
    @classmethod
    def _status(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("status"):
            state = JobRunState(data["state"])
            waiting = data.get("waiting_for_pools") or []
            queued = state is JobRunState.queued and waiting
            data = {**data, "status": f"queued (pool full: {', '.join(waiting)})" if queued else state.value}
        return data


class JobStats(Model):
    job_label: str
    succeeded: int
    skipped: int
    failed: int
    dep_miss: int
    in_progress: int
    cancelled: int = 0
    success_rate: float | None = Field(
        description="(succeeded + skipped) / (succeeded + skipped + failed); a dep-miss or a cancelled run "
        "is neither"
    )


class BuildStats(Model):
    jobs: list[JobStats]
    delegations_active: int = Field(description="partitions delegated to a build already running")
    delegations_historical: int = Field(description="partitions delegated to the build that made them")
    builds_avoided: int = Field(description="job runs skipped plus wants that joined a running build")


class EventRecord(Model):
    idx: int
    type: str
    at: datetime
    want_id: str | None
    job_run_id: str | None
    ref: str | None
    data: dict[str, object]


MAX_INDEX = 2**63 - 1  # the largest offset or event index: SQLite's INTEGER and PostgreSQL's BIGINT
MAX_FILTER_ITEMS = 100


class EventFilter(Model):
    """Which events to return. Within a kind any value matches (refs and patterns are one kind); across
    kinds all must match. Empty = no filter on that kind."""

    refs: list[str] = Field(default=[], max_length=MAX_FILTER_ITEMS)
    patterns: list[str] = Field(
        default=[], max_length=MAX_FILTER_ITEMS, description="ref globs: * within a segment, ** across"
    )
    job_labels: list[str] = Field(default=[], max_length=MAX_FILTER_ITEMS)
    job_run_ids: list[str] = Field(default=[], max_length=MAX_FILTER_ITEMS)
    want_ids: list[str] = Field(default=[], max_length=MAX_FILTER_ITEMS)
    types: list[str] = Field(
        default=[], max_length=MAX_FILTER_ITEMS, description="event types, e.g. PartitionLive"
    )

    @field_validator("refs")
    @classmethod
    def _valid_refs(cls, refs: list[str]) -> list[str]:
        return [validate_ref(ref) for ref in refs]


class EventPage(Model):
    events: list[EventRecord]
    next_since_idx: int = Field(
        description="pass as since_idx to continue; nothing before it is left to read"
    )
    last_idx: int = Field(description="the log's last index when this page was read")


# Where a job body runs (databuild/jobs/executors): the worker's own SparkSession, its own application
# through spark-submit, or a Spark Connect server.
ExecutorKind = Literal["session", "submit", "connect"]
# How a pattern's table keeps its partitions (databuild.jobs.tables).
TableFormatName = Literal["hive", "iceberg"]
