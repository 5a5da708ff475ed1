"""Backfills: their registration, pause, cancel and retry, and their progress."""

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, RowMapping, Select, bindparam, func, or_, select

from databuild.backfill import BackfillProgress, BackfillRequest, WindowStep
from databuild.bel import schema as s
from databuild.bel.aggregates.base import WriteBase
from databuild.bel.aggregates.wants import STATES_OF
from databuild.bel.engine.keys import backfill_key, want_key
from databuild.bel.reads.base import ReadBase
from databuild.bel.reads.rows import (
    backfill_row,
    chunks,
    derived_below,
    open_among,
    want_from_row,
)
from databuild.domain import backfills as backfill_rules
from databuild.domain import reach
from databuild.models import (
    FINAL_WANT_STATES,
    Want,
    WantSource,
    WantSpec,
    WantState,
)

MEMBERS = s.backfill_wants.c
MEMBER_WANTS = s.backfill_wants.join(s.wants, s.wants.c.want_id == MEMBERS.want_id)
FINAL = [state.value for state in FINAL_WANT_STATES]
# Unstarted wants a cancel ends per transaction: short, so decisions interleave; each holds their locks, as
# many as a chunk of the registration holds (PostgreSQL's lock table is finite).
UNSTARTED_CHUNK = 500


def ended_wants(backfill_id: str) -> Select[Any]:
    """The backfill's wants that ended failed or canceled: what a retry reopens."""
    return (
        select(s.wants)
        .join(s.backfill_wants, s.backfill_wants.c.want_id == s.wants.c.want_id)
        .where(
            s.backfill_wants.c.backfill_id == backfill_id,
            s.wants.c.state.in_([WantState.failed.value, WantState.canceled.value]),
        )
    )


def unstarted(backfill_id: str, *, open_only: bool = False) -> Select[Any]:
    """The backfill's wants at places from its window's on, and not started by another backfill they
    belong to: no workflow was started for them (``open_only``: those that have not ended)."""
    mine, other = s.backfill_wants.alias("mine"), s.backfill_wants.alias("other")
    started_by_other = (
        select(other.c.want_id)
        .join(s.backfills, s.backfills.c.backfill_id == other.c.backfill_id)
        .where(
            other.c.want_id == mine.c.want_id,
            other.c.backfill_id != backfill_id,
            or_(other.c.seq.is_(None), other.c.seq < s.backfills.c.started),
        )
        .exists()
    )
    query = (
        select(mine.c.want_id)
        .join(s.backfills, s.backfills.c.backfill_id == mine.c.backfill_id)
        .where(mine.c.backfill_id == backfill_id, mine.c.seq >= s.backfills.c.started, ~started_by_other)
    )
    if open_only:
        query = query.join(s.wants, s.wants.c.want_id == mine.c.want_id).where(s.wants.c.state.not_in(FINAL))
    return query


# On every want's path (its end), so built once.
BACKFILLS_OF_WANT = select(s.backfill_wants.c.backfill_id).where(
    s.backfill_wants.c.want_id == bindparam("want_id")
)


