"""Tables: the commits DataBuild made to them, and the partitions they have not caught up with."""

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Select, and_, func, select

from databuild.bel import schema as s
from databuild.bel.aggregates.base import WriteBase
from databuild.bel.reads.base import ReadBase
from databuild.bel.reads.rows import chunks
from databuild.domain import events as ev
from databuild.domain.retention import TableHolding
from databuild.models import Model, PartitionStatus

p, t = s.partitions.c, s.table_commits.c


class TableStats(Model):
    table: str
    format: str
    commits: int
    failures: int
    last_failure: str | None = None
    last_failure_at: datetime | None = None


class TableReads(ReadBase):
    def stats(self) -> list[TableStats]:
        """Each table's commits and failed commits, with the latest failure's reason."""
        c = s.table_stats.c
        return [
            TableStats(
                table=r["table_name"],
                format=r["format"],
                commits=r["commits"],
                failures=r["failures"],
                last_failure=r["last_failure"],
                last_failure_at=r["last_failure_at"],
            )
            for r in self._all(select(s.table_stats).order_by(c.table_name))
        ]

    def holdings(self, format_: str) -> list[TableHolding]:
        """Every instance's time in a table of ``format_``, as committed (for retention)."""
        rows = self._all(
            select(t.instance_id, t.table_name, t.snapshot_id, t.committed_at, t.removed_at).where(
                t.format == format_
            )
        )
        return [
            TableHolding(
                r["instance_id"], r["table_name"], r["snapshot_id"], r["committed_at"], r["removed_at"]
            )
            for r in rows
        ]

    def held(self, table: str, refs: Sequence[str]) -> dict[str, str]:
        """The instance ``table`` holds now of each of ``refs`` that it holds one of, as committed."""
        found: dict[str, str] = {}
        for chunk in chunks(list(refs)):
            rows = self._all(
                select(t.ref, t.instance_id).where(
                    t.table_name == table, t.removed_at.is_(None), t.ref.in_(chunk)
                )
            )
            found |= {r["ref"]: r["instance_id"] for r in rows}
        return found

    def behind(self, prefix: str, format_: str, *, limit: int = 500, after: str = "") -> list[str]:
        """The refs under ``prefix`` (a pattern's fixed start) whose table in ``format_`` has not caught up
        with the BEL, in order, from after ``after``: a live instance it does not hold, or an instance it
        holds that is no longer live."""
        return sorted(
            {
                *self._unpublished(prefix, format_, limit, after),
                *self._withdrawable(prefix, format_, limit, after),
            }
        )[:limit]

    def count_behind(self, prefix: str, format_: str) -> int:
        unpublished = self._count(
            select(func.count()).select_from(self._unpublished_query(prefix, format_).subquery())
        )
        return unpublished + self._count(
            select(func.count()).select_from(self._withdrawable_query(prefix, format_).subquery())
        )

    def held_count(self, prefix: str, format_: str) -> int:
        """How many partitions under ``prefix`` the table holds, as committed."""
        return self._count(
            select(func.count()).where(
                t.removed_at.is_(None), t.format == format_, t.ref.startswith(prefix, autoescape=True)
            )
        )

    def _unpublished_query(self, prefix: str, format_: str) -> Select[Any]:
        held = and_(t.instance_id == p.instance_id, t.removed_at.is_(None), t.format == format_)
        return (
            select(p.ref)
            .select_from(s.partitions.outerjoin(s.table_commits, held))
            .where(
                p.status == PartitionStatus.live.value,
                p.ref.startswith(prefix, autoescape=True),
                t.instance_id.is_(None),
            )
        )

    def _withdrawable_query(self, prefix: str, format_: str) -> Select[Any]:
        live = and_(p.ref == t.ref, p.instance_id == t.instance_id, p.status == PartitionStatus.live.value)
        return (
            select(t.ref)
            .select_from(s.table_commits.outerjoin(s.partitions, live))
            .where(
                t.removed_at.is_(None),
                t.format == format_,
                t.ref.startswith(prefix, autoescape=True),
                p.ref.is_(None),
            )
        )

    def _unpublished(self, prefix: str, format_: str, limit: int, after: str) -> list[str]:
        query = self._unpublished_query(prefix, format_).where(p.ref > after).order_by(p.ref).limit(limit)
        return [r["ref"] for r in self._all(query)]

    def _withdrawable(self, prefix: str, format_: str, limit: int, after: str) -> list[str]:
        query = self._withdrawable_query(prefix, format_).where(t.ref > after).order_by(t.ref).limit(limit)
        return [r["ref"] for r in self._all(query)]


class Tables(TableReads, WriteBase):
    def record(self, commit: ev.TableCommitted | ev.TableCommitFailed) -> None:
        """A commit made to a table (after it was made: the table's own history is its proof), or one that
        failed."""
        with self._write(f"table:{commit.table}") as tx:
            tx.extend([commit])
