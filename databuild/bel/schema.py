"""Tables of the build event log: the append-only ``events`` table and projections of current state."""

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Dialect,
    Float,
    Index,
    Integer,
    MetaData,
    Select,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    any_,
    bindparam,
    false,
    func,
    literal_column,
    select,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.visitors import InternalTraversal


class UTCDateTime(TypeDecorator[datetime]):
    """Stores UTC, returns aware datetimes on every backend (SQLite drops the zone otherwise)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        # Aware, in UTC: SQLite's column keeps the fields alone, PostgreSQL's the instant.
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


REF = String(512)
ID = String(64)

metadata = MetaData()

# One row; every write transaction locks it first, so indexes are handed out in commit order.
head = Table(
    "bel_head",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("last_idx", BigInteger, nullable=False),
)

events = Table(
    "events",
    metadata,
    Column("idx", BigInteger, primary_key=True, autoincrement=False),
    Column("type", String(64), nullable=False),
    Column("at", UTCDateTime, nullable=False),
    Column("want_id", ID, index=True),
    Column("job_run_id", ID),
    Column("ref", REF, index=True),
    Column("data", JSON, nullable=False),
    # A job run's status history without scanning the delegations that also name it; and, by its first
    # column, any lookup by job run.
    Index("ix_events_job_run_type", "job_run_id", "type"),
)

wants = Table(
    "wants",
    metadata,
    Column("want_id", ID, primary_key=True),
    Column("ref", REF, nullable=False, index=True),
    Column("data_timestamp", UTCDateTime, nullable=False),
    Column("sla_seconds", Float),
    Column("ttl_seconds", Float),
    Column("source", String(16), nullable=False),
    Column("parent_want_id", ID, index=True),
    Column("root_want_id", ID, index=True),
    Column("state", String(24), nullable=False, index=True),
    Column("sla_missed", Boolean, nullable=False, default=False),
    Column("sla_deadline", UTCDateTime, index=True),
    Column("reason", Text),
    Column("job_run_id", ID),
    Column("decision_seq", Integer, nullable=False, default=0),
    Column("workflow_id", String(1024), nullable=False),
    Column("created_at", UTCDateTime, nullable=False, index=True),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("generation", Integer, nullable=False, default=0, server_default="0"),
    Column("instance_id", ID),  # the instance that fulfilled it
    Column("sla_at_risk", Boolean, nullable=False, server_default=false()),  # predicted to miss its SLA
    Column("fresh", Boolean, nullable=False, server_default=false()),  # rebuilds its partition if stale
    Column("fresh_of", String(128)),  # what a fresh want was asked against (part of its identity)
    Column("cause", Text),  # why the system made it (a late-data rebuild)
    # 0, and one more with each retry that reopened it: a workflow run serving an older one is replaced.
    Column("opening", Integer, nullable=False, default=0, server_default="0"),
    # A backfill's progress counts its wants by state: its members then read the state from this index
    # alone, never the wide rows (100,000 members: about 4x faster on SQLite).
    Index("ix_wants_state_of", "want_id", "state"),
)

partitions = Table(
    "partitions",
    metadata,
    Column("ref", REF, primary_key=True),
    Column("status", String(16), nullable=False, index=True),
    Column("instance_id", ID),
    Column("built_by", ID),
    Column("building_job_run_id", ID, index=True),
    Column("external", Boolean, nullable=False, default=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("generation", Integer, nullable=False, default=0, server_default="0"),  # times tainted
    Column("reason", Text),  # why the current instance was tainted
)

partition_instances = Table(
    "partition_instances",
    metadata,
    Column("instance_id", ID, primary_key=True),
    Column("ref", REF, nullable=False, index=True),
    Column("job_run_id", ID, index=True),
    Column("external", Boolean, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("status", String(16), nullable=False, default="live", server_default="live"),
    Column("stale_cause", ID),
    Column("reason", Text),
    Column("retired_at", UTCDateTime),  # when it stopped being live: gc keeps it the retention from then
    Column("pinned", Boolean, nullable=False, default=False, server_default=false()),
    Column("location", Text),  # where its data is (a URI); None when none was recorded
    Column("facts", JSON),  # row count, size, schema (InstanceFacts); None when the job recorded none
    Column("schema_changed", Boolean, nullable=False, server_default=false()),  # versus the previous instance
    Column("job_version", String(64)),  # of the job that built it; None: external, or not recorded
)

# The latest result of each check of each instance (InstanceChecked): of live instances, and of those a
# blocking failure kept from going live.
instance_checks = Table(
    "instance_checks",
    metadata,
    Column("instance_id", ID, primary_key=True),
    Column("name", String(256), primary_key=True),
    Column("ref", REF, nullable=False, index=True),
    Column("job_run_id", ID),  # the run that wrote it; None: re-run by `databuild check`
    Column("severity", String(16), nullable=False),
    Column("passed", Boolean, nullable=False),
    Column("message", Text, nullable=False),
    Column("metrics", JSON, nullable=False),
    Column("checked_at", UTCDateTime, nullable=False),
    Index("ix_instance_checks_failed", "passed"),  # /metrics counts the failures
)

# The instance each output of each attempt writes to, recorded before it writes: garbage collection
# never deletes what a running attempt is writing, and knows what a failed one left.
attempt_outputs = Table(
    "attempt_outputs",
    metadata,
    Column("instance_id", ID, primary_key=True),
    Column("ref", REF, nullable=False),
    Column("job_run_id", ID, nullable=False, index=True),
    Column("attempt", Integer, nullable=False),
)

# What each attempt of a job run cost (JobRunCostRecorded): Spark's accounting of its job group; the
# figures are null when its executor could not read them (unknown, never zero).
job_run_costs = Table(
    "job_run_costs",
    metadata,
    Column("job_run_id", ID, primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("job_label", String(256), nullable=False),
    Column("executor", String(16), nullable=False),
    Column("recorded_at", UTCDateTime, nullable=False),
    Column("task_seconds", Float),  # of ``cost``, for /metrics to sum in SQL; None: unknown
    Column("cost", JSON),  # SparkCost; None: unknown
    Column("unknown_reason", Text),
    Index("ix_job_run_costs_recorded", "recorded_at"),
)

job_runs = Table(
    "job_runs",
    metadata,
    Column("job_run_id", ID, primary_key=True),
    Column("job_label", String(256), nullable=False),  # looked up by ix_job_runs_batch (below)
    Column("state", String(16), nullable=False, index=True),
    Column("outputs", JSON, nullable=False),
    Column("params", JSON, nullable=False),
    Column("want_id", ID, index=True),
    Column("attempts", Integer, nullable=False, default=0),
    Column("lost", Boolean, nullable=False, default=False),
    Column("cause", String(16)),  # JobRunCause of a failed or cancelled run
    Column("reason", Text),
    Column("missing", JSON, nullable=False),
    Column("workflow_id", String(1024), nullable=False),
    Column("created_at", UTCDateTime, nullable=False, index=True),
    Column("updated_at", UTCDateTime, nullable=False),
    # A batch run: the most partitions it takes, each partition's placeholders, and (per output) the
    # missing inputs it waits for after a dep-miss. Null for a run of one partition.
    Column("batch_limit", Integer),
    Column("members", JSON),
    Column("missing_for", JSON),
    # May start (its pool slots are held); a queued batch run takes partitions until then.
    Column("admitted", Boolean, nullable=False, server_default=false()),
    # The latest attempt's start and the run's end: the duration history of SLA estimates and metrics.
    Column("started_at", UTCDateTime),
    Column("ended_at", UTCDateTime),
    Index("ix_job_runs_batch", "job_label", "state", "admitted"),
    Index("ix_job_runs_durations", "job_label", "state", "ended_at"),
)

# The pool slots a queued or running job run holds (granted) or waits for; gone when the run ends.
run_pools = Table(
    "run_pools",
    metadata,
    Column("job_run_id", ID, primary_key=True),
    Column("pool", String(256), primary_key=True),
    Column("slots", Integer, nullable=False),
    Column("granted", Boolean, nullable=False),
    Column("queued_at", UTCDateTime, nullable=False),
    Index("ix_run_pools_pool", "pool", "granted"),
)

job_run_outputs = Table(
    "job_run_outputs",
    metadata,
    Column("job_run_id", ID, primary_key=True),
    Column("ref", REF, primary_key=True),
    Index("ix_job_run_outputs_ref", "ref"),
)

read_deps = Table(
    "read_deps",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_run_id", ID, nullable=False, index=True),
    Column("ref", REF, nullable=False, index=True),
    Column("instance_id", ID, index=True),
)

# Consumer index: who read an instance, and what they made from it. "Who reads this" is one indexed
# lookup, and stays right across rebuilds because it is keyed by instance, not by ref.
consumers = Table(
    "consumers",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("input_instance_id", ID, nullable=False, index=True),
    Column("output_instance_id", ID, nullable=False, index=True),
    Column("output_ref", REF, nullable=False),
    Column("job_run_id", ID, nullable=False),
)

# Which derivative wants a want's dep-miss started (or joined, when another want started them first).
derivatives = Table(
    "derivatives",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("want_id", ID, nullable=False, index=True),
    Column("job_run_id", ID, index=True),  # the dep-miss that asked; None: a declared input
    Column("ref", REF, nullable=False),
    Column("derivative_want_id", ID, index=True),
)

subscriptions = Table(
    "subscriptions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("ref", REF, nullable=False),
    Column("want_id", ID, nullable=False, index=True),
    Column("workflow_id", String(1024), nullable=False),
    UniqueConstraint("ref", "want_id", name="uq_subscriptions_ref_want"),
    Index("ix_subscriptions_ref_id", "ref", "id"),
)

delegations = Table(
    "delegations",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("want_id", ID, nullable=False, index=True),
    Column("ref", REF, nullable=False, index=True),
    Column("delegated_to", ID, nullable=False, index=True),
    Column("kind", String(16), nullable=False),
    Column("at", UTCDateTime, nullable=False),
)

# The integer figures of a cost report row (``databuild.bel.reads.cost_sums``).
COST_COUNTS = (
    "builds_run",
    "unknown_attempts",
    "builds_avoided",
    "avoided_active",
    "avoided_historical",
    "unvalued_avoided",
    "input_bytes",
    "output_bytes",
    "shuffle_bytes",
    "tasks",
)
# The counts that rows by job and day also count once per job (``<count>_of_job``): a run's attempts, or a
# want's delegations to a run, on two days count in both days' rows, and once in their job's.
ONCE_PER_JOB = ("builds_run", "builds_avoided", "avoided_active", "avoided_historical", "unvalued_avoided")


def _cost_figures(*counts: str) -> list[Column[Any]]:
    """A kept cost report row's figures: ``counts`` (integers), then the seconds (floats)."""
    return [
        *(Column(name, BigInteger, nullable=False) for name in counts),
        Column("task_seconds", Float, nullable=False),
        Column("cpu_seconds", Float, nullable=False),
        Column("task_seconds_saved", Float, nullable=False),
    ]