class BackfillReads(ReadBase):
    """Reads of backfills."""

    def progress(self, backfill_id: str) -> BackfillProgress:
        """The backfill and its wants counted by state: one query for the counts."""
        with self._log.reader.connect() as conn:
            row = backfill_row(conn, backfill_id)
            counts = conn.execute(
                select(s.wants.c.state, func.count())
                .select_from(s.backfill_wants.join(s.wants, s.wants.c.want_id == s.backfill_wants.c.want_id))
                .where(s.backfill_wants.c.backfill_id == backfill_id)
                .group_by(s.wants.c.state)
            ).all()
        return BackfillProgress(
            backfill_id=backfill_id,
            request=BackfillRequest.model_validate(row["request"]),
            partitions=row["partitions"],
            registered=sum(n for _, n in counts),  # a want is added to its backfill once it exists
            started=min(row["started"], row["partitions"]),
            by_state={WantState(state): n for state, n in counts},
            created_at=row["created_at"],
            paused=bool(row["paused"]),
            canceled=bool(row["canceled"]),
        )

    def finished_of(self, want_id: str) -> list[BackfillProgress]:
        """The progress of each backfill the want belongs to that has finished. Counting a backfill's
        wants is done only once none is open (the first open one found answers), so a backfill of N
        wants does not count N times N rows as they end."""
        ids = self._all(BACKFILLS_OF_WANT, {"want_id": want_id})
        final = [state.value for state in FINAL_WANT_STATES]
        finished = []
        for row in ids:
            open_want = self._all(
                select(s.backfill_wants.c.want_id)
                .join(s.wants, s.wants.c.want_id == s.backfill_wants.c.want_id)
                .where(s.backfill_wants.c.backfill_id == row["backfill_id"], s.wants.c.state.not_in(final))
                .limit(1)
            )
            if not open_want and (progress := self.progress(row["backfill_id"])).finished:
                finished.append(progress)
        return finished

    def ended_wants(self, backfill_id: str) -> list[Want]:
        """The backfill's wants that ended failed or canceled (a retry reopens them). NotFoundError for
        an unknown backfill."""
        with self._log.reader.connect() as conn:
            backfill_row(conn, backfill_id)
            rows = conn.execute(ended_wants(backfill_id)).mappings()
            return [want_from_row(row) for row in rows]

    def members(self, backfill_id: str) -> set[str]:
        """The wants of a windowed backfill (its window starts them); none for one of 0.1.0."""
        with self._log.reader.connect() as conn:
            return set(
                conn.execute(
                    select(MEMBERS.want_id).where(
                        MEMBERS.backfill_id == backfill_id, MEMBERS.seq.is_not(None)
                    )
                ).scalars()
            )

    def unstarted(self, backfill_id: str) -> set[str]:
        """The backfill's wants whose workflows no window has started yet (a pause need not tell them)."""
        with self._log.reader.connect() as conn:
            return set(conn.execute(unstarted(backfill_id)).scalars())

    def halted(self, backfill_id: str) -> tuple[bool, bool]:
        """Whether the backfill is paused, and whether it is cancelled, now: a window's step looks between
        the wants it starts."""
        with self._log.reader.connect() as conn:
            row = backfill_row(conn, backfill_id)
        return bool(row["paused"]), bool(row["canceled"])

    def any_paused(self) -> bool:
        return bool(
            self._all(select(s.backfills.c.backfill_id).where(s.backfills.c.paused.is_(True)).limit(1))
        )

    def reach(
        self, backfill_id: str, *, everything_below: bool = False, started_only: bool = False
    ) -> list[Want]:
        """The open wants a cancel or pause of the backfill reaches: its own, then the derivative wants
        below them that no open want outside needs (``reach.reached``), older first (a parent before the
        wants it derived). ``everything_below``: every open derivative below them instead, for a resume
        to wake (each decides again whether it is still paused). ``started_only``: without its wants no
        window has started (a pause or resume need not tell them, and a big backfill's are most of it).
        NotFoundError for an unknown backfill."""
        with self._log.reader.connect() as conn:
            backfill_row(conn, backfill_id)
            members = set(
                conn.execute(
                    select(s.backfill_wants.c.want_id).where(s.backfill_wants.c.backfill_id == backfill_id)
                ).scalars()
            )
            # Whole-backfill reads are joins on its id (100,000 members are 200 IN lists otherwise): the
            # members that derived any want, and those that are open.
            deriving = conn.execute(
                select(s.derivatives.c.want_id)
                .distinct()
                .join(s.backfill_wants, s.backfill_wants.c.want_id == s.derivatives.c.want_id)
                .where(
                    s.backfill_wants.c.backfill_id == backfill_id,
                    s.derivatives.c.derivative_want_id.is_not(None),
                )
            ).scalars()
            parents = derived_below(conn, deriving)
            open_members = conn.execute(
                select(MEMBERS.want_id)
                .select_from(MEMBER_WANTS)
                .where(MEMBERS.backfill_id == backfill_id, s.wants.c.state.not_in(FINAL))
            ).scalars()
            others = (set(parents) | {p for ps in parents.values() for p in ps}) - members
            open_ids = set(open_members) | open_among(conn, others)
            below = (
                reach.descendants(members, parents)
                if everything_below
                else reach.reached(members, parents, open_ids)
            )
            reached = (members | below) & open_ids
            if started_only:  # they derived nothing (no workflow), so the reach below is the same
                reached -= set(conn.execute(unstarted(backfill_id)).scalars())
            rows: list[RowMapping] = []
            for chunk in chunks(sorted(reached)):
                rows += conn.execute(select(s.wants).where(s.wants.c.want_id.in_(chunk))).mappings().all()
        wants = [want_from_row(r) for r in rows]
        return sorted(wants, key=lambda w: (w.source is WantSource.derivative, w.created_at, w.want_id))


