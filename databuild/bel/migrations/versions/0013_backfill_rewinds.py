"""How often a retry took a backfill's window back to the start (``backfills.rewinds``)

Revision ID: 0013
Revises: 0012

A window step starts its wants, then records that it did. A cancel and a retry between the two (the retry
reopening wants the step found ended, and rewinding the window to where the step read it) let the step
record a place past reopened wants that have no workflow. A step now records only if no rewind came since
it was planned. The count is derived from the log, as a replay of it derives it: one per
``BackfillRetried`` that rewound.
"""

import json
from collections import Counter

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("backfills") as table:
        table.add_column(sa.Column("rewinds", sa.Integer(), nullable=False, server_default="0"))
    conn = op.get_bind()
    retried = conn.execute(sa.text("SELECT data FROM events WHERE type = 'BackfillRetried'")).scalars()
    rewinds = Counter(
        data["backfill_id"]
        for data in (json.loads(raw) if isinstance(raw, str) else raw for raw in retried)
        if data.get("rewind")
    )
    for backfill_id, count in rewinds.items():
        conn.execute(
            sa.text("UPDATE backfills SET rewinds = :count WHERE backfill_id = :id"),
            {"count": count, "id": backfill_id},
        )


def downgrade() -> None:
    with op.batch_alter_table("backfills") as table:
        table.drop_column("rewinds")
