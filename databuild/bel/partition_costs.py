"""The cost report by partition of all time, kept as a table (``partition_costs``): the rows of
``cost_sums(["partition"], None, None)``, each worked out again by that same statement whenever what it
sums changes (an attempt's cost, a delegation, a partition joining a run that has costs), for the
partitions that change touches. A million partitions' report, or its costliest page, is then read from an
index instead of summed (seconds on PostgreSQL)."""

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Select, delete, func, insert, select

from databuild.bel import schema as s
from databuild.bel.cost_sums import FIGURES, cost_sums, typed
from databuild.bel.rows import chunks


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
