"""The cost report by job and day of all time, kept in parts (``run_day_costs``): per run and day, the row
``cost_sums`` makes of the run's attempts (want '') and one of each want's delegations to it. Summed by
job and day they are ``cost_sums(["job", "day"], None, None)``, because every figure of that report is a
sum over attempts and over (want, run) pairs, and each rule that counts something once (a run's first
attempt, or its first of the day; a pair's kind, and its first day) looks within one run only. So the
dashboard's plot over time, with its rows by job and by day, sums a narrow row per part instead of
windowing and joining every attempt and delegation (about a second at a million partitions on
PostgreSQL, and growing with them).

- An attempt's cost, or a partition joining a run that has costs, works every part of the run out again,
  restricted to it (once per attempt).
- A delegation works out its (want, run) pair's parts again: a few rows, however many wants delegated to
  that run before."""

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import BindParameter, Connection, Insert, Select, bindparam, delete, func, insert, select

from databuild.bel import schema as s
from databuild.bel.reads.cost_sums import FIGURES, OF_JOB, Key, avoided_sums, cost_sums, typed
from databuild.bel.reads.rows import chunks

KEYS: tuple[Key, ...] = ("job", "day", "run", "want")
_NAMES = (*FIGURES, *OF_JOB)


def _into_parts(summed: Select[Any]) -> Insert:
    rows = summed.subquery("summed")
    keys = [rows.c[f"key_{key}"] for key in KEYS]
    columns = ["job_label", "day", "job_run_id", "want_id", *_NAMES]
    return insert(s.run_day_costs).from_select(columns, select(*keys, *[rows.c[name] for name in _NAMES]))


# Built once, with the runs (and the want) bound when they run: they are on the path of every attempt's
# cost and of every delegation.
_RUNS: BindParameter[Any] = bindparam("runs", expanding=True)
_WANT: BindParameter[Any] = bindparam("want_id")
_PARTS = s.run_day_costs.c
_DELETE_RUNS = delete(s.run_day_costs).where(_PARTS.job_run_id.in_(_RUNS))
_INSERT_RUNS = _into_parts(cost_sums(KEYS, None, None, runs=_RUNS))
_DELETE_PAIR = delete(s.run_day_costs).where(_PARTS.job_run_id.in_(_RUNS), _PARTS.want_id == _WANT)
_INSERT_PAIR = _into_parts(avoided_sums(KEYS, _RUNS, _WANT))


def refresh_run_costs(conn: Connection, runs: Sequence[str] | None) -> None:
    """Work the parts of ``runs`` out again (every part when None) from their attempts and delegations."""
    if runs is None:
        conn.execute(delete(s.run_day_costs))
        conn.execute(_into_parts(cost_sums(KEYS, None, None)))
        return
    for chunk in chunks(runs):
        conn.execute(_DELETE_RUNS, {"runs": chunk})
        conn.execute(_INSERT_RUNS, {"runs": chunk})


def refresh_pair_costs(conn: Connection, pairs: Iterable[tuple[str, str]]) -> None:
    """Work out again the parts of each (want, run) pair's delegations (recorded already)."""
    for want_id, job_run_id in sorted(set(pairs)):
        params = {"runs": [job_run_id], "want_id": want_id}
        conn.execute(_DELETE_PAIR, params)
        conn.execute(_INSERT_PAIR, params)


def kept_days() -> Select[Any]:
    """The report by job and day (``cost_sums(["job", "day"], None, None)``), summed from the parts."""
    return select(
        _PARTS.job_label.label("key_job"),
        _PARTS.day.label("key_day"),
        *[typed(name.removesuffix("_of_job"), func.sum(_PARTS[name])).label(name) for name in _NAMES],
    ).group_by(_PARTS.job_label, _PARTS.day)
