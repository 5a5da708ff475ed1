"""What crosses the Temporal boundary: workflow and activity inputs/outputs, signal payloads, names.

Shared by clients (CLI, SDK), workflows and activities, so each side agrees on one typed contract.
"""

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator
from temporalio.common import SearchAttributeKey

from databuild.config import Settings
from databuild.domain.alerts import Alert, ChannelState
from databuild.domain.decisions import (
    Blocked,
    Delegate,
    DependenciesStatus,
    Execute,
    Final,
    Live,
    NeedsInputs,
    Paused,
    WaitExternal,
)
from databuild.graph import Job
from databuild.models import JobRunCause, JobRunState, Model, WantSpec, WantState
from databuild.refs import validate_ref

WANT_WORKFLOW = "Want"
JOB_RUN_WORKFLOW = "JobRun"
UPSTREAM_WORKFLOW = "UpstreamSync"
SCHEDULED_WANT_WORKFLOW = "ScheduledWant"
ALERT_WORKFLOW = "Alert"
ALERT_CHANNEL_WORKFLOW = "AlertChannel"
BACKFILL_WINDOW_WORKFLOW = "BackfillWindow"
CHECK_WORKFLOW = "Check"
SIGNAL_ALERT = "alert"  # an alert for a channel's queue

SIGNAL_PARTITION_AVAILABLE = "partition_available"
SIGNAL_PARTITION_FAILED = "partition_failed"
SIGNAL_DEP_MISS = "dep_miss"
SIGNAL_REDECIDE = "redecide"
SIGNAL_PAUSE = "pause"  # the want's backfill is paused: decide nothing new until resumed
SIGNAL_RESUME = "resume"
SIGNAL_ABANDON = "abandon"  # to a JobRun workflow: every want that needed it was canceled or expired
SIGNAL_ADMITTED = "admitted"  # to a JobRun workflow waiting for pool slots: it was given them
SIGNAL_BATCH_FULL = "batch_full"  # to a JobRun workflow of a batch: no more partitions fit, start now
SIGNAL_ANNOUNCE = "announce"  # to an UpstreamSync workflow: "partition X is available" (push)
SIGNAL_WAKE = "wake"  # to a BackfillWindow workflow: step now (more wants registered, resumed, retried)
QUERY_PROGRESS = "progress"
QUERY_UPSTREAM_STATUS = "status"


SA_PARTITION_REF = SearchAttributeKey.for_keyword("DataBuildPartitionRef")
SA_WANT_STATE = SearchAttributeKey.for_keyword("DataBuildWantState")
SA_SLA_MISSED = SearchAttributeKey.for_bool("DataBuildSlaMissed")
SA_ROOT_WANT_ID = SearchAttributeKey.for_keyword("DataBuildRootWantId")
SA_JOB_LABEL = SearchAttributeKey.for_keyword("DataBuildJobLabel")
SEARCH_ATTRIBUTES = (SA_PARTITION_REF, SA_WANT_STATE, SA_SLA_MISSED, SA_ROOT_WANT_ID, SA_JOB_LABEL)
# Set by the Temporal server on every workflow a schedule starts (also for backfills).
SA_SCHEDULED_START_TIME = SearchAttributeKey.for_datetime("TemporalScheduledStartTime")


# Signals -----------------------------------------------------------------------------------------
class PartitionAvailable(Model):
    """Partition ``ref`` is live (built by ``job_run_id``, or announced externally when that is None)."""

    ref: str
    instance_id: str
    job_run_id: str | None = None


class PartitionFailedNotice(Model):
    ref: str
    job_run_id: str
    reason: str


class RedecideNotice(Model):
    """Something the want's last decision rested on changed (a fail-lock resolved, a partition
    retired, a build lost): decide again."""

    ref: str
    reason: str


class DepMissNotice(Model):
    job_run_id: str
    missing: list[str]


