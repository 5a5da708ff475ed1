"""Cost reports summed by the database: what each job, day or partition spent, and what delegation saved
(``databuild.domain.cost`` names the figures), without reading every attempt and delegation into Python.
A million partitions' report is one grouped statement, and a page of it is its costliest rows.

The rules of ``databuild.domain.cost``, in SQL:
- a run's cost is split evenly among its outputs (``share``: integer figures by integer division), and a
  row takes the shares of the outputs that fall in it;
- a build is counted once per row, however many of its outputs fall in it;
- a want that delegated to a run avoided one build, counted by the kind of its first delegation to it, and
  worth the shares of the outputs it delegated;
- an attempt whose cost is unknown is counted as unknown, never as zero; a build avoided from a run whose
  cost is unknown, or not recorded yet, is unvalued."""

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import (
    BigInteger,
    BindParameter,
    Float,
    Select,
    String,
    and_,
    case,
    cast,
    func,
    literal,
    select,
    union_all,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from databuild.bel import schema as s
from databuild.bel.schema import ONCE_PER_JOB
from databuild.domain.cost import CostBy
from databuild.globs import ref_filter

SPENT = ("task_seconds", "cpu_seconds", "input_bytes", "output_bytes", "shuffle_bytes", "tasks")
COUNTS = ("builds_run", "unknown_attempts", "builds_avoided", "avoided_active", "avoided_historical")
FIGURES = (*COUNTS, "unvalued_avoided", *SPENT, "task_seconds_saved")
# The partitions whose rows are summed: all (None), these, or an expanding parameter bound when the statement
# runs (so that it is built once: ``databuild.bel.reads.partition_costs``).
Refs = Sequence[str] | BindParameter[Any] | None
# Keys beyond a report's: rows kept per run, and per want that delegated to it (``databuild.bel.reads.run_costs``).
Key = CostBy | Literal["run", "want"]
_FLOATS = {"task_seconds", "cpu_seconds", "task_seconds_saved"}
ZERO: dict[str, float | int] = {name: 0.0 if name in _FLOATS else 0 for name in FIGURES}
OF_JOB = tuple(f"{name}_of_job" for name in ONCE_PER_JOB)


class _UtcDay(FunctionElement[str]):
    """The UTC day (YYYY-MM-DD) of a timestamp column."""

    type = String()
    inherit_cache = True


@compiles(_UtcDay)
def _sqlite_day(element: _UtcDay, compiler: SQLCompiler, **kw: Any) -> str:
    # SQLite holds UTC timestamps as ISO text (UTCDateTime).
    return f"substr({compiler.process(element.clauses, **kw)}, 1, 10)"


@compiles(_UtcDay, "postgresql")
def _postgresql_day(element: _UtcDay, compiler: SQLCompiler, **kw: Any) -> str:
    return f"to_char({compiler.process(element.clauses, **kw)} AT TIME ZONE 'UTC', 'YYYY-MM-DD')"


def _key_columns(keys: Sequence[Key], job_label: Any, at: Any, ref: Any, run: Any, want: Any) -> list[Any]:
    column = {"job": job_label, "day": _UtcDay(at), "partition": ref, "run": run, "want": want}
    return [column[key].label(f"key_{key}") for key in keys]


def _outputs(run: Any) -> Any:
    """How many outputs a run has (the parts of its even split; never zero, which a run cannot have)."""
    return func.nullif(func.json_array_length(run.outputs, type_=BigInteger), 0)


def _over(figure: Any, parts: Any, kind: Any) -> Any:
    """``figure / parts`` as both backends divide: integers by integer division, like ``share``."""
    return figure.op("/", return_type=kind)(parts)


def _attempts(since: datetime | None, refs: Refs, runs: Refs) -> Any:
    """Each attempt (recorded from ``since`` on, of a run that wrote one of ``refs``, of one of ``runs``;
    None: any) with its share of each of its run's outputs, worked out once per attempt, not once per
    output; and whether it is the first attempt of its run in the range (``first_of_run``) and on its day
    (``first_of_day``), so a build is counted once per row."""
    costs, r = s.job_run_costs.c, s.job_runs.c

    def figure(name: str, kind: Any = BigInteger) -> Any:
        return cast(costs.cost[name].as_string(), kind)

    # Materialized: each run's outputs are counted, and its figures read from the attempt's cost, once per
    # attempt (the database would inline them into every figure, and sort the cost's JSON by run and day).
    counted = (
        select(costs.job_run_id, costs.attempt, costs.job_label, costs.recorded_at, costs.task_seconds)
        .add_columns(
            _outputs(r).label("parts"),
            figure("cpu_seconds", Float).label("cpu_seconds"),
            *[
                func.coalesce(figure(name), 0).label(name)
                for name in ("input_bytes", "output_bytes", "tasks")
            ],
            func.coalesce(figure("shuffle_read_bytes"), 0).label("shuffle_read_bytes"),
            func.coalesce(figure("shuffle_write_bytes"), 0).label("shuffle_write_bytes"),
        )
        .select_from(s.job_run_costs.join(s.job_runs, r.job_run_id == costs.job_run_id))
        .where(
            *([] if since is None else [costs.recorded_at >= since]),
            *_of_runs_writing(costs.job_run_id, refs),
            *([] if runs is None else [costs.job_run_id.in_(runs)]),
        )
        .cte("counted")
        .prefix_with("MATERIALIZED")
    )
    c, parts = counted.c, counted.c.parts

    def shares(name: str) -> Any:
        return _over(c[name], parts, BigInteger)

    day = _UtcDay(c.recorded_at)
    return select(
        c.job_run_id,
        c.job_label,
        c.recorded_at,
        parts,
        case((c.task_seconds.is_(None), 1), else_=0).label("unknown"),
        case((c.attempt == func.min(c.attempt).over(partition_by=c.job_run_id), 1), else_=0).label(
            "first_of_run"
        ),
        case((c.attempt == func.min(c.attempt).over(partition_by=[c.job_run_id, day]), 1), else_=0).label(
            "first_of_day"
        ),
        _over(c.task_seconds, parts, Float).label("task_seconds"),
        _over(c.cpu_seconds, parts, Float).label("cpu_seconds"),
        shares("input_bytes").label("input_bytes"),
        shares("output_bytes").label("output_bytes"),
        (shares("shuffle_read_bytes") + shares("shuffle_write_bytes")).label("shuffle_bytes"),
        shares("tasks").label("tasks"),
    ).subquery("attempts")


def _of_runs_writing(job_run_id: Any, refs: Refs) -> list[Any]:
    """No condition when ``refs`` is None; else: runs that wrote one of them (all of such a run's rows)."""
    o = s.job_run_outputs.c
    return [] if refs is None else [job_run_id.in_(select(o.job_run_id).where(o.ref.in_(refs)))]


def _spent(
    keys: Sequence[Key], pattern: str | None, since: datetime | None, refs: Refs, runs: Refs = None
) -> Select[Any]:
    """Per key: the attempts' shares of their runs, builds run and unknown attempts."""
    a, o = _attempts(since, refs, runs), s.job_run_outputs.c
    source: Any = a
    if "partition" in keys:
        # A row per output of each attempt (that the pattern keeps): each adds its share.
        source = a.join(s.job_run_outputs, o.job_run_id == a.c.job_run_id)
        outputs: Any = literal(1)
        ref: Any = o.ref
        conditions = ([] if pattern is None else [ref_filter(o.ref, pattern)]) + (
            [] if refs is None else [o.ref.in_(refs)]
        )
    elif pattern is not None:
        # The outputs of each attempt's run that the pattern keeps, all in the attempt's job's or day's row.
        matching = (
            select(o.job_run_id, func.count().label("outputs"))
            .where(ref_filter(o.ref, pattern))
            .group_by(o.job_run_id)
            .subquery("matching")
        )
        source = a.join(matching, matching.c.job_run_id == a.c.job_run_id)
        outputs, ref, conditions = matching.c.outputs, literal(""), []
    else:
        outputs, ref, conditions = a.c.parts, literal(""), []  # every output in its job's or day's row
    first = a.c.first_of_day if "day" in keys else a.c.first_of_run
    figures = {
        "builds_run": func.sum(first),
        "builds_run_of_job": func.sum(a.c.first_of_run),
        "unknown_attempts": func.sum(a.c.unknown),
        **{name: func.sum(a.c[name] * outputs) for name in SPENT},
    }
    columns = _key_columns(keys, a.c.job_label, a.c.recorded_at, ref, a.c.job_run_id, literal(""))
    selected = _all_figures(figures, _by_job_and_day(keys))
    return select(*columns, *selected).select_from(source).where(*conditions).group_by(*columns)


def _priced(refs: Refs, runs: Refs) -> Any:
    """Per run (delegated to for one of ``refs``, and one of ``runs``, unless None): its attempts'
    task-seconds, and how many attempts it has and how many of them have a known cost."""
    d, c = s.delegations.c, s.job_run_costs.c
    return (
        select(
            c.job_run_id,
            func.sum(c.task_seconds).label("task_seconds"),
            func.count().label("attempts"),
            func.count(c.task_seconds).label("known"),
        )
        .where(
            *([] if refs is None else [c.job_run_id.in_(select(d.delegated_to).where(d.ref.in_(refs)))]),
            *([] if runs is None else [c.job_run_id.in_(runs)]),
        )
        .group_by(c.job_run_id)
        .subquery("priced")
    )


def _avoided(
    keys: Sequence[Key],
    pattern: str | None,
    since: datetime | None,
    refs: Refs,
    runs: Refs = None,
    want: Any = None,
) -> Select[Any]:
    """Per key: the builds avoided, by kind, and what they saved (or that they are unvalued); of the
    delegations to ``runs`` (by ``want``) only, unless None."""
    d, r = s.delegations.c, s.job_runs.c
    priced = _priced(refs, runs)
    valued = and_(priced.c.attempts.is_not(None), priced.c.known == priced.c.attempts)
    conditions = _delegations_of(pattern, since, refs, runs, want)
    columns = _key_columns(keys, r.job_label, d.at, d.ref, d.delegated_to, d.want_id)
    day = _UtcDay(d.at)
    # "active" < "historical": a want delegates actively first. Rows by job and day also say whether a
    # want's delegations to a run on this day are its first day's, and its kind over every day: its job's
    # row counts the pair once, by that kind (as a report by job does).
    kind = func.min(d.kind)
    pair = [d.want_id, d.delegated_to]
    first_day, pair_kind = (
        (
            case((day == func.min(day).over(partition_by=pair), 1), else_=0),
            func.min(kind).over(partition_by=pair),
        )
        if "day" in keys
        else (literal(1), kind)
    )
    # A run no longer in the log is left out (inner join): there is nothing to value it at.
    pairs = (
        select(
            *columns,
            first_day.label("first_day"),
            kind.label("kind"),
            pair_kind.label("pair_kind"),
            func.sum(case((valued, _over(priced.c.task_seconds, _outputs(r), Float)), else_=0.0)).label(
                "saved"
            ),
            func.max(case((valued, 0), else_=1)).label("unvalued"),
        )
        .select_from(
            s.delegations.join(s.job_runs, r.job_run_id == d.delegated_to).outerjoin(
                priced, priced.c.job_run_id == d.delegated_to
            )
        )
        .where(*conditions)
        .group_by(*columns, d.want_id, d.delegated_to)
        .subquery("pairs")
    )
    p = pairs.c
    key_columns = [p[f"key_{key}"] for key in keys]

    def counted(kind: Any, of: str) -> Any:
        return case((kind == of, 1), else_=0)

    figures = {
        "builds_avoided": func.count(),
        "builds_avoided_of_job": func.sum(p.first_day),
        "avoided_active": func.sum(counted(p.kind, "active")),
        "avoided_active_of_job": func.sum(counted(p.pair_kind, "active") * p.first_day),
        "avoided_historical": func.sum(counted(p.kind, "historical")),
        "avoided_historical_of_job": func.sum(counted(p.pair_kind, "historical") * p.first_day),
        "unvalued_avoided": func.sum(p.unvalued),
        "unvalued_avoided_of_job": func.sum(p.unvalued * p.first_day),
        "task_seconds_saved": func.sum(p.saved),
    }
    return select(*key_columns, *_all_figures(figures, _by_job_and_day(keys))).group_by(*key_columns)


def _delegations_of(
    pattern: str | None, since: datetime | None, refs: Refs, runs: Refs, want: Any
) -> list[Any]:
    """The conditions on the delegations an ``_avoided`` sums (none for each of its arguments None)."""
    d = s.delegations.c
    return (
        ([] if since is None else [d.at >= since])
        + ([] if pattern is None else [ref_filter(d.ref, pattern)])
        + ([] if refs is None else [d.ref.in_(refs)])
        + ([] if runs is None else [d.delegated_to.in_(runs)])
        + ([] if want is None else [d.want_id == want])
    )


def _by_job_and_day(keys: Sequence[Key]) -> bool:
    return "job" in keys and "day" in keys


def _names(once_per_job: bool) -> list[str]:
    return [*FIGURES, *(OF_JOB if once_per_job else ())]


def _all_figures(given: dict[str, Any], once_per_job: bool = False) -> list[Any]:
    """Every figure, in ``FIGURES`` order (and the counts once per job, for rows by job and day): those
    given, zero for the rest (the two halves are unioned)."""
    return [
        given.get(name, literal(ZERO[name.removesuffix("_of_job")])).label(name)
        for name in _names(once_per_job)
    ]


def typed(name: str, summed: Any) -> Any:
    # PostgreSQL sums integers as numeric: back to the figure's type.
    return cast(func.coalesce(summed, 0), Float if name in _FLOATS else BigInteger)


def cost_sums(
    keys: Sequence[Key], pattern: str | None, since: datetime | None, refs: Refs = None, runs: Refs = None
) -> Select[Any]:
    """A row per key (``key_job``, ``key_day``, ``key_partition``, those asked for) with every figure; with
    rows by partition, of the partitions ``refs`` only unless None (``databuild.bel.reads.partition_costs``);
    of the attempts of ``runs`` and the delegations to them only, unless None (``run_costs``)."""
    return _summed(keys, _spent(keys, pattern, since, refs, runs), _avoided(keys, pattern, since, refs, runs))


def avoided_sums(keys: Sequence[Key], runs: Refs, want: Any) -> Select[Any]:
    """``cost_sums`` of the delegations by ``want`` to ``runs`` alone (rows by want and run: a new
    delegation changes its pair's rows only, ``databuild.bel.reads.run_costs``)."""
    return _summed(keys, _avoided(keys, None, None, None, runs, want))


def _summed(keys: Sequence[Key], *halves: Select[Any]) -> Select[Any]:
    both = union_all(*halves).subquery("halves")
    key_columns = [both.c[f"key_{key}"] for key in keys]
    names = _names(_by_job_and_day(keys))
    figures = [typed(name.removesuffix("_of_job"), func.sum(both.c[name])).label(name) for name in names]
    return select(*key_columns, *figures).group_by(*key_columns)


def costliest_sums(key: CostBy, pattern: str | None, since: datetime | None, count: int) -> Select[Any]:
    """The ``count`` rows of ``cost_sums`` that spent most (most first), each carrying how many rows there
    are in all (``rows_in_all``) and the totals of every row (``total_<figure>``)."""
    rows = cost_sums([key], pattern, since).subquery("summed")
    return (
        select(
            rows,
            func.count().over().label("rows_in_all"),
            *[typed(name, func.sum(rows.c[name]).over()).label(f"total_{name}") for name in FIGURES],
        )
        .order_by(rows.c.task_seconds.desc(), rows.c[f"key_{key}"])
        .limit(count)
    )