# A window step reads the wants after its place a page at a time, passing over those that ended (after a
# retry rewinds it, most have), up to this many per step.
FOLLOWING_PAGE = 500
FOLLOWING_MOST = 50_000


def _following(conn: Connection, backfill_id: str, started: int, room: int) -> list[RowMapping]:
    """The backfill's wants (with their places) from place ``started`` on, in order, until ``room`` of
    them have not ended (or ``FOLLOWING_MOST`` were read)."""
    following: list[RowMapping] = []
    wanted = 0
    page_size = max(room, FOLLOWING_PAGE)
    while room and wanted < room and len(following) < FOLLOWING_MOST:
        page = (
            conn.execute(
                select(MEMBERS.seq, s.wants)
                .select_from(MEMBER_WANTS)
                .where(
                    MEMBERS.backfill_id == backfill_id,
                    MEMBERS.seq >= (following[-1]["seq"] + 1 if following else started),
                )
                .order_by(MEMBERS.seq)
                .limit(page_size)
            )
            .mappings()
            .all()
        )
        following += page
        wanted += sum(1 for r in page if r["state"] not in FINAL)
        if len(page) < page_size:
            break
    return following


class Backfills(BackfillReads, WriteBase):
    """Commands about backfills."""

    def record(
        self, request: BackfillRequest, partitions: int, specs: Sequence[WantSpec], first_seq: int = 0
    ) -> None:
        """Record the backfill (the first time it is asked for) and ``specs`` as its wants at places
        ``first_seq`` on (each recorded unless it exists), for its window to start (``backfills.advance``).
        Whether the backfill was cancelled is read in the same transaction, under its lock: then the open
        wants of ``specs`` end `canceled` here, so a cancel during the registration reaches every want
        registered after it."""
        backfill_id = request.backfill_id
        with self._write(backfill_key(backfill_id), *(want_key(spec.want_id) for spec in specs)) as tx:
            known = tx.conn.execute(
                select(s.backfills.c.canceled).where(s.backfills.c.backfill_id == backfill_id)
            ).first()
            ids = [spec.want_id for spec in specs]
            wants = s.wants.c
            members = s.backfill_wants.c
            states: dict[str, WantState] = {}
            joined: set[str] = set()
            for chunk in chunks(ids):
                states.update(
                    (want_id, WantState(state))
                    for want_id, state in tx.conn.execute(
                        select(wants.want_id, wants.state).where(wants.want_id.in_(chunk))
                    )
                )
                joined.update(
                    tx.conn.execute(
                        select(members.want_id).where(
                            members.backfill_id == backfill_id, members.want_id.in_(chunk)
                        )
                    ).scalars()
                )
            tx.extend(
                backfill_rules.register(
                    request,
                    partitions,
                    specs,
                    first_seq=first_seq,
                    canceled=None if known is None else bool(known.canceled),
                    wants=states,
                    members=joined,
                )
            )

    def plan_window_step(self, backfill_id: str, window: int, low: int = 0) -> WindowStep:
        """The next step of the backfill's window (``backfills.advance``), recording nothing: the wants
        whose workflows start now (``to_start``). The caller starts them, then records the step
        (``record_window_step``): a caller that dies before has its retry plan and start them again
        (starting is idempotent). ``low``: the first place of a want it started that was open at the
        last step, where counting the open ones starts."""
        with self._log.reader.connect() as conn:
            row = backfill_row(conn, backfill_id)
            started = row["started"]
            low_open, open_wants = conn.execute(
                select(func.min(MEMBERS.seq), func.count())
                .select_from(MEMBER_WANTS)
                .where(
                    MEMBERS.backfill_id == backfill_id,
                    MEMBERS.seq >= min(low, started),
                    MEMBERS.seq < started,
                    s.wants.c.state.not_in(FINAL),
                )
            ).one()
            following = _following(conn, backfill_id, started, room=max(window - open_wants, 0))
        step = backfill_rules.advance(
            started=started,
            open_wants=open_wants,
            window=window,
            paused=bool(row["paused"]),
            canceled=bool(row["canceled"]),
            following=[(r["seq"], r["want_id"], WantState(r["state"])) for r in following],
        )
        starting = set(step.to_start)
        rows = [r for r in following if r["want_id"] in starting]
        lows = [place for place in (low_open, rows[0]["seq"] if rows else None) if place is not None]
        return WindowStep(
            backfill_id=backfill_id,
            read=started,
            rewinds=row["rewinds"],
            started=step.started,
            partitions=row["partitions"],
            open=open_wants + len(rows),
            low=min(lows, default=step.started),
            paused=bool(row["paused"]),
            canceled=bool(row["canceled"]),
            to_start=[want_from_row(r) for r in rows],
        )

    def record_window_step(self, step: WindowStep) -> bool:
        """Record that the window started the step's wants (``backfills.moved``); False if it did not
        move (a retry rewound it since the step was planned, or the step started nothing)."""
        with self._write(backfill_key(step.backfill_id)) as tx:
            row = backfill_row(tx.conn, step.backfill_id)
            events = backfill_rules.moved(
                step.backfill_id,
                current=row["started"],
                read=step.read,
                to=step.started,
                rewound=row["rewinds"] != step.rewinds,
            )
            tx.extend(events)
        return bool(events)

    def advance(self, backfill_id: str, window: int, low: int = 0) -> WindowStep:
        """A step of the window whose wants were started: ``plan_window_step`` then ``record_window_step``."""
        step = self.plan_window_step(backfill_id, window, low)
        self.record_window_step(step)
        return step

    def cancel(self, backfill_id: str) -> bool:
        """Record that the backfill is cancelled; False if it already was. NotFoundError for an unknown
        backfill. Its wants are cancelled by ``wants.cancel``; those it registers later, by
        ``backfills.record``."""
        with self._write(backfill_key(backfill_id)) as tx:
            events = backfill_rules.cancel(backfill_id, bool(backfill_row(tx.conn, backfill_id)["canceled"]))
            tx.extend(events)
        return bool(events)

    def cancel_unstarted(self, backfill_id: str) -> int:
        """End `canceled` the wants of the cancelled backfill that its window has not recorded started and
        that never decided (``backfills.cancel_unstarted``): they queued nothing and derived nothing. A
        step is recorded once its wants are started, so some may have workflows, which find them ended at
        their first decision; those that decided meanwhile are left to ``wants.cancel``. In bulk, a few
        hundred per transaction, each under the backfill's lock (a window's step takes it too, and finds
        it cancelled) and its wants' (a decision comes before, and the want is left, or after, and finds it
        ended). Returns how many."""
        with self._log.reader.connect() as conn:
            found = list(conn.execute(unstarted(backfill_id, open_only=True)).scalars())
        total = 0
        for first in range(0, len(found), UNSTARTED_CHUNK):
            chunk = found[first : first + UNSTARTED_CHUNK]
            with self._write(backfill_key(backfill_id), *map(want_key, chunk)) as tx:
                if not backfill_row(tx.conn, backfill_id)["canceled"]:
                    break  # retried meanwhile: its window starts them again
                read = {
                    want_id: WantState(state) for want_id, state in tx.conn.execute(STATES_OF, {"ids": chunk})
                }
                states = {want_id: read[want_id] for want_id in chunk if want_id in read}
                events = backfill_rules.cancel_unstarted(backfill_id, states)
                tx.extend(events)
            total += len(events)
        return total

    def retry(self, backfill_id: str) -> list[Want]:
        """Record that the backfill is retried (``BackfillRetried``: a cancelled one is no longer, so the
        wants it registers from then on start); returns its wants that ended failed or canceled, for the
        caller to reopen. NotFoundError for an unknown backfill."""
        with self._write(backfill_key(backfill_id)) as tx:
            backfill_row(tx.conn, backfill_id)
            windowed = tx.conn.execute(
                select(s.backfill_wants.c.want_id)
                .where(s.backfill_wants.c.backfill_id == backfill_id, s.backfill_wants.c.seq.is_not(None))
                .limit(1)
            ).first()
            tx.extend(backfill_rules.retry(backfill_id, windowed=windowed is not None))
            rows = tx.conn.execute(ended_wants(backfill_id)).mappings()
            return [want_from_row(row) for row in rows]

    def pause(self, backfill_id: str, paused: bool) -> bool:
        """Record that the backfill is paused (or resumed); False if it already was. Raises NotFoundError
        for an unknown backfill."""
        with self._write(backfill_key(backfill_id)) as tx:
            events = backfill_rules.pause(
                backfill_id, bool(backfill_row(tx.conn, backfill_id)["paused"]), paused
            )
            tx.extend(events)
        return bool(events)
