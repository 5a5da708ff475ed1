"""The typed events of the build event log. Projections are derived from these alone."""

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, model_validator

from databuild.backfill import BackfillRequest
from databuild.domain.cost import SparkCost
from databuild.models import (
    CheckResult,
    InstanceFacts,
    InstanceRef,
    JobRunCause,
    Model,
    WantSpec,
    WantState,
)


class WantCreated(Model):
    type: Literal["WantCreated"] = "WantCreated"
    want_id: str
    spec: WantSpec
    workflow_id: str


class WantBuilding(Model):
    """The want's job run: one it queued (``executed``), one it delegated to (``delegated``), or a queued
    batch run its partition joined (``batched``)."""

    type: Literal["WantBuilding"] = "WantBuilding"
    want_id: str
    job_run_id: str
    relation: Literal["executed", "delegated", "batched"]
    decision_seq: int


class WantUpstreamBuilding(Model):
    """The want's job dep-missed (``job_run_id``), or declares inputs that are not live (None); it now
    waits for these inputs (and subscribes to them)."""

    type: Literal["WantUpstreamBuilding"] = "WantUpstreamBuilding"
    want_id: str
    job_run_id: str | None
    missing: list[str]
    derivative_want_ids: list[str]


class WantAwaitingRequirements(Model):
    """The want waits for the external partitions it requires before its job is dispatched."""

    type: Literal["WantAwaitingRequirements"] = "WantAwaitingRequirements"
    want_id: str
    refs: list[str]


class WantWaitingExternal(Model):
    type: Literal["WantWaitingExternal"] = "WantWaitingExternal"
    want_id: str
    decision_seq: int


class WantFinished(Model):
    type: Literal["WantSucceeded", "WantFailed", "WantExpired", "WantCanceled"]
    want_id: str
    state: WantState
    reason: str | None = None
    instance_id: str | None = None


class WantRetried(Model):
    """A want that ended failed or canceled is open again (``databuild retry``): it decides anew."""

    type: Literal["WantRetried"] = "WantRetried"
    want_id: str
    was: WantState = Field(description="the state it had ended in")
    decision_seq: int | None = Field(
        default=None, description="the step the reopen takes: a run that had not reached it is stale"
    )


class WantSlaMissed(Model):
    type: Literal["WantSlaMissed"] = "WantSlaMissed"
    want_id: str
    deadline: datetime


class WantSlaAtRisk(Model):
    """Predicted to miss its SLA: the p90 estimate of when it will be built passes the deadline."""

    type: Literal["WantSlaAtRisk"] = "WantSlaAtRisk"
    want_id: str
    deadline: datetime
    eta: datetime = Field(description="the p90 estimate of when the partition will be live")
    slowest_step: str | None = Field(default=None, description="the remaining step that takes longest")


class _JobRunDeclared(Model):
    job_run_id: str
    job_label: str
    outputs: list[str]
    params: dict[str, str]
    want_id: str | None
    workflow_id: str


class JobRunQueued(_JobRunDeclared):
    type: Literal["JobRunQueued"] = "JobRunQueued"
    batch: int | None = Field(default=None, description="of a batch job: the most partitions the run takes")


class JobRunJoined(Model):
    """A want's partition joined a queued batch run of its job, which now builds its outputs too."""

    type: Literal["JobRunJoined"] = "JobRunJoined"
    job_run_id: str
    want_id: str
    params: dict[str, str]
    outputs: list[str]


class JobRunWaiting(Model):
    """The run waits for a slot of each of its pools (name -> capacity) before it may start."""

    type: Literal["JobRunWaiting"] = "JobRunWaiting"
    job_run_id: str
    pools: dict[str, int]


class JobRunAdmitted(Model):
    """The run may start: it holds a slot of each of its pools, and a batch takes no more partitions."""

    type: Literal["JobRunAdmitted"] = "JobRunAdmitted"
    job_run_id: str


