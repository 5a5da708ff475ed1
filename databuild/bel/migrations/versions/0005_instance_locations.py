"""instances: when each stopped being live (retired_at), pins, an external one's location; the instances
each attempt writes to (attempt_outputs), for garbage collection

Revision ID: 0005
Revises: 0004
"""

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

from databuild.bel.schema import UTCDateTime

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('partition_instances', schema=None) as batch_op:
        batch_op.add_column(sa.Column('retired_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('pinned', sa.Boolean(), server_default=sa.false(), nullable=False))
        batch_op.add_column(sa.Column('location', sa.Text(), nullable=True))
    op.create_table(
        'attempt_outputs',
        sa.Column('instance_id', sa.String(length=64), nullable=False),
        sa.Column('ref', sa.String(length=512), nullable=False),
        sa.Column('job_run_id', sa.String(length=64), nullable=False),
        sa.Column('attempt', sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint('instance_id'),
    )
    op.create_index('ix_attempt_outputs_job_run_id', 'attempt_outputs', ['job_run_id'], unique=False)
    # Instances that stopped being live before this revision: garbage collection keeps each a whole
    # retention from the upgrade, as it would from the moment it is superseded from now on.
    instances = sa.table('partition_instances', sa.column('status', sa.String), sa.column('retired_at', UTCDateTime))
    op.execute(
        instances.update()
        .where(instances.c.status != 'live', instances.c.retired_at.is_(None))
        .values(retired_at=datetime.now(UTC))
    )


def downgrade() -> None:
    op.drop_index('ix_attempt_outputs_job_run_id', table_name='attempt_outputs')
    op.drop_table('attempt_outputs')
    with op.batch_alter_table('partition_instances', schema=None) as batch_op:
        batch_op.drop_column('location')
        batch_op.drop_column('pinned')
        batch_op.drop_column('retired_at')
