"""consumer index: input instance -> (output instance, job run)

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'consumers',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('input_instance_id', sa.String(length=64), nullable=False),
        sa.Column('output_instance_id', sa.String(length=64), nullable=False),
        sa.Column('output_ref', sa.String(length=512), nullable=False),
        sa.Column('job_run_id', sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint('id'),
    )
    with op.batch_alter_table('consumers', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_consumers_input_instance_id'), ['input_instance_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_consumers_output_instance_id'), ['output_instance_id'], unique=False)
    # Derive the index for builds recorded before it existed.
    op.execute(
        "INSERT INTO consumers (input_instance_id, output_instance_id, output_ref, job_run_id) "
        "SELECT r.instance_id, w.instance_id, w.ref, r.job_run_id FROM read_deps r "
        "JOIN partition_instances w ON w.job_run_id = r.job_run_id "
        "JOIN job_runs j ON j.job_run_id = r.job_run_id "
        "WHERE r.instance_id IS NOT NULL AND j.state = 'succeeded'"
    )


def downgrade() -> None:
    op.drop_table('consumers')