class JobRunSkipped(_JobRunDeclared):
    type: Literal["JobRunSkipped"] = "JobRunSkipped"
    message: str = "job skipped: all target partitions already available"


class JobRunStarted(Model):
    type: Literal["JobRunStarted"] = "JobRunStarted"
    job_run_id: str
    attempt: int
    worker: str
    instances: list[InstanceRef] = Field(
        default=[], description="the instance each output of this attempt is written to, if it publishes"
    )


class JobRunSucceeded(Model):
    type: Literal["JobRunSucceeded"] = "JobRunSucceeded"
    job_run_id: str
    reads: list[InstanceRef]
    writes: list[InstanceRef]
    inputs_of: dict[str, list[str]] | None = Field(
        default=None, description="of a batch: the refs each output was built from (else: every read)"
    )


class JobRunDepMiss(Model):
    type: Literal["JobRunDepMiss"] = "JobRunDepMiss"
    job_run_id: str
    missing: list[str]
    reads: list[InstanceRef]
    missing_for: dict[str, list[str]] | None = Field(
        default=None, description="of a batch: the missing inputs each output waits for (else: all)"
    )


# The reasons a job run workflow gives a run it stops: also how events recorded before
# ``JobRunFailed.cause`` existed are told apart.
ABANDONED_REASON = "abandoned: every want that needed it was canceled or expired"
CANCELLED_REASON = "canceled"


class JobRunFailed(Model):
    """The run ended without building: failed (``cause`` error) or cancelled (any other cause)."""

    type: Literal["JobRunFailed"] = "JobRunFailed"
    job_run_id: str
    reason: str
    cause: JobRunCause = JobRunCause.error

    @model_validator(mode="before")
    @classmethod
    def _upcast(cls, data: Any) -> Any:
        """Events recorded before ``cause`` carry ``lost`` and tell the rest by their reason."""
        if not isinstance(data, dict) or "cause" in data:
            return data
        data = dict(data)
        if data.pop("lost", False):
            data["cause"] = JobRunCause.lost
        elif data.get("reason") == ABANDONED_REASON:
            data["cause"] = JobRunCause.abandoned
        elif data.get("reason") == CANCELLED_REASON:
            data["cause"] = JobRunCause.cancelled
        return data


class Delegation(Model):
    type: Literal["Delegation"] = "Delegation"
    want_id: str
    ref: str
    delegated_to: str
    kind: Literal["active", "historical"]
    message: str


class PartitionBuilding(Model):
    type: Literal["PartitionBuilding"] = "PartitionBuilding"
    ref: str
    job_run_id: str


class PartitionLive(Model):
    type: Literal["PartitionLive"] = "PartitionLive"
    ref: str
    instance_id: str
    job_run_id: str | None
    external: bool = False
    source: str | None = Field(default=None, description="for external partitions: who announced it")
    location: str | None = Field(default=None, description="where the instance's data is (a URI)")
    facts: InstanceFacts | None = Field(
        default=None, description="row count, size and schema, as the job wrote it (None: not recorded)"
    )
    job_version: str | None = Field(
        default=None, description="the code version of the job that built it (None: external, or unknown)"
    )


class PartitionReleased(Model):
    """The build lock on a partition is released without a new instance (dep-miss)."""

    type: Literal["PartitionReleased"] = "PartitionReleased"
    ref: str
    job_run_id: str


class PartitionResolved(Model):
    """An operator cleared the fail-lock: the partition may be built again."""

    type: Literal["PartitionResolved"] = "PartitionResolved"
    ref: str


class PartitionSkipped(Model):
    """An operator retired the partition: it is never built again."""

    type: Literal["PartitionSkipped"] = "PartitionSkipped"
    ref: str