# Want workflow ------------------------------------------------------------------------------------
class WantMemory(BaseModel):
    """Everything a want's workflow knows: its state as it shows it, the news that arrived by signal, the
    job runs it started and its decision steps. One run hands it to the next at continue-as-new. The
    workflow updates it in place, so unlike the other models here it is not frozen."""

    model_config = ConfigDict(extra="forbid")

    state: WantState = WantState.new
    job_run_id: str | None = None  # the run it builds with or follows
    waiting_for: list[str] = []
    note: str = ""  # what it is doing, for the Temporal UI
    sla_missed: bool = False
    sla_at_risk: bool = False
    # Signals land here whenever they arrive, so one sent before the want waits is not lost.
    live: dict[str, str] = {}  # ref -> instance id ("" when heard from the BEL, not by signal)
    failed_runs: dict[str, str] = {}  # job run id -> reason
    failed_refs: dict[str, str] = {}  # ref -> reason
    dep_missed: dict[str, list[str]] = {}  # job run id -> missing inputs
    started: list[str] = []  # the job runs it started (a decision given again starts nothing twice)
    requirements_met: bool = False
    seq: int = 0  # decision steps taken so far (the BEL replays a step it already answered)
    paused: bool = False  # its backfill is paused
    stopping: str = ""  # why it stops (TTL passed, cancelled); set only in a run's last steps
    # Counters a waiting step compares with what they were when it began.
    changes: int = 0  # of state, run or inputs waited for: the SLA estimate is worth another look
    redecides: int = 0  # redecide signals heard
    resumes: int = 0  # resume signals heard: one after a decision outdates its paused verdict


class WantEnding(Model):
    """How a want's previous run ended when it ended without recording it in the BEL: a run started
    with this only records it, with what recording an outcome does (``databuild.temporal.wants.reconcile_want``)."""

    # Inputs recorded before openings carry the decision step (``seq``) that fenced them then.
    model_config = ConfigDict(frozen=True, extra="ignore")

    state: WantState
    reason: str | None = None
    instance_id: str | None = None
    was: WantState  # its state in the BEL then
    job_run_id: str | None = None  # the run it followed then


# The version of the workflow code that starts a run, in its input: a run takes the workflow changes folded
# into its version without asking ``workflow.patched`` (workflows/changes.py). Inputs from before have none (0).
WORKFLOW_VERSION = 1


class WantInput(Model):
    spec: WantSpec
    carried: WantMemory | None = None  # set when a run continues as new
    ending: WantEnding | None = None  # set when a run only records how the one before it ended
    version: int = 0  # WORKFLOW_VERSION, of the code that started the run
    # The opening of the want the run serves (``databuild.domain.endings``): its writes are refused once a
    # retry has reopened the want since, and a run that still goes on then carries on as the newer one.
    opening: int = 0


class WantResult(Model):
    want_id: str
    state: WantState
    sla_missed: bool
    reason: str | None = None
    instance_id: str | None = None


class WantProgress(Model):
    want_id: str
    ref: str
    state: WantState
    job_run_id: str | None
    waiting_for: list[str]
    sla_missed: bool


class DecideInput(Model):
    want_id: str
    seq: int
    opening: int = 0  # the want's opening the deciding run serves
    # Workflow change ``run-started-by-decision``: the activity starts the workflow of a run it queues (of
    # the want's root ``root_want_id``), so the run is no child of the want (no child events, no task
    # for the child's start and end in the want's history).
    start_run: bool = False
    root_want_id: str | None = None

    @classmethod
    def starting_runs(cls, spec: WantSpec, seq: int, opening: int = 0) -> "DecideInput":
        """Step ``seq`` of the want ``spec``, starting the workflow of a run it queues."""
        return cls(
            want_id=spec.want_id,
            seq=seq,
            opening=opening,
            start_run=True,
            root_want_id=spec.root_want_id or spec.want_id,
        )


class JobPolicy(Model):
    """How a job run's activity is run; set by the worker's configuration when the run is queued."""

    heartbeat_timeout: timedelta
    start_to_close_timeout: timedelta
    attempts: int
    lease: timedelta = timedelta(minutes=1)

    @classmethod
    def of(cls, job: Job, settings: Settings) -> "JobPolicy":
        """The job's own declarations (``@graph.job(retries=, timeout=, heartbeat_timeout=)``) over the
        worker's settings."""
        return cls(
            heartbeat_timeout=job.heartbeat_timeout or settings.job_heartbeat_timeout,
            start_to_close_timeout=job.timeout or settings.job_start_to_close_timeout,
            attempts=settings.job_attempts if job.retries is None else job.retries + 1,
            lease=settings.job_lease,
        )


class Admission(Model):
    """What a run waits for before it starts: more partitions to join its batch (for ``window`` at
    most), and a slot of each of its ``pools`` (name -> slots)."""

    window: timedelta = timedelta(0)
    pools: dict[str, int] = {}


