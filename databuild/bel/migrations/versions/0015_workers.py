"""The worker processes and their job versions (``workers``)

Revision ID: 0015
Revises: 0014

A worker records, when it starts, the version of each job it runs (``WorkerStarted``), so that
``databuild envs`` says which worker has which version and a fresh rebuild the workers disagree on is
refused. No event of the log before this revision is of that type: the table starts empty.
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workers",
        sa.Column("identity", sa.String(255), primary_key=True),
        sa.Column("task_queue", sa.String(255), nullable=False),
        sa.Column("graph", sa.String(255), nullable=False),
        sa.Column("versions", sa.JSON(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),  # as schema.UTCDateTime stores
    )


def downgrade() -> None:
    op.drop_table("workers")
