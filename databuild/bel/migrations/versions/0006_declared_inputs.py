"""derivatives: a derivative want may be asked for by a job's declared inputs, with no dep-miss run

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('derivatives', schema=None) as batch_op:
        batch_op.alter_column('job_run_id', existing_type=sa.String(length=64), nullable=True)


def downgrade() -> None:
    op.execute("DELETE FROM derivatives WHERE job_run_id IS NULL")
    with op.batch_alter_table('derivatives', schema=None) as batch_op:
        batch_op.alter_column('job_run_id', existing_type=sa.String(length=64), nullable=False)
