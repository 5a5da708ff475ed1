"""backfills: a named, idempotent set of wants over a time range, and the wants it registered

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

from databuild.bel.schema import UTCDateTime

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'backfills',
        sa.Column('backfill_id', sa.String(length=64), nullable=False),
        sa.Column('request', sa.JSON(), nullable=False),
        sa.Column('partitions', sa.Integer(), nullable=False),
        sa.Column('created_at', UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint('backfill_id'),
    )
    op.create_table(
        'backfill_wants',
        sa.Column('backfill_id', sa.String(length=64), nullable=False),
        sa.Column('want_id', sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint('backfill_id', 'want_id'),
    )


def downgrade() -> None:
    op.drop_table('backfill_wants')
    op.drop_table('backfills')
