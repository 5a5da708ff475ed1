"""event sequencer: PostgreSQL writers commit in parallel at provisional indexes; bel_sequence places them

Revision ID: 0010
Revises: 0009

On PostgreSQL a write transaction's last statement, ``bel_reserve(n)``, gives its events their final
indexes if no other transaction is placing events (it then holds the sequencer's lock until its COMMIT);
otherwise provisional ones (from 2^62 up, one step of ``bel_provisional_idx`` per transaction), and
after COMMIT the writer calls ``bel_sequence(<its first provisional index>)``: one transaction at a time
moves every committed provisional event, in provisional order, to the indexes after the head and
advances the head; a writer whose events another call placed after its COMMIT returns at once. Readers
read up to the head only. SQLite writers are serialised and keep writing final indexes (nothing changes
there). Existing history keeps its indexes.
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

PROVISIONAL = 1 << 62
STEP = 1 << 20  # the most events of one transaction
LOCK_SPACE, SEQUENCER = 0x42454C, 2  # a two-key advisory lock: one transaction places events at a time

# Moves every committed provisional event, in provisional order, to the indexes after the head, and
# advances the head; returns the head. The caller holds the sequencer's lock.
PLACE_PENDING = f"""
CREATE OR REPLACE FUNCTION bel_place_pending() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    last bigint;
    moved bigint;
BEGIN
    SELECT last_idx INTO STRICT last FROM bel_head WHERE id = 1 FOR UPDATE;
    UPDATE events SET idx = last + pending.n
    FROM (
        SELECT idx AS provisional, row_number() OVER (ORDER BY idx) AS n
        FROM events
        WHERE idx >= {PROVISIONAL}
    ) AS pending
    WHERE events.idx = pending.provisional;
    GET DIAGNOSTICS moved = ROW_COUNT;
    IF moved > 0 THEN
        UPDATE bel_head SET last_idx = last + moved WHERE id = 1;
    END IF;
    RETURN last + moved;
END
$$
"""

# After COMMIT: returns once the events at provisional index ``mine`` (and after it) are placed; NULL:
# places whatever is pending.
SEQUENCE = f"""
CREATE OR REPLACE FUNCTION bel_sequence(mine bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    IF mine IS NULL AND NOT EXISTS (SELECT 1 FROM events WHERE idx >= {PROVISIONAL}) THEN
        RETURN NULL;  -- nothing left behind (what commits from now on, its writer places)
    END IF;
    PERFORM pg_advisory_xact_lock({LOCK_SPACE}, {SEQUENCER});
    IF mine IS NOT NULL THEN
        PERFORM 1 FROM events WHERE idx = mine;
        IF NOT FOUND THEN
            RETURN NULL;  -- placed by a call that started after its COMMIT
        END IF;
    END IF;
    RETURN bel_place_pending();
END
$$
"""

# A writer's last statement before it writes its ``n`` events: the first index for them. Final (after
# the pending ones) if no other transaction is placing events, and then this one places them at its
# COMMIT, holding the sequencer's lock until then; else the first of ``n`` provisional indexes.
RESERVE = f"""
CREATE OR REPLACE FUNCTION bel_reserve(n integer) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    last bigint;
BEGIN
    IF n > {STEP} THEN
        RAISE EXCEPTION 'at most {STEP} events in one transaction, not %', n;
    END IF;
    IF pg_try_advisory_xact_lock({LOCK_SPACE}, {SEQUENCER}) THEN
        last := bel_place_pending();
        UPDATE bel_head SET last_idx = last + n WHERE id = 1;
        RETURN last + 1;
    END IF;
    RETURN nextval('bel_provisional_idx');
END
$$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        f"CREATE SEQUENCE IF NOT EXISTS bel_provisional_idx AS bigint INCREMENT BY {STEP} "
        f"MINVALUE {PROVISIONAL} START WITH {PROVISIONAL} NO CYCLE"
    )
    for function in (PLACE_PENDING, SEQUENCE, RESERVE):
        op.execute(function)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("SELECT bel_sequence(NULL)")  # earlier revisions read final indexes only
    op.execute("DROP FUNCTION IF EXISTS bel_reserve(integer)")
    op.execute("DROP FUNCTION IF EXISTS bel_sequence(bigint)")
    op.execute("DROP FUNCTION IF EXISTS bel_place_pending()")
    op.execute("DROP SEQUENCE IF EXISTS bel_provisional_idx")
