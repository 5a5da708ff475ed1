"""Backfills: their registration, pause, cancel and retry, and their progress."""

from collections.abc import Sequence

from sqlalchemy import RowMapping, func, select

from databuild.backfill import BackfillProgress, BackfillRequest
from databuild.bel import schema as s
from databuild.bel.base import (
    ReadBase,
    WriteBase,
    backfill_key,
    want_key,
)
from databuild.bel.rows import (
    backfill_row,
    chunks,
    derived_below,
    open_among,
    want_from_row,
    want_row,
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


class BackfillReads(ReadBase):
    """Reads of backfills."""

    def backfill_progress(self, backfill_id: str) -> BackfillProgress:
        """The backfill and its wants counted by state: one query for the counts."""
        with self.reader.connect() as conn:
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
            by_state={WantState(state): n for state, n in counts},
            created_at=row["created_at"],
            paused=bool(row["paused"]),
            canceled=bool(row["canceled"]),
        )

    def finished_backfills_of(self, want_id: str) -> list[BackfillProgress]:
        """The progress of each backfill the want belongs to that has finished. Counting a backfill's
        wants is done only once none is open (the first open one found answers), so a backfill of N
        wants does not count N times N rows as they end."""
        ids = self._all(select(s.backfill_wants.c.backfill_id).where(s.backfill_wants.c.want_id == want_id))
        final = [state.value for state in FINAL_WANT_STATES]
        finished = []
        for row in ids:
            open_want = self._all(
                select(s.backfill_wants.c.want_id)
                .join(s.wants, s.wants.c.want_id == s.backfill_wants.c.want_id)
                .where(s.backfill_wants.c.backfill_id == row["backfill_id"], s.wants.c.state.not_in(final))
                .limit(1)
            )
            if not open_want and (progress := self.backfill_progress(row["backfill_id"])).finished:
                finished.append(progress)
        return finished

    def any_backfill_paused(self) -> bool:
        return bool(
            self._all(select(s.backfills.c.backfill_id).where(s.backfills.c.paused.is_(True)).limit(1))
        )

    def backfill_reach(self, backfill_id: str, *, everything_below: bool = False) -> list[Want]:
        """The open wants a cancel or pause of the backfill reaches: its own, then the derivative wants
        below them that no open want outside needs (``reach.reached``), older first (a parent before the
        wants it derived). ``everything_below``: every open derivative below them instead, for a resume
        to wake (each decides again whether it is still paused). NotFoundError for an unknown backfill."""
        with self.reader.connect() as conn:
            backfill_row(conn, backfill_id)
            members = set(
                conn.execute(
                    select(s.backfill_wants.c.want_id).where(s.backfill_wants.c.backfill_id == backfill_id)
                ).scalars()
            )
            parents = derived_below(conn, members)
            involved = members | set(parents) | {p for ps in parents.values() for p in ps}
            open_ids = open_among(conn, involved)
            below = (
                reach.descendants(members, parents)
                if everything_below
                else reach.reached(members, parents, open_ids)
            )
            rows: list[RowMapping] = []
            for chunk in chunks(sorted((members | below) & open_ids)):
                rows += conn.execute(select(s.wants).where(s.wants.c.want_id.in_(chunk))).mappings().all()
        wants = [want_from_row(r) for r in rows]
        return sorted(wants, key=lambda w: (w.source is WantSource.derivative, w.created_at, w.want_id))


class BackfillCommands(BackfillReads, WriteBase):
    """Commands about backfills."""

    def record_backfill(
        self, request: BackfillRequest, partitions: int, specs: Sequence[WantSpec]
    ) -> list[WantSpec]:
        """Record the backfill (the first time it is asked for) and ``specs`` as its wants (each recorded
        unless it exists). Whether the backfill was cancelled is read in the same transaction, under its
        lock: then the open wants of ``specs`` end `canceled` here, so a cancel during the registration
        reaches every want registered after it. Returns the wants that are open, to start (none once
        cancelled; a paused backfill's wants start, and decide that they are paused)."""
        backfill_id = request.backfill_id
        with self._write(backfill_key(backfill_id), *(want_key(spec.want_id) for spec in specs)) as tx:
            known = tx.conn.execute(
                select(s.backfills.c.canceled).where(s.backfills.c.backfill_id == backfill_id)
            ).first()
            ids = sorted({spec.want_id for spec in specs})
            registration = backfill_rules.register(
                request,
                partitions,
                specs,
                canceled=None if known is None else bool(known.canceled),
                wants={
                    want_id: WantState(row["state"])
                    for want_id in ids
                    if (row := want_row(tx.conn, want_id, required=False)) is not None
                },
                members=set(
                    tx.conn.execute(
                        select(s.backfill_wants.c.want_id).where(
                            s.backfill_wants.c.backfill_id == backfill_id
                        )
                    ).scalars()
                ),
            )
            tx.extend(registration.events)
            return registration.to_start

    def cancel_backfill(self, backfill_id: str) -> bool:
        """Record that the backfill is cancelled; False if it already was. NotFoundError for an unknown
        backfill. Its wants are cancelled by ``cancel_wants``; those it registers later, by
        ``record_backfill``."""
        with self._write(backfill_key(backfill_id)) as tx:
            events = backfill_rules.cancel(backfill_id, bool(backfill_row(tx.conn, backfill_id)["canceled"]))
            tx.extend(events)
        return bool(events)

    def retry_backfill(self, backfill_id: str) -> list[Want]:
        """Record that the backfill is retried (``BackfillRetried``: a cancelled one is no longer, so the
        wants it registers from then on start); returns its wants that ended failed or canceled, for the
        caller to reopen. NotFoundError for an unknown backfill."""
        with self._write(backfill_key(backfill_id)) as tx:
            backfill_row(tx.conn, backfill_id)
            tx.extend(backfill_rules.retry(backfill_id))
            rows = tx.conn.execute(
                select(s.wants)
                .join(s.backfill_wants, s.backfill_wants.c.want_id == s.wants.c.want_id)
                .where(
                    s.backfill_wants.c.backfill_id == backfill_id,
                    s.wants.c.state.in_([WantState.failed.value, WantState.canceled.value]),
                )
            ).mappings()
            return [want_from_row(row) for row in rows]

    def pause_backfill(self, backfill_id: str, paused: bool) -> bool:
        """Record that the backfill is paused (or resumed); False if it already was. Raises NotFoundError
        for an unknown backfill."""
        with self._write(backfill_key(backfill_id)) as tx:
            events = backfill_rules.pause(
                backfill_id, bool(backfill_row(tx.conn, backfill_id)["paused"]), paused
            )
            tx.extend(events)
        return bool(events)
