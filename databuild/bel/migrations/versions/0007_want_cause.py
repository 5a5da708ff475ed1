"""Why the system made a want (``wants.cause``): a late-data rebuild says which newer input instance made it

Revision ID: 0007
Revises: 0006

Every want of an earlier log was asked for by someone: no cause.
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("wants") as table:
        table.add_column(sa.Column("cause", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("wants") as table:
        table.drop_column("cause")