# Each partition's cost report row of all time (``databuild.bel.reads.cost_sums``), kept by the projector as
# attempts' costs and delegations are recorded: the report by partition of a million partitions, and its
# costliest page, are read, not summed. Rows by job or day, since a time or of a pattern are still summed.
partition_costs = Table(
    "partition_costs",
    metadata,
    Column("ref", REF, primary_key=True),
    *_cost_figures(*COST_COUNTS),
    Index("ix_partition_costs_task_seconds", "task_seconds"),  # the costliest first, by index
)

# The cost report by job and day of all time, kept in parts (``databuild.bel.reads.run_costs``): per run and
# day, a row of its attempts (want '') and one of each want's delegations to it. The dashboard's plot over
# time sums them by job and day instead of summing every attempt and delegation.
run_day_costs = Table(
    "run_day_costs",
    metadata,
    Column("job_run_id", ID, primary_key=True),
    Column("want_id", ID, primary_key=True),  # '': the run's own attempts
    Column("day", String(10), primary_key=True),  # UTC, YYYY-MM-DD
    Column("job_label", String(256), nullable=False),
    *_cost_figures(*COST_COUNTS, *(f"{name}_of_job" for name in ONCE_PER_JOB)),
)

want_job_runs = Table(
    "want_job_runs",
    metadata,
    Column("want_id", ID, primary_key=True),
    Column("job_run_id", ID, primary_key=True),
    Column("relation", String(16), nullable=False),
    Index("ix_want_job_runs_job_run", "job_run_id"),
)

