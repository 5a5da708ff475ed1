"""The cost report by partition of all time, kept as a table (``partition_costs``): the rows of
``cost_sums(["partition"], None, None)``, kept so as what they sum is recorded. A million partitions'
report, or its costliest page, is then read from an index instead of summed (seconds on PostgreSQL).

- An attempt's cost, or a partition joining a run that has costs, works the rows of the run's outputs out
  again by that same statement, restricted to them (once per attempt).
- A delegation adds what it avoided to its partition's row (``add_delegations``): a few indexed lookups,
  however many wants delegated to that partition before (a popular partition's thousands would make
  working its row out again cost more with each)."""

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Select, delete, func, insert, select, update

from databuild.bel import schema as s
from databuild.bel.cost_sums import FIGURES, ZERO, cost_sums, typed
from databuild.bel.rows import chunks
from databuild.domain import events as ev


def refresh_partition_costs(conn: Connection, refs: Sequence[str] | None) -> None:
    """Work out the rows of ``refs`` again (all rows when None) from the attempts and delegations."""
    if refs is None:
        conn.execute(delete(s.partition_costs))
        _insert(conn, None)
        return
    for chunk in chunks(sorted(set(refs))):
        conn.execute(delete(s.partition_costs).where(s.partition_costs.c.ref.in_(chunk)))
        _insert(conn, chunk)


def _insert(conn: Connection, refs: Sequence[str] | None) -> None:
    summed = cost_sums(["partition"], None, None, refs).subquery("summed")
    rows = select(summed.c.key_partition, *[summed.c[name] for name in FIGURES])
    conn.execute(insert(s.partition_costs).from_select(["ref", *FIGURES], rows))


def refresh_run_outputs(conn: Connection, job_run_id: str) -> None:
    """Work out again the rows of a run's outputs (its cost is shared among them all)."""
    o = s.job_run_outputs.c
    refs = conn.execute(select(o.ref).where(o.job_run_id == job_run_id)).scalars().all()
    refresh_partition_costs(conn, refs)


def add_delegations(conn: Connection, delegations: Sequence[ev.Delegation]) -> None:
    """Count delegations (not recorded yet) in their partitions' rows, by the rules of ``cost_sums``: a
    want's first delegation to a run for a partition is a build avoided, of its kind (a later active one
    makes it active), unvalued while the run's cost is unknown; each delegation saves the run's share of
    the partition when its cost is known. A run not in the log counts for nothing."""
    kinds: dict[tuple[str, str, str], str | None] = {}
    runs: dict[str, tuple[int, float | None] | None] = {}
    for delegation in delegations:
        pair = (delegation.want_id, delegation.delegated_to, delegation.ref)
        if pair not in kinds:
            kinds[pair] = _first_kind(conn, *pair)
        if delegation.delegated_to not in runs:
            runs[delegation.delegated_to] = _priced(conn, delegation.delegated_to)
        run = runs[delegation.delegated_to]
        if run is None:
            continue
        parts, task_seconds = run
        added: dict[str, float | int] = {
            "task_seconds_saved": 0.0 if task_seconds is None else task_seconds / parts
        }
        before, kinds[pair] = kinds[pair], min(kinds[pair] or delegation.kind, delegation.kind)
        if before is None:
            added |= {"builds_avoided": 1, f"avoided_{delegation.kind}": 1}
            added["unvalued_avoided"] = int(task_seconds is None)
        elif before == "historical" and delegation.kind == "active":
            added |= {"avoided_historical": -1, "avoided_active": 1}
        _add(conn, delegation.ref, added)


def _first_kind(conn: Connection, want_id: str, job_run_id: str, ref: str) -> str | None:
    """The kind a want's delegations to a run for a partition count as ("active" < "historical"); None
    if it has none."""
    d = s.delegations.c
    found = select(func.min(d.kind)).where(d.want_id == want_id, d.delegated_to == job_run_id, d.ref == ref)
    kind: str | None = conn.execute(found).scalar()
    return kind


def _priced(conn: Connection, job_run_id: str) -> tuple[int, float | None] | None:
    """A run's number of outputs and its attempts' task-seconds (None unless every attempt's is known);
    None if the run is not in the log."""
    r, c = s.job_runs.c, s.job_run_costs.c
    parts = conn.execute(select(func.json_array_length(r.outputs)).where(r.job_run_id == job_run_id)).scalar()
    if not parts:
        return None
    attempts, known, task_seconds = conn.execute(
        select(func.count(), func.count(c.task_seconds), func.sum(c.task_seconds)).where(
            c.job_run_id == job_run_id
        )
    ).one()
    return parts, (task_seconds if attempts and known == attempts else None)


def _add(conn: Connection, ref: str, added: dict[str, float | int]) -> None:
    p = s.partition_costs.c
    changed = conn.execute(
        update(s.partition_costs)
        .where(p.ref == ref)
        .values({name: p[name] + value for name, value in added.items()})
    )
    if changed.rowcount == 0:
        conn.execute(insert(s.partition_costs).values(ref=ref, **{**ZERO, **added}))


def kept_rows() -> Select[Any]:
    """Every row, named as ``cost_sums`` names them."""
    p = s.partition_costs.c
    return select(p.ref.label("key_partition"), *[p[name] for name in FIGURES])


def costliest_kept(count: int) -> Select[Any]:
    """The ``count`` rows that spent most (most first, by index)."""
    p = s.partition_costs.c
    return kept_rows().order_by(p.task_seconds.desc(), p.ref).limit(count)


def kept_totals() -> Select[Any]:
    """How many rows there are (``rows_in_all``), and the total of each figure (``total_<figure>``)."""
    p = s.partition_costs.c
    return select(
        func.count().label("rows_in_all"),
        *[typed(name, func.sum(p[name])).label(f"total_{name}") for name in FIGURES],
    )
