"""Rows of the projections, and the models read from them: shared by every aggregate of the log."""

from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection, RowMapping, Select, Table, bindparam, func, select

from databuild.bel import schema as s
from databuild.bel.engine import Row, direct
from databuild.domain.wants import WantRow
from databuild.errors import NotFoundError
from databuild.globs import like_prefix, ref_filter
from databuild.models import (
    FINAL_WANT_STATES,
    CheckResult,
    CheckSeverity,
    EventRecord,
    Instance,
    InstanceStatus,
    Partition,
    PartitionStatus,
    TableCommit,
    Want,
    WantSource,
    WantState,
)


def _seconds(value: float | None) -> timedelta | None:
    return None if value is None else timedelta(seconds=value)


def want_from_row(row: Any) -> Want:
    return Want(
        want_id=row["want_id"],
        ref=row["ref"],
        data_timestamp=row["data_timestamp"],
        sla=_seconds(row["sla_seconds"]),
        ttl=_seconds(row["ttl_seconds"]),
        source=WantSource(row["source"]),
        parent_want_id=row["parent_want_id"],
        root_want_id=row["root_want_id"],
        state=WantState(row["state"]),
        sla_missed=bool(row["sla_missed"]),
        sla_at_risk=bool(row["sla_at_risk"]),
        reason=row["reason"],
        job_run_id=row["job_run_id"],
        workflow_id=row["workflow_id"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        generation=row["generation"],
        instance_id=row["instance_id"],
        fresh=bool(row["fresh"]),
        fresh_of=row["fresh_of"],
        cause=row["cause"],
        opening=row["opening"],
    )


def check_from_row(row: Any) -> CheckResult:
    return CheckResult(
        name=row["name"],
        ref=row["ref"],
        severity=CheckSeverity(row["severity"]),
        passed=bool(row["passed"]),
        message=row["message"],
        metrics=dict(row["metrics"]),
    )


def instance_from_row(row: Any, checks: Sequence[CheckResult] = ()) -> Instance:
    return Instance(
        instance_id=row["instance_id"],
        ref=row["ref"],
        job_run_id=row["job_run_id"],
        external=bool(row["external"]),
        status=InstanceStatus(row["status"]),
        stale_cause=row["stale_cause"],
        reason=row["reason"],
        created_at=row["created_at"],
        retired_at=row["retired_at"],
        pinned=bool(row["pinned"]),
        location=row["location"],
        facts=row["facts"],
        schema_changed=bool(row["schema_changed"]),
        job_version=row["job_version"],
        checks=list(checks),
        table=table_commit_from_row(row),
    )


def table_commit_from_row(row: Any) -> TableCommit | None:
    """The table commit of an instance read with its commit joined (None: it has none)."""
    if row.get("table_name") is None:
        return None
    return TableCommit(
        format=row["table_format"],
        table=row["table_name"],
        snapshot_id=row["snapshot_id"],
        committed_at=row["committed_at"],
        removed_at=row["removed_at"],
    )


def partition_from_row(row: Any) -> Partition:
    building = row["building_job_run_id"]
    status = PartitionStatus(row["status"])
    return Partition(
        ref=row["ref"],
        # A live partition stays live (its instance readable) while a rebuild holds the lock.
        status=PartitionStatus.building if building and status is not PartitionStatus.live else status,
        instance_id=row["instance_id"],
        built_by=row["built_by"],
        building_job_run_id=building,
        external=bool(row["external"]),
        updated_at=row["updated_at"],
        generation=row["generation"],
        reason=row["reason"],
    )


CHUNK = 500  # ids per IN (...) list


def chunks(ids: Sequence[str]) -> list[list[str]]:
    unique = list(dict.fromkeys(i for i in ids if i))
    return [unique[i : i + CHUNK] for i in range(0, len(unique), CHUNK)]


def waiting_on_count(job_run_id: str) -> Select[Any]:
    """Counts the wants that have not ended that queued the run or delegated to it."""
    linked = s.want_job_runs.join(s.wants, s.wants.c.want_id == s.want_job_runs.c.want_id)
    return (
        select(func.count())
        .select_from(linked)
        .where(
            s.want_job_runs.c.job_run_id == job_run_id,
            s.wants.c.state.not_in([state.value for state in FINAL_WANT_STATES]),
        )
    )


def newest_first(
    table: Table, conditions: list[Any], key: str, limit: int, offset: int, *, filter_first: bool
) -> Select[Any]:
    """A page of ``table`` newest first. With ``filter_first`` the matching rows are selected before
    they are sorted: refs of one period cluster in time, and a plan that walks the ``created_at``
    index backwards would otherwise scan the log back to them (PostgreSQL picks that plan)."""
    if not filter_first:
        source: Any = table
        query = select(table).where(*conditions)
    else:
        source = select(table).where(*conditions).cte("matching").prefix_with("MATERIALIZED")
        query = select(source)
    return query.order_by(source.c.created_at.desc(), source.c[key]).limit(limit).offset(offset)


def ref_conditions(column: Any, ref_prefix: str | None, ref_glob: str | None) -> list[Any]:
    conditions = []
    if ref_prefix:
        conditions.append(like_prefix(column, ref_prefix))
    if ref_glob:
        conditions.append(ref_filter(column, ref_glob))
    return conditions


def event_record(row: Any) -> EventRecord:
    return EventRecord(
        idx=row["idx"],
        type=row["type"],
        at=row["at"],
        want_id=row["want_id"],
        job_run_id=row["job_run_id"],
        ref=row["ref"],
        data=row["data"],
    )


# Rows read inside a transaction -----------------------------------------------------------------
# Statements on every want's path are built once (building one costs more than running it on SQLite).
WANT_ROW = select(s.wants).where(s.wants.c.want_id == bindparam("want_id"))
PARTITION_ROW = select(s.partitions).where(s.partitions.c.ref == bindparam("ref"))


def want_rule_row(row: Mapping[str, Any]) -> WantRow:
    """A want's row as the wants' rules read it."""
    return WantRow(WantState(row["state"]), row["reason"], row["decision_seq"], row["opening"])


def want_row(conn: Connection, want_id: str, required: bool = True) -> Any:
    row = conn.execute(WANT_ROW, {"want_id": want_id}).mappings().first()
    if row is None and required:
        raise NotFoundError(f"no want {want_id!r}")
    return row


# What a decision reads of each want, once per run it is linked to (with the relation), or once with no
# link: one statement. Only those columns: reading a time costs more Python than SQLite's whole lookup.
WANTS_AND_LINKS = (
    select(
        *(
            s.wants.c[name]
            for name in (
                "want_id",
                "ref",
                "source",
                "state",
                "decision_seq",
                "opening",
                "job_run_id",
                "reason",
            )
        ),
        s.want_job_runs.c.job_run_id.label("linked_run"),
        s.want_job_runs.c.relation.label("linked"),
    )
    .select_from(s.wants.outerjoin(s.want_job_runs, s.want_job_runs.c.want_id == s.wants.c.want_id))
    .where(s.one_of(s.wants.c.want_id, "want_ids"))
)


def wants_and_links(conn: Connection, want_ids: list[str]) -> dict[str, tuple[Row, dict[str, str]]]:
    """What a decision reads of each want, and the relation of each run it is linked to. NotFoundError if
    one has no row."""
    found: dict[str, tuple[Row, dict[str, str]]] = {}
    for row in direct.rows(conn, WANTS_AND_LINKS, {"want_ids": want_ids}):
        _, links = found.setdefault(row["want_id"], (row, {}))
        if row["linked_run"] is not None:
            links[row["linked_run"]] = row["linked"]
    for want_id in want_ids:
        if want_id not in found:
            raise NotFoundError(f"no want {want_id!r}")
    return found


# Built once: SQLAlchemy builds and keys a statement made per call again each time, several times the cost
# of running it on SQLite (these are on every decision's path).
JOB_RUN_ROW = select(s.job_runs).where(s.job_runs.c.job_run_id == bindparam("job_run_id"))
PARTITIONS_AT = select(s.partitions).where(s.one_of(s.partitions.c.ref, "refs"))


def job_run_row(conn: Connection, job_run_id: str) -> RowMapping:
    row = conn.execute(JOB_RUN_ROW, {"job_run_id": job_run_id}).mappings().first()
    if row is None:
        raise NotFoundError(f"no job run {job_run_id!r}")
    return row


def partition_row(conn: Connection, ref: str) -> RowMapping | None:
    return conn.execute(PARTITION_ROW, {"ref": ref}).mappings().first()


def partition_at(conn: Connection, ref: str) -> Partition | None:
    row = partition_row(conn, ref)
    return partition_from_row(row) if row is not None else None


def partitions_at(conn: Connection, refs: Iterable[str]) -> dict[str, Partition | None]:
    """``partition_at`` of each ref, in one statement per chunk of refs."""
    found: dict[str, Partition | None] = dict.fromkeys(refs)
    for chunk in chunks(sorted(found)):
        for row in direct.rows(conn, PARTITIONS_AT, {"refs": chunk}):
            found[row["ref"]] = partition_from_row(row)
    return found


def require_partition(conn: Connection, ref: str) -> RowMapping:
    row = partition_row(conn, ref)
    if row is None:
        raise NotFoundError(f"no partition {ref!r} in the build event log")
    return row


def open_among(conn: Connection, want_ids: Iterable[str]) -> set[str]:
    final = [state.value for state in FINAL_WANT_STATES]
    found: set[str] = set()
    for chunk in chunks(sorted(set(want_ids))):
        found.update(
            conn.execute(
                select(s.wants.c.want_id).where(s.wants.c.want_id.in_(chunk), s.wants.c.state.not_in(final))
            ).scalars()
        )
    return found


def backfill_row(conn: Connection, backfill_id: str) -> Any:
    row = conn.execute(select(s.backfills).where(s.backfills.c.backfill_id == backfill_id)).mappings().first()
    if row is None:
        raise NotFoundError(
            f"no backfill {backfill_id!r}; `databuild backfill PATTERN --from --to` starts one"
        )
    return row


_DERIVED_BY = select(s.derivatives.c.want_id, s.derivatives.c.derivative_want_id).where(
    s.one_of(s.derivatives.c.want_id, "ids"), s.derivatives.c.derivative_want_id.is_not(None)
)
_DERIVED_FROM = select(s.derivatives.c.want_id, s.derivatives.c.derivative_want_id).where(
    s.one_of(s.derivatives.c.derivative_want_id, "ids")
)


def derived_below(conn: Connection, roots: Iterable[str]) -> dict[str, set[str]]:
    """Every derivative want below ``roots``, with every want that derived it (derivative -> its
    parents), also those that are not below ``roots``: a derivative may be shared."""
    parents: dict[str, set[str]] = {}
    level = sorted(set(roots))
    while level:
        found: set[str] = set()
        for chunk in chunks(level):
            for parent, child in conn.execute(_DERIVED_BY, {"ids": chunk}):
                if child not in parents:
                    found.add(child)
                parents.setdefault(child, set()).add(parent)
        level = sorted(found)
    for chunk in chunks(sorted(parents)):
        for parent, child in conn.execute(_DERIVED_FROM, {"ids": chunk}):
            parents[child].add(parent)
    return parents


def derived_above(conn: Connection, want_id: str) -> dict[str, set[str]]:
    """The wants ``want_id`` was derived from, transitively: each derivative on the way (the want
    itself included) with every want that derived it (derivative -> its parents)."""
    parents: dict[str, set[str]] = {}
    level = [want_id]
    while level:
        found: set[str] = set()
        for chunk in chunks(level):
            for parent, child in conn.execute(_DERIVED_FROM, {"ids": chunk}):
                parents.setdefault(child, set()).add(parent)
                found.add(parent)
        level = sorted(found - set(parents) - {want_id})
    return parents