class PartitionTainted(Model):
    """An operator invalidated the live instance: the next want rebuilds the ref, and every instance
    built from it (``stale``, all transitive consumers at the time) is marked stale."""

    type: Literal["PartitionTainted"] = "PartitionTainted"
    ref: str
    instance_id: str
    reason: str | None = None
    stale: list[InstanceRef] = []
    cascaded_from: str | None = Field(
        default=None, description="the tainted instance whose `taint --cascade` tainted this one too"
    )


class WantBlocked(Model):
    """A build for the want is refused while these partitions are fail-locked; it waits for `resolve`."""

    type: Literal["WantBlocked"] = "WantBlocked"
    want_id: str
    refs: list[str]
    reason: str
    decision_seq: int


class InstancePinned(Model):
    """Garbage collection keeps this instance's data, live or not, until it is unpinned."""

    type: Literal["InstancePinned"] = "InstancePinned"
    ref: str
    instance_id: str
    reason: str | None = None


class InstanceUnpinned(Model):
    type: Literal["InstanceUnpinned"] = "InstanceUnpinned"
    ref: str
    instance_id: str


class BackfillRegistered(Model):
    """A backfill was asked for the first time (asking again records nothing). A ``windowed`` one has
    its wants' workflows started by its window (``BackfillAdvanced``); in 0.1.0 the client started them
    all as it registered them."""

    type: Literal["BackfillRegistered"] = "BackfillRegistered"
    backfill_id: str
    request: BackfillRequest
    partitions: int
    windowed: bool = False


class BackfillWantsAdded(Model):
    """Wants of a backfill, registered (a backfill registers its wants in several steps), with their
    places in its range (``seqs``, the order its window starts them in; none in 0.1.0)."""

    type: Literal["BackfillWantsAdded"] = "BackfillWantsAdded"
    backfill_id: str
    want_ids: list[str]
    seqs: list[int] | None = None


class BackfillAdvanced(Model):
    """The backfill's window started the workflows of its wants up to place ``started`` (excluded)."""

    type: Literal["BackfillAdvanced"] = "BackfillAdvanced"
    backfill_id: str
    started: int


class BackfillPaused(Model):
    """Its wants decide nothing new (runs already going finish) until it is resumed."""

    type: Literal["BackfillPaused"] = "BackfillPaused"
    backfill_id: str


class BackfillResumed(Model):
    type: Literal["BackfillResumed"] = "BackfillResumed"
    backfill_id: str


class BackfillCanceled(Model):
    """The backfill was cancelled: its wants and the derivative wants only it needed end `canceled`, and
    the wants it registers from then on are recorded cancelled."""

    type: Literal["BackfillCanceled"] = "BackfillCanceled"
    backfill_id: str


class BackfillRetried(Model):
    """The backfill's wants that ended failed or canceled open again (each by its own `WantRetried`),
    and a cancelled backfill is no longer: the wants it registers from then on start."""

    type: Literal["BackfillRetried"] = "BackfillRetried"
    backfill_id: str
    rewind: bool = False  # its window starts from the start of its range again (a windowed backfill)


class PartitionFailed(Model):
    """The partition is fail-locked: its build failed (``job_run_id``), or a check re-run on its live
    instance failed (None; `databuild check`, after a ``PartitionTainted`` that retired the instance)."""

    type: Literal["PartitionFailed"] = "PartitionFailed"
    ref: str
    job_run_id: str | None
    reason: str


class InstanceChecked(Model):
    """The results of the checks of one instance: when its job wrote it (``job_run_id``, whether it went
    live or a blocking failure kept it from going live), or re-run on it (`databuild check`: None)."""

    type: Literal["InstanceChecked"] = "InstanceChecked"
    ref: str
    instance_id: str
    job_run_id: str | None = None
    results: list[CheckResult]
    recheck_id: str | None = Field(
        default=None,
        description="the `databuild check` request that re-ran them, so a retry of it returns what it recorded",
    )


