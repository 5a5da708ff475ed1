"""Fresh wants (``databuild want REF --fresh``): whether a want rebuilds its partition if stale, and what it
was asked against (both part of its identity)

Revision ID: 0006
Revises: 0005

Every want of an earlier log is a usual one: not fresh.
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("wants") as table:
        table.add_column(sa.Column("fresh", sa.Boolean(), nullable=False, server_default=sa.false()))
        table.add_column(sa.Column("fresh_of", sa.String(128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("wants") as table:
        table.drop_column("fresh_of")
        table.drop_column("fresh")
