"""Wants' states by id (``ix_wants_state_of``): a backfill's progress counts its members by state from
this index alone

Revision ID: 0008
Revises: 0007

An index only: no row changes.
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_wants_state_of", "wants", ["want_id", "state"])


def downgrade() -> None:
    op.drop_index("ix_wants_state_of", table_name="wants")
