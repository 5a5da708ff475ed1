"""A backfill's window: each want's place in its backfill, and how far its window has started them

Revision ID: 0002
Revises: 0.1.0

A backfill of 0.1.0 had every want started by the client as it registered them: its window is past
them all (``started`` = its partitions), and its wants have no place (``seq`` null).
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0.1.0"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("backfills") as table:
        table.add_column(sa.Column("started", sa.Integer(), nullable=False, server_default="0"))
    op.execute("UPDATE backfills SET started = partitions")
    with op.batch_alter_table("backfill_wants") as table:
        table.add_column(sa.Column("seq", sa.Integer(), nullable=True))
    op.create_index("ix_backfill_wants_seq", "backfill_wants", ["backfill_id", "seq"])


def downgrade() -> None:
    op.drop_index("ix_backfill_wants_seq", table_name="backfill_wants")
    with op.batch_alter_table("backfill_wants") as table:
        table.drop_column("seq")
    with op.batch_alter_table("backfills") as table:
        table.drop_column("started")
