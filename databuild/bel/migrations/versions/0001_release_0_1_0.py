"""The schema of release 0.1.0: the baseline every later revision upgrades from

Revision ID: 0.1.0
Revises:

It creates what databuild/bel/schema.py described at 0.1.0, and on PostgreSQL the event sequencer:
writers commit in parallel at provisional indexes, and ``bel_sequence`` places their events. A write
transaction's last statement, ``bel_reserve(n)``, gives its events their final indexes if no other
transaction is placing events (it then holds the sequencer's lock until its COMMIT); otherwise
provisional ones (from 2^62 up, one step of ``bel_provisional_idx`` per transaction), and after COMMIT
the writer calls ``bel_sequence(<its first provisional index>)``: one transaction at a time moves every
committed provisional event, in provisional order, to the indexes after the head and advances the head.
Readers read up to the head only. SQLite writers are serialised and write final indexes.

Frozen: a later change of the schema is a new revision, never an edit of this one.
"""

import sqlalchemy as sa
from alembic import op

revision = "0.1.0"
down_revision = None
branch_labels = None
depends_on = None

REF = sa.String(length=512)
ID = sa.String(length=64)
AT = sa.DateTime(timezone=True)  # databuild.bel.schema.UTCDateTime stores this

PROVISIONAL = 1 << 62
STEP = 1 << 20  # the most events of one transaction
LOCK_SPACE, SEQUENCER = 0x42454C, 2  # a two-key advisory lock: one transaction places events at a time

# Moves every committed provisional event, in provisional order, to the indexes after the head, and
# advances the head; returns the head. The caller holds the sequencer's lock.
PLACE_PENDING = f"""
CREATE OR REPLACE FUNCTION bel_place_pending() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    last bigint;
    moved bigint;
BEGIN
    SELECT last_idx INTO STRICT last FROM bel_head WHERE id = 1 FOR UPDATE;
    UPDATE events SET idx = last + pending.n
    FROM (
        SELECT idx AS provisional, row_number() OVER (ORDER BY idx) AS n
        FROM events
        WHERE idx >= {PROVISIONAL}
    ) AS pending
    WHERE events.idx = pending.provisional;
    GET DIAGNOSTICS moved = ROW_COUNT;
    IF moved > 0 THEN
        UPDATE bel_head SET last_idx = last + moved WHERE id = 1;
    END IF;
    RETURN last + moved;
END
$$
"""

# After COMMIT: returns once the events at provisional index ``mine`` (and after it) are placed; NULL:
# places whatever is pending.
SEQUENCE = f"""
CREATE OR REPLACE FUNCTION bel_sequence(mine bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    IF mine IS NULL AND NOT EXISTS (SELECT 1 FROM events WHERE idx >= {PROVISIONAL}) THEN
        RETURN NULL;  -- nothing left behind (what commits from now on, its writer places)
    END IF;
    PERFORM pg_advisory_xact_lock({LOCK_SPACE}, {SEQUENCER});
    IF mine IS NOT NULL THEN
        PERFORM 1 FROM events WHERE idx = mine;
        IF NOT FOUND THEN
            RETURN NULL;  -- placed by a call that started after its COMMIT
        END IF;
    END IF;
    RETURN bel_place_pending();
END
$$
"""

# A writer's last statement before it writes its ``n`` events: the first index for them. Final (after
# the pending ones) if no other transaction is placing events, and then this one places them at its
# COMMIT, holding the sequencer's lock until then; else the first of ``n`` provisional indexes.
RESERVE = f"""
CREATE OR REPLACE FUNCTION bel_reserve(n integer) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    last bigint;
BEGIN
    IF n > {STEP} THEN
        RAISE EXCEPTION 'at most {STEP} events in one transaction, not %', n;
    END IF;
    IF pg_try_advisory_xact_lock({LOCK_SPACE}, {SEQUENCER}) THEN
        last := bel_place_pending();
        UPDATE bel_head SET last_idx = last + n WHERE id = 1;
        RETURN last + 1;
    END IF;
    RETURN nextval('bel_provisional_idx');
END
$$
"""

TABLES = (
    "bel_head",
    "events",
    "wants",
    "partitions",
    "partition_instances",
    "attempt_outputs",
    "job_runs",
    "run_pools",
    "job_run_outputs",
    "read_deps",
    "consumers",
    "derivatives",
    "subscriptions",
    "delegations",
    "want_job_runs",
    "job_run_leases",
    "backfills",
    "backfill_wants",
)


