"""The cost of each job run attempt, from Spark's accounting (JobRunCostRecorded)

Revision ID: 0005
Revises: 0004

A log from before costs were recorded does not know what its runs cost: the table starts empty, and the
builds avoided by delegating to those runs count, unvalued.
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_run_costs",
        sa.Column("job_run_id", sa.String(64), primary_key=True),
        sa.Column("attempt", sa.Integer(), primary_key=True),
        sa.Column("job_label", sa.String(256), nullable=False),
        sa.Column("executor", sa.String(16), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),  # as schema.UTCDateTime stores
        sa.Column("task_seconds", sa.Float()),
        sa.Column("cost", sa.JSON()),
        sa.Column("unknown_reason", sa.Text()),
    )
    op.create_index("ix_job_run_costs_recorded", "job_run_costs", ["recorded_at"])


def downgrade() -> None:
    op.drop_index("ix_job_run_costs_recorded", table_name="job_run_costs")
    op.drop_table("job_run_costs")
