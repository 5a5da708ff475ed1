"""Each partition's cost report row, kept (``partition_costs``), and delegations by ref

Revision ID: 0009
Revises: 0008

The rows are summed once from the attempts and delegations the log holds, by the statement the projector
keeps them with from then on (``databuild.bel.reads.partition_costs``).
"""

import sqlalchemy as sa
from alembic import op

from databuild.bel.reads.partition_costs import refresh_partition_costs

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

COUNTS = (
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


def upgrade() -> None:
    op.create_index("ix_delegations_ref", "delegations", ["ref"])
    op.create_table(
        "partition_costs",
        sa.Column("ref", sa.String(512), primary_key=True),
        *(sa.Column(name, sa.BigInteger(), nullable=False) for name in COUNTS),
        sa.Column("task_seconds", sa.Float(), nullable=False),
        sa.Column("cpu_seconds", sa.Float(), nullable=False),
        sa.Column("task_seconds_saved", sa.Float(), nullable=False),
    )
    op.create_index("ix_partition_costs_task_seconds", "partition_costs", ["task_seconds"])
    refresh_partition_costs(op.get_bind(), None)


def downgrade() -> None:
    op.drop_index("ix_partition_costs_task_seconds", table_name="partition_costs")
    op.drop_table("partition_costs")
    op.drop_index("ix_delegations_ref", table_name="delegations")
