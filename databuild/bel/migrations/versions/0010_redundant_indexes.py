"""Two indexes that others cover are dropped: every event and every job run wrote one index entry fewer

Revision ID: 0010
Revises: 0009

``ix_events_job_run_id`` (events by job run) is the leading column of ``ix_events_job_run_type``, and
``ix_job_runs_job_label`` (runs by job) of ``ix_job_runs_batch`` and ``ix_job_runs_durations``: a lookup by
the one column uses the wider index as well. Indexes only: no row changes.
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_events_job_run_id", table_name="events")
    op.drop_index("ix_job_runs_job_label", table_name="job_runs")


def downgrade() -> None:
    op.create_index("ix_job_runs_job_label", "job_runs", ["job_label"])
    op.create_index("ix_events_job_run_id", "events", ["job_run_id"])