class ExecuteOrder(Execute):
    """Start this new job run with ``policy`` (and ``admission``), then follow it, watching it every
    ``watchdog``."""

    policy: JobPolicy
    watchdog: timedelta = timedelta(minutes=1)
    admission: Admission | None = None
    started: bool = False  # its workflow is started (``DecideInput.start_run``)

    def job_run_input(self) -> "JobRunInput":
        return JobRunInput(
            job_run_id=self.job_run_id,
            job_label=self.job_label,
            outputs=self.outputs,
            params=self.params,
            policy=self.policy,
            admission=self.admission,
            version=WORKFLOW_VERSION,
        )


class DelegateOrder(Delegate):
    """Follow another want's job run, watching it every ``watchdog``."""

    watchdog: timedelta = timedelta(minutes=1)


class NeedsInputsOrder(NeedsInputs):
    """Start derivative wants for the missing inputs and wait until they are live. ``status`` set: the
    decision started them already (a few inputs: no activity of its own), and this is how they stood."""

    status: DependenciesStatus | None = None


class BlockedOrder(Blocked):
    """Wait for `databuild resolve`, watching the fail-locks every ``watchdog``."""

    watchdog: timedelta = timedelta(minutes=1)


# What the decide activity answers: the BEL's verdict, with what the worker's settings add to it.
Decision = Annotated[
    Live | ExecuteOrder | DelegateOrder | WaitExternal | BlockedOrder | NeedsInputsOrder | Paused | Final,
    Field(discriminator="kind"),
]


class FirstStep(Model):
    """A new run's first step (``WantActivities.first_step``): the step it decided, and the decision."""

    seq: int
    decision: Decision


class WatchInput(Model):
    """What a waiting want watches between signals: the run it follows, or the fail-locked refs it is
    blocked on. The watch activity completes once the want should decide again; until then each
    attempt fails (benignly) and the server retries it, which adds nothing to the want's history."""

    job_run_id: str | None = None
    blocked_refs: list[str] = []
    look_at_once: bool = False  # False: the first attempt only waits a lease (wants before the timer)


class BuildHealth(StrEnum):
    alive = "alive"
    ended = "ended"  # it ended (the want may have missed the signal): decide again
    lost = "lost"  # its workflow is gone and its lease lapsed: released; decide again


class DependenciesInput(Model):
    want_id: str
    job_run_id: str | None  # the run that dep-missed; None: inputs the job declares
    missing: list[str]
    opening: int | None = None  # the want's opening the asking run serves


class RequirementsInput(Model):
    want_id: str
    refs: list[str]


class RequirementsStatus(Model):
    live: list[str]


class FinishInput(Model):
    want_id: str
    state: WantState
    reason: str | None = None
    instance_id: str | None = None
    opening: int | None = None  # the want's opening the finishing run serves (None: an outside authority)


class SlaMissedInput(Model):
    want_id: str
    deadline: datetime


# Job run workflow ----------------------------------------------------------------------------------
class JobRunInput(Model):
    job_run_id: str
    job_label: str
    outputs: list[str]
    params: dict[str, str]
    policy: JobPolicy
    admission: Admission | None = None  # None: it starts at once
    version: int = 0  # WORKFLOW_VERSION, of the code that started the run


class AdmissionInput(Model):
    job_run_id: str
    pools: dict[str, int]


class JobOutcome(Model):
    job_run_id: str
    state: JobRunState
    missing: list[str] = []
    reason: str | None = None
    cause: JobRunCause | None = None  # of a failed or cancelled run
    # The subscriptions up to this one heard of the run from its job activity, just after the commit that
    # recorded its outcome, so the run's fan-out starts after it (0: it tells every subscriber).
    told_after_id: int = 0
    # The job activity told every subscriber and did what follows a run's end (woke runs waiting for its pool
    # slots, rebuilt late readers, alerted): the run's workflow has no fan-out left to do.
    fanned_out: bool = False


class FailJobRunInput(Model):
    job_run_id: str
    reason: str
    cause: JobRunCause = JobRunCause.error


class AbandonBuildInput(Model):
    job_run_id: str


class AbandonBuildResult(Model):
    """The workflow of the run to tell it is abandoned; None while another want still waits on it."""

    workflow_id: str | None = None


class FanOutInput(Model):
    job_run_id: str
    after_id: int = 0  # the subscription it resumes after (the first pages were signalled already)


class FanOutResult(Model):
    """How far the first pages of a fan-out got: ``done``, or the cursor the rest resumes after."""

    heard: int
    after_id: int
    done: bool


