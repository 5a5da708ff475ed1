"""Checks: declared tests of one output's data, run on every new instance of it before it goes live.

``@graph.job("daily_users/{date}", checks=[not_null("user_id"), row_count(min=1, severity="warning")])``.
Ready-made checks each take one Spark aggregation over the instance as written (read back from its
location, so they test what readers will read); ``schema`` compares the written schema and runs no Spark
job; ``custom`` runs a function of a ``CheckContext`` and the DataFrame. A factory never raises: what is
wrong with a check is said when the graph declares the job, naming the job (``declare``).
"""

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import Field

from databuild.errors import GraphDefinitionError
from databuild.models import CheckMetric, CheckResult, CheckSeverity, Column, InstanceFacts, Model

log = logging.getLogger(__name__)
MAX_MESSAGE = 2000  # characters of a check's message that are recorded with its result

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_NAME = re.compile(r"[A-Za-z0-9_.,:=()<>\[\] -]{1,200}")
# Spark's spellings of the same type, as a contract may write them, to DataType.simpleString's.
_ALIASES = {"long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint", "bool": "boolean"}
_TYPE_NAMES = frozenset(
    {
        *_ALIASES,
        *("bigint", "int", "smallint", "tinyint", "boolean", "string", "double", "float", "date"),
        *("timestamp", "timestamp_ntz", "binary", "decimal", "array", "map", "struct", "void"),
        *("char", "varchar", "variant", "interval"),
    }
)


class Verdict(Model):
    """What a custom check returns (or a bool: passed or not)."""

    passed: bool
    message: str = ""
    metrics: dict[str, CheckMetric] = Field(default={})


# The instance's data, read back when first called (run_checks reads it once for all its checks).
Data = Callable[[], "DataFrame"]


@dataclass(frozen=True)
class CheckContext:
    """What a check is given besides the data: the instance it checks."""

    spark: "SparkSession"
    ref: str
    instance_id: str
    params: dict[str, str]
    facts: InstanceFacts | None


