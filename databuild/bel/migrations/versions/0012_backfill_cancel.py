"""backfills: canceled (a cancel the registration of its remaining wants must see)

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('backfills', schema=None) as batch_op:
        batch_op.add_column(sa.Column('canceled', sa.Boolean(), server_default=sa.false(), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('backfills', schema=None) as batch_op:
        batch_op.drop_column('canceled')