# Cross-graph coordination ------------------------------------------------------------------------
def upstream_workflow_id(task_queue: str, name: str) -> str:
    """One per (receiving graph, upstream graph): graphs may share a namespace, each on its task queue."""
    return f"upstream:{task_queue}:{name}"


class Announcement(Model):
    """The typed push signal: partition ``ref`` is available, as instance ``instance_id`` of ``graph``.
    Send it with ``databuild.temporal.wants.announce`` (signal-with-start on ``upstream:<task queue>:<graph>``)."""

    ref: str
    instance_id: str | None = None
    graph: str
    location: str | None = None  # where the data is (default: the ref's folder under our storage root)


class UpstreamInput(Model):
    """One upstream graph: pulled from ``url`` (its events API) when given, pushed to in any case."""

    name: str
    url: str | None = None
    patterns: list[str] = []
    poll_every: timedelta = timedelta(seconds=5)
    cursor: int = 0  # the upstream's event index applied up to (carried across continue-as-new)
    applied: int = 0
    refused: int = 0  # pulled events skipped: not external here, or outside ``patterns``
    steps_per_run: int = 200  # pulls and applied pushes per workflow run, then continue-as-new


class PullInput(Model):
    name: str
    url: str
    patterns: list[str]
    cursor: int


class PullResult(Model):
    cursor: int
    applied: int = 0
    refused: int = 0
    more: bool = False


class AnnouncementsInput(Model):
    announcements: list[Announcement]
    patterns: list[str] = []  # the subscription's: each announcement must match one (none: any external ref)


class UpstreamStatus(Model):
    name: str
    url: str | None
    patterns: list[str]
    cursor: int
    applied: int
    refused: int = 0


# Scheduled wants ---------------------------------------------------------------------------------
class ScheduledWantInput(Model):
    """What a schedule's runs do: want ``pattern`` filled from the scheduled time."""

    pattern: str
    sla: timedelta | None = None
    ttl: timedelta | None = None


class ScheduledWantRequest(Model):
    ref: str
    data_timestamp: datetime
    sla: timedelta | None = None
    ttl: timedelta | None = None


# Alerts ------------------------------------------------------------------------------------------
class AlertInput(Model):
    alert: Alert
    give_up_after: timedelta = timedelta(days=1)


class DeliverInput(Model):
    alert: Alert
    channel: str  # a channel id (databuild.operations.alerts.Channel.id)


class AlertResult(Model):
    queued: list[str]  # the channels whose queues it went to (AlertChannel workflows deliver it)


class AlertChannelInput(Model):
    channel: str  # a channel id (databuild.operations.alerts.Channel.id)
    window: timedelta
    give_up_after: timedelta
    state: ChannelState = ChannelState()


def alert_channel_workflow_id(task_queue: str, channel: str) -> str:
    """One queue per channel and graph (task queue): graphs that share a channel back off apart."""
    return f"alert-channel:{task_queue}:{channel}"


class AssessSlaInput(Model):
    want_id: str
    deadline: datetime
    now: datetime  # the workflow's time


class SlaAssessment(Model):
    """A want's SLA estimate as its workflow acts on it: at risk now, or when to look again."""

    at_risk: bool
    eta: datetime | None = None
    check_at: datetime | None = None


# The backfill window ------------------------------------------------------------------------------------


def backfill_window_workflow_id(backfill_id: str) -> str:
    return f"backfill-window:{backfill_id}"


class BackfillWindowInput(Model):
    """A backfill's window: it starts the workflows of the backfill's wants in the order of its range,
    at most ``DATABUILD_BACKFILL_WINDOW`` open at once, looking every ``tick`` (or when woken)."""

    backfill_id: str
    tick: timedelta = timedelta(seconds=1)
    low: int = Field(default=0, description="where the last step began counting open wants")
    steps_per_run: int = Field(default=500, ge=1, description="steps before it continues as new")


# `databuild check` -------------------------------------------------------------------------------------


def check_workflow_id(ref: str) -> str:
    """One re-run of a partition's checks at a time: a second request meanwhile attaches to it."""
    return f"check:{ref}"


class CheckInput(Model):
    """Re-run the checks of ``ref`` on its live instance (on a worker: they need its Spark session)."""

    ref: str
    timeout: timedelta | None = Field(
        default=None, description="for all attempts together (None: an hour each, as requests before it had)"
    )

    @field_validator("ref")
    @classmethod
    def _valid_ref(cls, ref: str) -> str:
        return validate_ref(ref)