def upgrade() -> None:
    _log()
    _wants()
    _partitions()
    _job_runs()
    _lineage()
    _backfills()
    if op.get_bind().dialect.name == "postgresql":
        # Ref prefix and glob filters are LIKE 'prefix%': a B-tree serves that under pattern ops only.
        for table in ("events", "wants", "partitions", "job_run_outputs"):
            op.create_index(
                f"ix_{table}_ref_pattern", table, ["ref"], postgresql_ops={"ref": "varchar_pattern_ops"}
            )
        op.execute(
            f"CREATE SEQUENCE IF NOT EXISTS bel_provisional_idx AS bigint INCREMENT BY {STEP} "
            f"MINVALUE {PROVISIONAL} START WITH {PROVISIONAL} NO CYCLE"
        )
        for function in (PLACE_PENDING, SEQUENCE, RESERVE):
            op.execute(function)


def _log() -> None:
    op.create_table(
        "bel_head",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("last_idx", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    head = sa.table("bel_head", sa.column("id", sa.Integer), sa.column("last_idx", sa.BigInteger))
    op.bulk_insert(head, [{"id": 1, "last_idx": 0}])
    op.create_table(
        "events",
        sa.Column("idx", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("at", AT, nullable=False),
        sa.Column("want_id", ID, nullable=True),
        sa.Column("job_run_id", ID, nullable=True),
        sa.Column("ref", REF, nullable=True),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("idx"),
    )
    _indexes("events", "want_id", "job_run_id", "ref")
    op.create_index("ix_events_job_run_type", "events", ["job_run_id", "type"])


def _wants() -> None:
    op.create_table(
        "wants",
        sa.Column("want_id", ID, nullable=False),
        sa.Column("ref", REF, nullable=False),
        sa.Column("data_timestamp", AT, nullable=False),
        sa.Column("sla_seconds", sa.Float(), nullable=True),
        sa.Column("ttl_seconds", sa.Float(), nullable=True),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("parent_want_id", ID, nullable=True),
        sa.Column("root_want_id", ID, nullable=True),
        sa.Column("state", sa.String(length=24), nullable=False),
        sa.Column("sla_missed", sa.Boolean(), nullable=False),
        sa.Column("sla_deadline", AT, nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("job_run_id", ID, nullable=True),
        sa.Column("decision_seq", sa.Integer(), nullable=False),
        sa.Column("workflow_id", sa.String(length=1024), nullable=False),
        sa.Column("created_at", AT, nullable=False),
        sa.Column("updated_at", AT, nullable=False),
        sa.Column("generation", sa.Integer(), server_default="0", nullable=False),
        sa.Column("instance_id", ID, nullable=True),
        sa.Column("sla_at_risk", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.PrimaryKeyConstraint("want_id"),
    )
    _indexes("wants", "ref", "parent_want_id", "root_want_id", "state", "sla_deadline", "created_at")


def _partitions() -> None:
    op.create_table(
        "partitions",
        sa.Column("ref", REF, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("instance_id", ID, nullable=True),
        sa.Column("built_by", ID, nullable=True),
        sa.Column("building_job_run_id", ID, nullable=True),
        sa.Column("external", sa.Boolean(), nullable=False),
        sa.Column("updated_at", AT, nullable=False),
        sa.Column("generation", sa.Integer(), server_default="0", nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("ref"),
    )
    _indexes("partitions", "status", "building_job_run_id")
    op.create_table(
        "partition_instances",
        sa.Column("instance_id", ID, nullable=False),
        sa.Column("ref", REF, nullable=False),
        sa.Column("job_run_id", ID, nullable=True),
        sa.Column("external", sa.Boolean(), nullable=False),
        sa.Column("created_at", AT, nullable=False),
        sa.Column("status", sa.String(length=16), server_default="live", nullable=False),
        sa.Column("stale_cause", ID, nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("retired_at", AT, nullable=True),
        sa.Column("pinned", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("location", sa.Text(), nullable=True),
        sa.Column("facts", sa.JSON(), nullable=True),
        sa.Column("schema_changed", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.PrimaryKeyConstraint("instance_id"),
    )
    _indexes("partition_instances", "ref", "job_run_id")
    op.create_table(
        "attempt_outputs",
        sa.Column("instance_id", ID, nullable=False),
        sa.Column("ref", REF, nullable=False),
        sa.Column("job_run_id", ID, nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("instance_id"),
    )
    _indexes("attempt_outputs", "job_run_id")


def _job_runs() -> None:
    op.create_table(
        "job_runs",
        sa.Column("job_run_id", ID, nullable=False),
        sa.Column("job_label", sa.String(length=256), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("outputs", sa.JSON(), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("want_id", ID, nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("lost", sa.Boolean(), nullable=False),
        sa.Column("cause", sa.String(length=16), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("missing", sa.JSON(), nullable=False),
        sa.Column("workflow_id", sa.String(length=1024), nullable=False),
        sa.Column("created_at", AT, nullable=False),
        sa.Column("updated_at", AT, nullable=False),
        sa.Column("batch_limit", sa.Integer(), nullable=True),
        sa.Column("members", sa.JSON(), nullable=True),
        sa.Column("missing_for", sa.JSON(), nullable=True),
        sa.Column("admitted", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("started_at", AT, nullable=True),
        sa.Column("ended_at", AT, nullable=True),
        sa.PrimaryKeyConstraint("job_run_id"),
    )
    _indexes("job_runs", "job_label", "state", "want_id", "created_at")
    op.create_index("ix_job_runs_batch", "job_runs", ["job_label", "state", "admitted"])
    op.create_index("ix_job_runs_durations", "job_runs", ["job_label", "state", "ended_at"])
    op.create_table(
        "run_pools",
        sa.Column("job_run_id", ID, nullable=False),
        sa.Column("pool", sa.String(length=256), nullable=False),
        sa.Column("slots", sa.Integer(), nullable=False),
        sa.Column("granted", sa.Boolean(), nullable=False),
        sa.Column("queued_at", AT, nullable=False),
        sa.PrimaryKeyConstraint("job_run_id", "pool"),
    )
    op.create_index("ix_run_pools_pool", "run_pools", ["pool", "granted"])
    op.create_table(
        "job_run_outputs",
        sa.Column("job_run_id", ID, nullable=False),
        sa.Column("ref", REF, nullable=False),
        sa.PrimaryKeyConstraint("job_run_id", "ref"),
    )
    op.create_index("ix_job_run_outputs_ref", "job_run_outputs", ["ref"])
    op.create_table(
        "job_run_leases",
        sa.Column("job_run_id", ID, nullable=False),
        sa.Column("expires_at", AT, nullable=False),
        sa.PrimaryKeyConstraint("job_run_id"),
    )


def _lineage() -> None:
    op.create_table(
        "read_deps",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_run_id", ID, nullable=False),
        sa.Column("ref", REF, nullable=False),
        sa.Column("instance_id", ID, nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    _indexes("read_deps", "job_run_id", "ref", "instance_id")
    op.create_table(
        "consumers",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("input_instance_id", ID, nullable=False),
        sa.Column("output_instance_id", ID, nullable=False),
        sa.Column("output_ref", REF, nullable=False),
        sa.Column("job_run_id", ID, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    _indexes("consumers", "input_instance_id", "output_instance_id")
    op.create_table(
        "derivatives",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("want_id", ID, nullable=False),
        sa.Column("job_run_id", ID, nullable=True),
        sa.Column("ref", REF, nullable=False),
        sa.Column("derivative_want_id", ID, nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    _indexes("derivatives", "want_id", "job_run_id", "derivative_want_id")
    op.create_table(
        "subscriptions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("ref", REF, nullable=False),
        sa.Column("want_id", ID, nullable=False),
        sa.Column("workflow_id", sa.String(length=1024), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("ref", "want_id", name="uq_subscriptions_ref_want"),
    )
    _indexes("subscriptions", "want_id")
    op.create_index("ix_subscriptions_ref_id", "subscriptions", ["ref", "id"])
    op.create_table(
        "delegations",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("want_id", ID, nullable=False),
        sa.Column("ref", REF, nullable=False),
        sa.Column("delegated_to", ID, nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("at", AT, nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    _indexes("delegations", "want_id", "delegated_to")
    op.create_table(
        "want_job_runs",
        sa.Column("want_id", ID, nullable=False),
        sa.Column("job_run_id", ID, nullable=False),
        sa.Column("relation", sa.String(length=16), nullable=False),
        sa.PrimaryKeyConstraint("want_id", "job_run_id"),
    )
    op.create_index("ix_want_job_runs_job_run", "want_job_runs", ["job_run_id"])


def _backfills() -> None:
    op.create_table(
        "backfills",
        sa.Column("backfill_id", ID, nullable=False),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("partitions", sa.Integer(), nullable=False),
        sa.Column("created_at", AT, nullable=False),
        sa.Column("paused", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("canceled", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.PrimaryKeyConstraint("backfill_id"),
    )
    op.create_table(
        "backfill_wants",
        sa.Column("backfill_id", ID, nullable=False),
        sa.Column("want_id", ID, nullable=False),
        sa.PrimaryKeyConstraint("backfill_id", "want_id"),
    )
    op.create_index("ix_backfill_wants_want", "backfill_wants", ["want_id"])


def _indexes(table: str, *columns: str) -> None:
    """The one-column indexes ``Column(index=True)`` names ix_<table>_<column>."""
    for column in columns:
        op.create_index(f"ix_{table}_{column}", table, [column])


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS bel_reserve(integer)")
        op.execute("DROP FUNCTION IF EXISTS bel_sequence(bigint)")
        op.execute("DROP FUNCTION IF EXISTS bel_place_pending()")
        op.execute("DROP SEQUENCE IF EXISTS bel_provisional_idx")
    for table in reversed(TABLES):
        op.drop_table(table)
