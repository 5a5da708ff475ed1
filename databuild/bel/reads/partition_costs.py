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

from sqlalchemy import (
    BindParameter,
    Connection,
    Insert,
    Select,
    bindparam,
    delete,
    func,
    insert,
    select,
    update,
)

from databuild.bel import schema as s
from databuild.bel.reads.cost_sums import FIGURES, ZERO, Refs, cost_sums, typed
from databuild.bel.reads.rows import chunks
from databuild.domain import events as ev


def _summed_into_rows(refs: Refs) -> Insert:
    summed = cost_sums(["partition"], None, None, refs).subquery("summed")
    rows = select(summed.c.key_partition, *[summed.c[name] for name in FIGURES])
    return insert(s.partition_costs).from_select(["ref", *FIGURES], rows)


# Built once, with the refs bound when they run (building the sums took milliseconds, on every attempt).
_REFS: BindParameter[Any] = bindparam("refs", expanding=True)
_DELETE_ROWS = delete(s.partition_costs).where(s.partition_costs.c.ref.in_(_REFS))
_INSERT_ROWS = _summed_into_rows(_REFS)
_OUTPUT_REFS = select(s.job_run_outputs.c.ref).where(
    s.job_run_outputs.c.job_run_id == bindparam("job_run_id")
)


def refresh_partition_costs(conn: Connection, refs: Sequence[str] | None) -> None:
    """Work out the rows of ``refs`` again (all rows when None) from the attempts and delegations."""
    if refs is None:
        conn.execute(delete(s.partition_costs))
        conn.execute(_summed_into_rows(None))
        return
    for chunk in chunks(sorted(set(refs))):
        conn.execute(_DELETE_ROWS, {"refs": chunk})
        conn.execute(_INSERT_ROWS, {"refs": chunk})


def refresh_run_outputs(conn: Connection, job_run_id: str) -> None:
    """Work out again the rows of a run's outputs (its cost is shared among them all)."""
    refresh_partition_costs(conn, conn.execute(_OUTPUT_REFS, {"job_run_id": job_run_id}).scalars().all())


def add_delegations(conn: Connection, delegations: Sequence[ev.Delegation]) -> None:
    """Count delegations (not recorded yet) in their partitions' rows, by the rules of ``cost_sums``: a
    want's first delegation to a run for a partition is a build avoided, of its kind (a later active one
    makes it active), unvalued while the run's cost is unknown; each delegation saves the run's share of
    the partition when its cost is known. A run not in the log counts for nothing. Two statements each,
    built once: this is on the path of every decision that delegates."""
    kinds: dict[tuple[str, str, str], str | None] = {}
    for delegation in delegations:
        pair = (delegation.want_id, delegation.delegated_to, delegation.ref)
        key = {"want_id": pair[0], "run": pair[1], "ref": pair[2]}
        earlier, parts, attempts, known, task_seconds = conn.execute(_FACTS, key).one()
        if not parts:
            continue
        valued = bool(attempts) and known == attempts
        first = kinds.get(pair, earlier)
        kinds[pair] = min(first or delegation.kind, delegation.kind)
        added = dict.fromkeys(_AVOIDED, 0) | {"saved": task_seconds / parts if valued else 0.0}
        if first is None:
            added |= {
                "builds_avoided": 1,
                f"avoided_{delegation.kind}": 1,
                "unvalued_avoided": int(not valued),
            }
        elif first == "historical" and delegation.kind == "active":
            added |= {"avoided_historical": -1, "avoided_active": 1}
        if conn.execute(_ADD, {"pk": delegation.ref, **added}).rowcount == 0:
            row = {**ZERO, **{name: added[name] for name in _AVOIDED}, "task_seconds_saved": added["saved"]}
            conn.execute(insert(s.partition_costs).values(ref=delegation.ref, **row))


def _facts() -> Select[Any]:
    """Of a want's delegation to a run for a partition (bound as ``want_id``, ``run``, ``ref``): the kind
    its earlier ones count as ("active" < "historical"; None if none), the run's number of outputs (None
    if it is not in the log), and its attempts, those of known cost and their task-seconds."""
    d, r, c = s.delegations.c, s.job_runs.c, s.job_run_costs.c
    run: Any = bindparam("run")
    of_run = [c.job_run_id == run]
    return select(
        select(func.min(d.kind))
        .where(d.want_id == bindparam("want_id"), d.delegated_to == run, d.ref == bindparam("ref"))
        .scalar_subquery(),
        select(func.json_array_length(r.outputs)).where(r.job_run_id == run).scalar_subquery(),
        select(func.count()).where(*of_run).scalar_subquery(),
        select(func.count(c.task_seconds)).where(*of_run).scalar_subquery(),
        select(func.sum(c.task_seconds)).where(*of_run).scalar_subquery(),
    )


_FACTS = _facts()
_AVOIDED = ("builds_avoided", "avoided_active", "avoided_historical", "unvalued_avoided")
_ADD = (
    update(s.partition_costs)
    .where(s.partition_costs.c.ref == bindparam("pk"))
    .values(
        {name: s.partition_costs.c[name] + bindparam(name) for name in _AVOIDED}
        | {"task_seconds_saved": s.partition_costs.c.task_seconds_saved + bindparam("saved")}
    )
)


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
