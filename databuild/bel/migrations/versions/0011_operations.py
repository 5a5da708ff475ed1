"""operations: when each job run started and ended (duration history for SLA estimates and metrics), the
facts of each instance (row count, size, schema) and whether its schema changed, a want's SLA-at-risk flag,
and an index of the backfills a want belongs to

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

from databuild.bel.schema import UTCDateTime

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('job_runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('started_at', UTCDateTime(), nullable=True))
        batch_op.add_column(sa.Column('ended_at', UTCDateTime(), nullable=True))
        batch_op.create_index('ix_job_runs_durations', ['job_label', 'state', 'ended_at'], unique=False)
    with op.batch_alter_table('partition_instances', schema=None) as batch_op:
        batch_op.add_column(sa.Column('facts', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('schema_changed', sa.Boolean(), server_default=sa.false(), nullable=False))
    with op.batch_alter_table('wants', schema=None) as batch_op:
        batch_op.add_column(sa.Column('sla_at_risk', sa.Boolean(), server_default=sa.false(), nullable=False))
    op.create_index('ix_backfill_wants_want', 'backfill_wants', ['want_id'], unique=False)
    # What replaying the log would give the runs recorded before: their latest attempt's start, their end.
    op.execute(
        """
        UPDATE job_runs SET
          started_at = (SELECT MAX(e.at) FROM events e
                        WHERE e.job_run_id = job_runs.job_run_id AND e.type = 'JobRunStarted'),
          ended_at = (SELECT MAX(e.at) FROM events e
                      WHERE e.job_run_id = job_runs.job_run_id
                        AND e.type IN ('JobRunSucceeded', 'JobRunDepMiss', 'JobRunFailed'))
        """
    )


def downgrade() -> None:
    op.drop_index('ix_backfill_wants_want', table_name='backfill_wants')
    with op.batch_alter_table('wants', schema=None) as batch_op:
        batch_op.drop_column('sla_at_risk')
    with op.batch_alter_table('partition_instances', schema=None) as batch_op:
        batch_op.drop_column('schema_changed')
        batch_op.drop_column('facts')
    with op.batch_alter_table('job_runs', schema=None) as batch_op:
        batch_op.drop_index('ix_job_runs_durations')
        batch_op.drop_column('ended_at')
        batch_op.drop_column('started_at')
