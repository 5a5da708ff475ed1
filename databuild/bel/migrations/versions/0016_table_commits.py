"""Which instance each table holds for each partition (``table_commits``), and each table's commits
and failures counted (``table_stats``)

Revision ID: 0016
Revises: 0015

Each commit DataBuild makes to a table (a Hive re-point, an Iceberg snapshot) is recorded after it is made
(``TableCommitted``), so ``partitions show`` gives each instance's commit and ``databuild tables`` counts
the partitions a table has not caught up with. No event of the log before this revision is of that type:
the table starts empty, and a worker's start brings the tables in line and records what it commits.
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "table_commits",
        sa.Column("instance_id", sa.String(64), primary_key=True),
        sa.Column("ref", sa.String(512), nullable=False),
        sa.Column("table_name", sa.String(512), nullable=False),
        sa.Column("format", sa.String(16), nullable=False),
        sa.Column("snapshot_id", sa.BigInteger()),
        sa.Column("committed_at", sa.DateTime(timezone=True), nullable=False),  # as schema.UTCDateTime stores
        sa.Column("removed_snapshot_id", sa.BigInteger()),
        sa.Column("removed_at", sa.DateTime(timezone=True)),
    )
    op.create_index("ix_table_commits_held", "table_commits", ["ref", "removed_at"])
    op.create_table(
        "table_stats",
        sa.Column("table_name", sa.String(512), primary_key=True),
        sa.Column("format", sa.String(16), nullable=False),
        sa.Column("commits", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("failures", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("last_failure", sa.Text()),
        sa.Column("last_failure_at", sa.DateTime(timezone=True)),
    )


def downgrade() -> None:
    op.drop_table("table_stats")
    op.drop_index("ix_table_commits_held", table_name="table_commits")
    op.drop_table("table_commits")
