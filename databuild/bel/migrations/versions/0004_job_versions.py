"""The code version of the job that built each instance (PartitionLive.job_version)

Revision ID: 0004
Revises: 0003

A log from before versions were recorded does not know them: its instances have none (an unknown version
never makes an instance stale by code).
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("partition_instances") as table:
        table.add_column(sa.Column("job_version", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("partition_instances") as table:
        table.drop_column("job_version")