@dataclass(frozen=True)
class Check:
    """One declared check. ``output`` is the output pattern it checks (None: the job's only output)."""

    name: str
    severity: CheckSeverity | str
    output: str | None

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns it names (a schema contract of the same output must have them)."""
        return ()

    def problems(self) -> list[str]:
        """What is wrong with its arguments, each with the fix."""
        return []

    def evaluate(self, ctx: CheckContext, data: Data) -> Verdict:
        raise NotImplementedError

    def result(self, ctx: CheckContext, data: Data) -> CheckResult:
        """The result on the instance ``data()`` reads back: called only by a check that looks at the
        data, so a schema contract or a row count from the recorded facts costs no Spark work at all."""
        verdict = self.evaluate(ctx, data)
        message = verdict.message or ("passed" if verdict.passed else "failed")
        if len(message) > MAX_MESSAGE:
            # Recorded, alerted and sent to Temporal with the result: a message of megabytes made an activity
            # failure Temporal refuses. The whole text goes to the attempt's log (the job thread's logging).
            log.warning("check %s of %s said (in full): %s", self.name, ctx.ref, message)
            cut = len(message) - MAX_MESSAGE
            message = f"{message[:MAX_MESSAGE]}... ({cut:,} more characters in the job log)"
        return CheckResult(
            name=self.name,
            ref=ctx.ref,
            severity=CheckSeverity(self.severity),
            passed=verdict.passed,
            message=message,
            metrics=verdict.metrics,
        )


def _written_columns(ctx: CheckContext, data: Data) -> list[Column]:
    """The schema as written (recorded with the instance), else as read back: no Spark job either way."""
    if ctx.facts is not None and ctx.facts.columns:
        return list(ctx.facts.columns)
    return [Column(name=f.name, type=f.dataType.simpleString(), nullable=f.nullable) for f in data().schema]


def _absent(columns: Sequence[str], ctx: CheckContext, data: Data) -> Verdict | None:
    have = [c.name for c in _written_columns(ctx, data)]
    absent = [c for c in columns if c not in have]
    if not absent:
        return None
    return Verdict(
        passed=False,
        message=f"the written data has no column {', '.join(absent)} (its columns: {', '.join(have)})",
    )


def _columns_problems(columns: Sequence[str]) -> list[str]:
    if not columns:
        return ["name at least one column"]
    bad = [c for c in columns if not isinstance(c, str) or not c]
    if bad:
        return [f"columns {bad!r} are not column names: give each as a non-empty string"]
    if len(set(columns)) != len(columns):
        return [f"columns {list(columns)} repeat a column"]
    return []


@dataclass(frozen=True)
class RowCount(Check):
    min: int | None = None
    max: int | None = None

    def problems(self) -> list[str]:
        for bound in (self.min, self.max):
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int) or bound < 0):
                return [f"bound {bound!r} is not a row count: give a whole number of at least 0"]
        if self.min is None and self.max is None:
            return ["give min=, max= or both"]
        if self.min is not None and self.max is not None and self.min > self.max:
            return [f"min={self.min} is more than max={self.max}"]
        return []

    def evaluate(self, ctx: CheckContext, data: Data) -> Verdict:
        from pyspark.sql import functions as F

        # The Parquet footers' count, recorded with the instance, needs no Spark job.
        known = ctx.facts.rows if ctx.facts is not None else None
        rows = known if known is not None else int(data().agg(F.count(F.lit(1))).first()[0])  # type: ignore[index]
        low = self.min if self.min is not None else 0
        passed = low <= rows and (self.max is None or rows <= self.max)
        wanted = f"{low:,} to {self.max:,}" if self.max is not None else f"at least {low:,}"
        return Verdict(passed=passed, message=f"{rows:,} rows (expected {wanted})", metrics={"rows": rows})


@dataclass(frozen=True)
class OverColumns(Check):
    """A check over some columns of the data, each of which it needs."""

    names: tuple[str, ...] = ()

    @property
    def columns(self) -> tuple[str, ...]:
        return self.names

    def problems(self) -> list[str]:
        return _columns_problems(self.names)


@dataclass(frozen=True)
class NotNull(OverColumns):
    def evaluate(self, ctx: CheckContext, data: Data) -> Verdict:
        from pyspark.sql import functions as F

        if (absent := _absent(self.names, ctx, data)) is not None:
            return absent
        row = data().agg(*(F.count_if(F.col(c).isNull()).alias(c) for c in self.names)).first()
        assert row is not None
        nulls = {c: int(row[c]) for c in self.names}
        found = [f"{n:,} null {c}" for c, n in nulls.items() if n]
        message = ", ".join(found) if found else f"no nulls in {', '.join(self.names)}"
        return Verdict(passed=not found, message=message, metrics={f"nulls.{c}": n for c, n in nulls.items()})


@dataclass(frozen=True)
class Unique(OverColumns):
    def evaluate(self, ctx: CheckContext, data: Data) -> Verdict:
        from pyspark.sql import functions as F

        if (absent := _absent(self.names, ctx, data)) is not None:
            return absent
        row = (
            data()
            .groupBy(*self.names)
            .count()
            .where(F.col("count") > 1)
            .agg(F.count(F.lit(1)).alias("keys"), F.sum("count").alias("rows"))
            .first()
        )
        assert row is not None
        keys, rows = int(row["keys"]), int(row["rows"] or 0)
        key = ", ".join(self.names)
        message = (
            f"{keys:,} values of ({key}) appear more than once, in {rows:,} rows"
            if keys
            else f"({key}) is unique"
        )
        return Verdict(
            passed=keys == 0, message=message, metrics={"duplicate_keys": keys, "duplicate_rows": rows}
        )


@dataclass(frozen=True)
class AcceptedValues(Check):
    column: str = ""
    values: tuple[Any, ...] = ()

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.column,)

    def problems(self) -> list[str]:
        problems = _columns_problems([self.column])
        if not self.values:
            problems.append("give the accepted values, e.g. accepted_values('kind', ['view', 'purchase'])")
        elif not all(isinstance(v, str | int | float | bool) for v in self.values):
            problems.append(f"values {list(self.values)!r}: give strings or numbers")
        return problems

    def evaluate(self, ctx: CheckContext, data: Data) -> Verdict:
        from pyspark.sql import functions as F

        if (absent := _absent([self.column], ctx, data)) is not None:
            return absent
        # Nulls are not judged here (not_null is): `NOT IN` of a null is null, which count_if skips.
        other = ~F.col(self.column).isin(list(self.values))
        row = (
            data()
            .agg(
                F.count_if(other).alias("unexpected"),
                F.min(F.when(other, F.col(self.column).cast("string"))).alias("example"),
            )
            .first()
        )
        assert row is not None
        unexpected = int(row["unexpected"])
        message = (
            f"{unexpected:,} rows have a {self.column} not accepted, e.g. {row['example']!r}"
            if unexpected
            else f"every {self.column} is one of {list(self.values)!r}"
        )
        return Verdict(passed=unexpected == 0, message=message, metrics={"unexpected": unexpected})


def normal_type(text: str) -> str:
    """A Spark SQL type as ``DataType.simpleString`` writes it (``long`` -> ``bigint``, no spaces)."""
    compact = re.sub(r"\s+", "", text.lower())
    return re.sub(r"[a-z_]+", lambda m: _ALIASES.get(m[0], m[0]), compact)


@dataclass(frozen=True)
class SchemaContract(Check):
    expected: tuple[tuple[str, str], ...] = ()  # (column, type) in order
    exact: bool = False  # no columns besides these

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.expected)

    def problems(self) -> list[str]:
        if not self.expected:
            return ["give the columns and their types, e.g. schema({'user_id': 'bigint'})"]
        problems = _columns_problems(self.columns)
        for name, kind in self.expected:
            base = re.match(r"[a-z_]+", normal_type(kind)) if isinstance(kind, str) else None
            if base is None or base[0] not in _TYPE_NAMES:
                problems.append(
                    f"column {name!r} has type {kind!r}, which is not a Spark SQL type: write it as Spark "
                    "does, e.g. 'bigint', 'string', 'decimal(10,2)', 'array<string>'"
                )
        return problems

    def evaluate(self, ctx: CheckContext, data: Data) -> Verdict:
        written = {c.name: c.type for c in _written_columns(ctx, data)}
        found = []
        for name, kind in self.expected:
            if name not in written:
                found.append(f"no column {name}")
            elif normal_type(written[name]) != normal_type(kind):
                found.append(f"{name} is {written[name]}, not {kind}")
        extra = sorted(set(written) - set(self.columns)) if self.exact else []
        if extra:
            found.append(f"columns not in the contract: {', '.join(extra)}")
        message = "; ".join(found) if found else f"{len(self.expected)} columns as declared"
        return Verdict(passed=not found, message=message, metrics={"violations": len(found)})


CheckFn = Callable[[CheckContext, "DataFrame"], "Verdict | bool"]


@dataclass(frozen=True)
class Custom(Check):
    fn: CheckFn | None = field(default=None, compare=False)

    def problems(self) -> list[str]:
        return [] if callable(self.fn) else [f"{self.fn!r} is not a function of (ctx, frame)"]

    def evaluate(self, ctx: CheckContext, data: Data) -> Verdict:
        assert self.fn is not None
        verdict = self.fn(ctx, data())
        if isinstance(verdict, bool):
            return Verdict(passed=verdict)
        if not isinstance(verdict, Verdict):
            return Verdict(
                passed=False,
                message=f"returned {type(verdict).__name__}; a check returns a Verdict or a bool",
            )
        return verdict


# Factories: what a graph declares. Arguments are checked when the job is declared (``declare``).


def row_count(
    min: int | None = None,
    max: int | None = None,
    *,
    severity: str = "blocking",
    output: str | None = None,
    name: str | None = None,
) -> Check:
    """Between ``min`` and ``max`` rows (either may be left out), from the Parquet footers."""
    default = f"row_count({'' if min is None else min}..{'' if max is None else max})"
    return RowCount(name=name or default, severity=severity, output=output, min=min, max=max)


def not_null(
    *columns: str, severity: str = "blocking", output: str | None = None, name: str | None = None
) -> Check:
    return NotNull(
        name=name or f"not_null({', '.join(columns)})", severity=severity, output=output, names=columns
    )


def unique(
    *columns: str, severity: str = "blocking", output: str | None = None, name: str | None = None
) -> Check:
    """No two rows share the values of ``columns`` (together)."""
    return Unique(
        name=name or f"unique({', '.join(columns)})", severity=severity, output=output, names=columns
    )


def accepted_values(
    column: str,
    values: Sequence[Any],
    *,
    severity: str = "blocking",
    output: str | None = None,
    name: str | None = None,
) -> Check:
    """Every non-null ``column`` is one of ``values``."""
    return AcceptedValues(
        name=name or f"accepted_values({column})",
        severity=severity,
        output=output,
        column=column,
        values=tuple(values) if isinstance(values, list | tuple | set | frozenset) else (),
    )


def schema(
    columns: Mapping[str, str],
    *,
    exact: bool = False,
    severity: str = "blocking",
    output: str | None = None,
    name: str | None = None,
) -> Check:
    """A contract: these columns with these Spark SQL types (``{'user_id': 'bigint'}``); with ``exact``,
    no others. Checked against the schema as written, without a Spark job."""
    expected = tuple(columns.items()) if isinstance(columns, Mapping) else ()
    return SchemaContract(
        name=name or "schema", severity=severity, output=output, expected=expected, exact=exact
    )


def custom(
    fn: CheckFn, *, name: str | None = None, severity: str = "blocking", output: str | None = None
) -> Check:
    """``fn(ctx, frame)`` returns a ``Verdict`` (passed, message, metrics) or a bool."""
    return Custom(
        name=name or str(getattr(fn, "__name__", "custom")), severity=severity, output=output, fn=fn
    )


def declare(label: str, outputs: Sequence[str], checks: Sequence[object] | None) -> tuple[Check, ...]:
    """The checks of job ``label``, each bound to one of its output patterns. Raises
    ``GraphDefinitionError`` naming the job and the check for anything it could not run."""
    bound: list[Check] = []
    for each in checks or ():
        if not isinstance(each, Check):
            raise GraphDefinitionError(
                f"job {label!r}: checks= holds {each!r}; give checks made by databuild.graph.checks "
                "(row_count, not_null, unique, accepted_values, schema, custom)"
            )
        bound.append(_bind(label, outputs, each))
    seen: set[tuple[str | None, str]] = set()
    for check in bound:
        if (check.output, check.name) in seen:
            raise GraphDefinitionError(
                f"job {label!r} declares two checks named {check.name!r} on {check.output}: give one a name="
            )
        seen.add((check.output, check.name))
    for output in outputs:
        _contract_covers(label, output, [c for c in bound if c.output == output])
    return tuple(bound)


def _bind(label: str, outputs: Sequence[str], check: Check) -> Check:
    where = f"job {label!r}: check {check.name!r}"
    if check.severity not in {s.value for s in CheckSeverity}:
        raise GraphDefinitionError(f"{where}: severity={check.severity!r}; choose 'blocking' or 'warning'")
    if not isinstance(check.name, str) or not _NAME.fullmatch(check.name):
        raise GraphDefinitionError(f"{where}: name it with up to 200 letters, digits, spaces or _.,:=()<>[]-")
    problems = check.problems()
    if problems:
        raise GraphDefinitionError(f"{where}: {'; '.join(problems)}")
    if check.output is None:
        if len(outputs) != 1:
            raise GraphDefinitionError(
                f"{where}: the job writes {', '.join(outputs)}; say which with output="
            )
        return _with_output(check, outputs[0])
    if check.output not in outputs:
        raise GraphDefinitionError(
            f"{where} is on {check.output}, which the job does not write (its outputs: {', '.join(outputs)})"
        )
    return check


def _with_output(check: Check, output: str) -> Check:
    from dataclasses import replace

    return replace(check, output=output)


def _contract_covers(label: str, output: str, checks: Sequence[Check]) -> None:
    """Where an output has a schema contract, every column its checks name is in it: a name that is not
    is a typo the first run would only find on the data."""
    contracts = [c for c in checks if isinstance(c, SchemaContract)]
    if not contracts:
        return
    known = {name for contract in contracts for name in contract.columns}
    for check in checks:
        unknown = [c for c in check.columns if c not in known]
        if unknown and not isinstance(check, SchemaContract):
            raise GraphDefinitionError(
                f"job {label!r}: check {check.name!r} on {output} names column {', '.join(unknown)}, "
                f"which its schema contract does not declare ({', '.join(sorted(known))}): fix the name, or "
                "add the column to the contract"
            )