class JobRunCostRecorded(Model):
    """What one attempt of a job run cost, from Spark's accounting of its job group, recorded as the
    attempt ended (with its outcome, when it had one to record)."""

    type: Literal["JobRunCostRecorded"] = "JobRunCostRecorded"
    job_run_id: str
    attempt: int
    job_label: str
    executor: str
    cost: SparkCost | None = Field(description="None: the executor cannot read Spark's accounting")
    unknown_reason: str | None = None


class WorkerStarted(Model):
    """A worker process started serving a task queue, with the version of each job of its graph."""

    type: Literal["WorkerStarted"] = "WorkerStarted"
    identity: str
    task_queue: str
    graph: str
    versions: dict[str, str] = Field(description="job label -> the version of its code this worker runs")


class TableCommitted(Model):
    """A table was brought in line with what the BEL says of some of its partitions, after the BEL commit
    that decided it: each of ``instances`` is now its partition's data in the table (its previous data
    replaced), and each ref of ``withdrawn`` has no data there any more (taken out of service)."""

    type: Literal["TableCommitted"] = "TableCommitted"
    table: str = Field(description="`namespace.table` in its catalog")
    format: Literal["hive", "iceberg"]
    snapshot_id: int | None = Field(default=None, description="the table's snapshot of the commit (Iceberg)")
    committed_at: datetime = Field(description="when the table's commit was made, by the table's clock")
    instances: list[InstanceRef] = []
    withdrawn: list[str] = []
    job_run_id: str | None = Field(default=None, description="the run whose instances it added, if one did")


class TableCommitFailed(Model):
    """A commit to a table failed (its catalog down, a schema it refused): the partitions stay behind the
    BEL until a later commit, or a worker's start, brings them in line."""

    type: Literal["TableCommitFailed"] = "TableCommitFailed"
    table: str
    format: Literal["hive", "iceberg"]
    refs: list[str]
    reason: str


Event = Annotated[
    WantCreated
    | WantBuilding
    | WantUpstreamBuilding
    | WantWaitingExternal
    | WantAwaitingRequirements
    | WantBlocked
    | WantFinished
    | WantRetried
    | WantSlaMissed
    | WantSlaAtRisk
    | JobRunQueued
    | JobRunJoined
    | JobRunWaiting
    | JobRunAdmitted
    | JobRunSkipped
    | JobRunStarted
    | JobRunSucceeded
    | JobRunDepMiss
    | JobRunFailed
    | Delegation
    | PartitionBuilding
    | PartitionLive
    | PartitionReleased
    | PartitionFailed
    | InstanceChecked
    | JobRunCostRecorded
    | PartitionResolved
    | PartitionSkipped
    | PartitionTainted
    | InstancePinned
    | InstanceUnpinned
    | BackfillRegistered
    | BackfillWantsAdded
    | BackfillPaused
    | BackfillResumed
    | BackfillCanceled
    | BackfillRetried
    | BackfillAdvanced
    | WorkerStarted
    | TableCommitted
    | TableCommitFailed,
    Field(discriminator="type"),
]

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)

FINISH_EVENT_TYPE: dict[WantState, Literal["WantSucceeded", "WantFailed", "WantExpired", "WantCanceled"]] = {
    WantState.successful: "WantSucceeded",
    WantState.failed: "WantFailed",
    WantState.expired: "WantExpired",
    WantState.canceled: "WantCanceled",
}


def event_keys(event: Event) -> tuple[str | None, str | None, str | None]:
    """(want_id, job_run_id, ref) columns that index an event for filtering."""
    # Read from the fields themselves: a pydantic model answers a missing attribute by raising inside,
    # which cost more than the rest of recording a backfill's 100,000 wants.
    fields = event.__dict__
    spec = fields.get("spec")
    return (
        fields.get("want_id"),
        fields.get("job_run_id") or fields.get("delegated_to"),
        fields.get("ref") or (spec.ref if isinstance(spec, WantSpec) else None),
    )