# Operational, not derived from events: when the lock a running job run holds on its outputs lapses
# unless its worker renews it. Rebuilding projections leaves it alone; a run without a lease row counts
# as lapsed, and is then kept only if its Temporal workflow is still running.
job_run_leases = Table(
    "job_run_leases",
    metadata,
    Column("job_run_id", ID, primary_key=True),
    Column("expires_at", UTCDateTime, nullable=False),
)

# Ref prefix and glob filters are LIKE 'prefix%'. PostgreSQL can use a B-tree for that only under the
# C collation or with pattern ops; SQLite uses the plain index (case_sensitive_like is on).
for _table in (events, wants, partitions, job_run_outputs):
    Index(
        f"ix_{_table.name}_ref_pattern", _table.c.ref, postgresql_ops={"ref": "varchar_pattern_ops"}
    ).ddl_if(dialect="postgresql")

backfills = Table(
    "backfills",
    metadata,
    Column("backfill_id", ID, primary_key=True),
    Column("request", JSON, nullable=False),
    Column("partitions", Integer, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("paused", Boolean, nullable=False, default=False, server_default=false()),
    Column("canceled", Boolean, nullable=False, default=False, server_default=false()),
    # Its window has started the workflows of its wants before this place (all of them in 0.1.0).
    Column("started", Integer, nullable=False, server_default="0"),
    # How often a retry took its window back to the start: a step planned before a rewind is not
    # recorded after it (the wants it started may have been ended and reopened meanwhile).
    Column("rewinds", Integer, nullable=False, server_default="0"),
)

backfill_wants = Table(
    "backfill_wants",
    metadata,
    Column("backfill_id", ID, primary_key=True),
    Column("want_id", ID, primary_key=True),
    Column("seq", Integer),  # its place in the backfill's range; null in 0.1.0
    Index("ix_backfill_wants_want", "want_id"),  # a want's backfills, when it ends
    Index("ix_backfill_wants_seq", "backfill_id", "seq"),  # the window's next wants
)

# The worker processes that started, with their job versions (``databuild envs``; Temporal says which
# still serve).
workers = Table(
    "workers",
    metadata,
    Column("identity", String(255), primary_key=True),
    Column("task_queue", String(255), nullable=False),
    Column("graph", String(255), nullable=False),
    Column("versions", JSON, nullable=False),
    Column("started_at", UTCDateTime, nullable=False),
)

# Which instance each table holds for each partition, as DataBuild committed it (TableCommitted): the
# commit that added an instance, and the one that took it out again (replaced or withdrawn), if any.
table_commits = Table(
    "table_commits",
    metadata,
    Column("instance_id", ID, primary_key=True),
    Column("ref", REF, nullable=False),
    Column("table_name", String(512), nullable=False),
    Column("format", String(16), nullable=False),
    Column("snapshot_id", BigInteger),  # Iceberg's snapshot of the commit; None for a Hive table
    Column("committed_at", UTCDateTime, nullable=False),
    Column("removed_snapshot_id", BigInteger),
    Column("removed_at", UTCDateTime),  # None: the table holds it now
    Index("ix_table_commits_held", "ref", "removed_at"),
)

# Each table's commits and failed commits, counted (/metrics), with the latest failure's reason.
table_stats = Table(
    "table_stats",
    metadata,
    Column("table_name", String(512), primary_key=True),
    Column("format", String(16), nullable=False),
    Column("commits", Integer, nullable=False, server_default="0"),
    Column("failures", Integer, nullable=False, server_default="0"),
    Column("last_failure", Text),
    Column("last_failure_at", UTCDateTime),
)

PROJECTIONS = [
    wants,
    partitions,
    partition_instances,
    instance_checks,
    attempt_outputs,
    job_run_costs,
    job_runs,
    run_pools,
    job_run_outputs,
    read_deps,
    consumers,
    derivatives,
    subscriptions,
    delegations,
    partition_costs,
    run_day_costs,
    want_job_runs,
    backfills,
    backfill_wants,
    workers,
    table_commits,
    table_stats,
]


class OneOf(ColumnElement[bool]):
    """``column IN (:name)``, the list bound under ``name`` when the statement runs. On PostgreSQL it is
    ``column = ANY(:name)`` with the list as one array: expanded, a page of batch runs' 1,200 output ids was
    1,200 parameters rendered with their casts, and a statement psycopg parsed afresh on every call (a
    third of the page's CPU time at a million instances). On SQLite the list is one JSON document
    (``json_each``)."""

    type = Boolean()
    _is_implicitly_boolean = True  # a comparison: not "... = 1" where a dialect has no boolean type
    inherit_cache = True
    _traverse_internals = [
        ("column", InternalTraversal.dp_clauseelement),
        ("name", InternalTraversal.dp_string),
    ]

    def __init__(self, column: ColumnElement[Any], name: str) -> None:
        self.column, self.name = column, name


def one_of(column: ColumnElement[Any], name: str) -> OneOf:
    """``column`` is one of the list bound under ``name`` (see ``OneOf``)."""
    return OneOf(column, name)


@compiles(OneOf)
def _expanded(element: OneOf, compiler: SQLCompiler, **kw: Any) -> str:
    return compiler.process(element.column.in_(bindparam(element.name, expanding=True)), **kw)


@compiles(OneOf, "sqlite")
def _json_each(element: OneOf, compiler: SQLCompiler, **kw: Any) -> str:
    # The list as one JSON parameter: a constant text, where an expanded list is rewritten for its length
    # on every call (a third of a one-want read's cost). SQLite probes the column's index for each value.
    listed = func.json_each(bindparam(element.name, type_=JSON))
    values: Select[Any] = select(literal_column("value")).select_from(listed)
    return compiler.process(element.column.in_(values.scalar_subquery()), **kw)


@compiles(OneOf, "postgresql")
def _any(element: OneOf, compiler: SQLCompiler, **kw: Any) -> str:
    array = bindparam(element.name, type_=postgresql.ARRAY(element.column.type))
    return compiler.process(element.column == any_(array), **kw)
