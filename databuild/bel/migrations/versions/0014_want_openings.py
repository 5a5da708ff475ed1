"""How often a retry reopened each want (``wants.opening``)

Revision ID: 0014
Revises: 0013

A retry reopens a want, and every write of a workflow run says which opening of the want it serves, so a
run from before the reopen is refused in the transaction of its write. The count is derived from the log,
as a replay of it derives it: one per ``WantRetried``.
"""

import json
from collections import Counter

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("wants") as table:
        table.add_column(sa.Column("opening", sa.Integer(), nullable=False, server_default="0"))
    conn = op.get_bind()
    retried = conn.execute(sa.text("SELECT data FROM events WHERE type = 'WantRetried'")).scalars()
    openings = Counter(
        data["want_id"] for data in (json.loads(raw) if isinstance(raw, str) else raw for raw in retried)
    )
    for want_id, count in openings.items():
        conn.execute(
            sa.text("UPDATE wants SET opening = :count WHERE want_id = :id"), {"count": count, "id": want_id}
        )


def downgrade() -> None:
    with op.batch_alter_table("wants") as table:
        table.drop_column("opening")
