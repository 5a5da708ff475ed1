"""job runs: why one ended without building (cause); cancelled, abandoned and lost runs are 'cancelled'

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None

# The reasons runs recorded before this revision were told apart by (databuild.domain.events).
ABANDONED = 'abandoned: every want that needed it was canceled or expired'
CANCELLED = 'canceled'


def upgrade() -> None:
    with op.batch_alter_table('job_runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('cause', sa.String(length=16), nullable=True))
    runs = sa.table(
        'job_runs',
        sa.column('state', sa.String),
        sa.column('cause', sa.String),
        sa.column('lost', sa.Boolean),
        sa.column('reason', sa.Text),
    )
    failed = runs.c.state == 'failed'
    for condition, state, cause in (
        (runs.c.lost == sa.true(), 'cancelled', 'lost'),
        (runs.c.reason == ABANDONED, 'cancelled', 'abandoned'),
        (runs.c.reason == CANCELLED, 'cancelled', 'cancelled'),
        (sa.true(), 'failed', 'error'),
    ):
        op.execute(
            runs.update().where(failed, runs.c.cause.is_(None), condition).values(state=state, cause=cause)
        )


def downgrade() -> None:
    op.execute("UPDATE job_runs SET state = 'failed' WHERE state = 'cancelled'")
    with op.batch_alter_table('job_runs', schema=None) as batch_op:
        batch_op.drop_column('cause')
