"""Check results per instance: the latest result of each check of each instance (InstanceChecked)

Revision ID: 0003
Revises: 0002

A log from before checks existed has recorded no results: the table starts empty.
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "instance_checks",
        sa.Column("instance_id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(256), primary_key=True),
        sa.Column("ref", sa.String(512), nullable=False),
        sa.Column("job_run_id", sa.String(64)),
        sa.Column("severity", sa.String(16), nullable=False),
        sa.Column("passed", sa.Boolean(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("checked_at", sa.DateTime(timezone=True), nullable=False)  # as schema.UTCDateTime stores,
    )
    op.create_index("ix_instance_checks_ref", "instance_checks", ["ref"])
    op.create_index("ix_instance_checks_failed", "instance_checks", ["passed"])


def downgrade() -> None:
    op.drop_index("ix_instance_checks_failed", table_name="instance_checks")
    op.drop_index("ix_instance_checks_ref", table_name="instance_checks")
    op.drop_table("instance_checks")
