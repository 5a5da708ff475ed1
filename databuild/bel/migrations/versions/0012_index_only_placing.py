"""PostgreSQL: placing events reads the log through its index, whatever the table's statistics

Revision ID: 0012
Revises: 0011

``bel_place_pending`` moves the few committed provisional events (at the top of ``events_pkey``) to the
indexes after the head, holding the sequencer's lock. Its statement is planned once per session, and on a
log that autovacuum has not analysed yet (every new one, for its first minutes) the planner guessed a
third of the table provisional and chose sequential scans and a hash join: each placing read the whole
log (7 ms a call at 16,000 events in ``bench_scale``, 22% of the run spent holding the lock, and growing
with the log). Without sequential scans, bitmaps, hash or merge joins, the only plan left is the right one
at any size: the provisional range from the index, each row found by its index entry. ``bel_sequence``
looks for pending events the same way. Settings of two functions only: no row changes.
"""

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

INDEX_ONLY = (
    "SET enable_seqscan = off SET enable_bitmapscan = off SET enable_hashjoin = off SET enable_mergejoin = off"
)
FUNCTIONS = ("bel_place_pending()", "bel_sequence(bigint)")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for function in FUNCTIONS:
            op.execute(f"ALTER FUNCTION {function} {INDEX_ONLY}")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for function in FUNCTIONS:
            op.execute(f"ALTER FUNCTION {function} RESET ALL")
