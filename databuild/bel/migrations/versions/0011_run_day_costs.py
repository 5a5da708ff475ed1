"""The cost report by job and day, kept in parts per run and day (``run_day_costs``)

Revision ID: 0011
Revises: 0010

The parts are summed once from the attempts and delegations the log holds, by the statement the
projector keeps them with from then on (``databuild.bel.reads.run_costs``).
"""

import sqlalchemy as sa
from alembic import op

from databuild.bel.reads.run_costs import refresh_run_costs

revision = "0011"
down_revision = "0010"
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
    "builds_run_of_job",
    "builds_avoided_of_job",
    "avoided_active_of_job",
    "avoided_historical_of_job",
    "unvalued_avoided_of_job",
)


def upgrade() -> None:
    op.create_table(
        "run_day_costs",
        sa.Column("job_run_id", sa.String(64), primary_key=True),
        sa.Column("want_id", sa.String(64), primary_key=True),
        sa.Column("day", sa.String(10), primary_key=True),
        sa.Column("job_label", sa.String(256), nullable=False),
        *(sa.Column(name, sa.BigInteger(), nullable=False) for name in COUNTS),
        sa.Column("task_seconds", sa.Float(), nullable=False),
        sa.Column("cpu_seconds", sa.Float(), nullable=False),
        sa.Column("task_seconds_saved", sa.Float(), nullable=False),
    )
    refresh_run_costs(op.get_bind(), None)


def downgrade() -> None:
    op.drop_table("run_day_costs")
