"""batches and pools: a batch run's partitions, admission, and the pool slots runs hold or wait for

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

from databuild.bel.schema import UTCDateTime

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('job_runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('batch_limit', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('members', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('missing_for', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('admitted', sa.Boolean(), server_default=sa.false(), nullable=False))
        batch_op.create_index('ix_job_runs_batch', ['job_label', 'state', 'admitted'], unique=False)
    op.create_table(
        'run_pools',
        sa.Column('job_run_id', sa.String(length=64), nullable=False),
        sa.Column('pool', sa.String(length=256), nullable=False),
        sa.Column('slots', sa.Integer(), nullable=False),
        sa.Column('granted', sa.Boolean(), nullable=False),
        sa.Column('queued_at', UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint('job_run_id', 'pool'),
    )
    op.create_index('ix_run_pools_pool', 'run_pools', ['pool', 'granted'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_run_pools_pool', table_name='run_pools')
    op.drop_table('run_pools')
    with op.batch_alter_table('job_runs', schema=None) as batch_op:
        batch_op.drop_index('ix_job_runs_batch')
        batch_op.drop_column('admitted')
        batch_op.drop_column('missing_for')
        batch_op.drop_column('members')
        batch_op.drop_column('batch_limit')
