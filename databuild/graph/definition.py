"""The user's graph: jobs declared by output patterns, and external inputs."""

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import get_args

from databuild.durations import MAX_DURATION, parse_setting_duration
from databuild.errors import GraphDefinitionError, UnknownJobError
from databuild.graph.checks import Check, declare
from databuild.graph.context import JobContext
from databuild.graph.versions import code_version
from databuild.limits import MAX_ATTEMPTS, MIN_HEARTBEAT_TIMEOUT, MIN_LOOKBACK, MIN_TIMEOUT, shown
from databuild.models import ExecutorKind, TableFormatName
from databuild.refs import validate_ref

JobFn = Callable[..., None]
InputsFn = Callable[..., Sequence[str]]
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SEGMENT_CHARS = r"[A-Za-z0-9_.=-]+"


@dataclass(frozen=True)
class Pattern:
    """An output pattern such as ``daily_summary/{date}``; each placeholder matches within one segment."""

    text: str
    regex: re.Pattern[str] = field(compare=False)
    names: frozenset[str] = field(compare=False)

    @classmethod
    def parse(cls, text: str) -> "Pattern":
        names = _PLACEHOLDER.findall(text)
        if len(names) != len(set(names)):
            raise GraphDefinitionError(f"pattern {text!r} repeats a placeholder")
        hidden = [name for name in names if name.startswith("_")]
        if hidden:
            # A partitioned write names its folders `<placeholder>=<value>`, which Spark and the storage
            # listing skip when they start with '_' (as they skip `_SUCCESS`): such a partition never builds.
            raise GraphDefinitionError(
                f"pattern {text!r}: placeholder {{{hidden[0]}}} starts with '_', which Spark reads as a hidden "
                f"folder; rename it, e.g. {{{hidden[0].lstrip('_') or 'key'}}}"
            )
        literal_check = _PLACEHOLDER.sub("x", text)
        try:
            validate_ref(literal_check)
        except ValueError as error:
            raise GraphDefinitionError(f"pattern {text!r} is not a valid ref pattern: {error}") from None
        parts, last = [], 0
        for match in _PLACEHOLDER.finditer(text):
            parts.append(re.escape(text[last : match.start()]))
            parts.append(f"(?P<{match[1]}>{_SEGMENT_CHARS})")
            last = match.end()
        parts.append(re.escape(text[last:]))
        # A placeholder never spans '/', so one pattern matches refs of one depth only.
        regex = re.compile("".join(parts))
        return cls(text=text, regex=regex, names=frozenset(names))

    def match(self, ref: str) -> dict[str, str] | None:
        found = self.regex.fullmatch(ref)
        return None if found is None else found.groupdict()

    def format(self, params: dict[str, str]) -> str:
        return self.text.format(**params)

    @property
    def placeholders(self) -> tuple[str, ...]:
        """Its placeholders in the order they appear (``names`` is a set)."""
        return tuple(_PLACEHOLDER.findall(self.text))

    @property
    def prefix(self) -> str:
        """Its leading segments without a placeholder (``raw_events`` of ``raw_events/{date}``)."""
        return self.text.split("{", 1)[0].rpartition("/")[0]

    @property
    def glob(self) -> str:
        """The ref glob (databuild.globs) of exactly the refs it matches: a placeholder is one or more
        characters of a segment, ``?*``."""
        return _PLACEHOLDER.sub("?*", self.text)


def _duration(name: str, value: timedelta | str | None, low: timedelta) -> timedelta | None:
    if value is None:
        return None
    try:
        parsed = parse_setting_duration(value) if isinstance(value, str) else value
    except ValueError as error:
        raise GraphDefinitionError(f"{name}={value!r}: {error}") from None
    if not isinstance(parsed, timedelta) or not low <= parsed <= MAX_DURATION:
        raise GraphDefinitionError(
            f"{name}={value!r}: give a duration from {shown(low)} to {shown(MAX_DURATION)}, "
            "e.g. '30m' or timedelta(hours=2)"
        )
    return parsed


def _check_run_limits(
    *, batch: int | None, max_running: int | None, pool: str | None, retries: int | None
) -> None:
    """Refuse a batch size, run bound, pool name or retry count the scheduler could not honour."""
    for name, value in (("batch", batch), ("max_running", max_running)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise GraphDefinitionError(f"{name}={value!r}: give a whole number of at least 1")
    if pool is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+", pool):
        raise GraphDefinitionError(f"pool={pool!r}: a pool name is letters, digits, '_', '.' or '-'")
    if retries is not None and (
        isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries < MAX_ATTEMPTS
    ):
        raise GraphDefinitionError(f"retries={retries!r}: give a whole number from 0 to {MAX_ATTEMPTS - 1}")


# Shown in views next to a 12-character derived hash; longer is a mistake (a whole file, say), not a version.
MAX_VERSION_LENGTH = 64


def _check_version(label: str, version: object) -> None:
    if version is not None and (
        not isinstance(version, str)
        or not version.strip()
        or len(version) > MAX_VERSION_LENGTH
        or version != version.strip()
    ):
        raise GraphDefinitionError(
            f"job {label!r}: version={version!r}: give a short non-empty string of at most "
            f"{MAX_VERSION_LENGTH} characters without surrounding spaces, e.g. version='2' "
            "(or leave it out to derive it from the job's code)"
        )


def _check_executor(executor: ExecutorKind | None) -> None:
    if executor is not None and executor not in get_args(ExecutorKind):
        kinds = ", ".join(repr(k) for k in get_args(ExecutorKind))
        raise GraphDefinitionError(f"executor={executor!r}: choose one of {kinds}")


def _spark_conf(spark_conf: dict[str, str] | None) -> dict[str, str]:
    """A copy of the job's Spark properties, each a ``spark.`` key with a text value."""
    conf = dict(spark_conf or {})
    bad = [
        k
        for k, v in conf.items()
        if not isinstance(k, str) or not k.startswith("spark.") or not isinstance(v, str)
    ]
    if bad:
        raise GraphDefinitionError(
            f"spark_conf keys {bad!r}: give Spark properties as strings, "
            "e.g. {'spark.sql.shuffle.partitions': '64'}"
        )
    return conf


def _output_patterns(outputs: tuple[str, ...], tables: dict[str, str | None] | None) -> tuple[Pattern, ...]:
    """The job's output patterns: ``tables`` may only name them, and they all share one set of
    placeholders, so one ref fixes every sibling output."""
    patterns = tuple(Pattern.parse(o) for o in outputs)
    unknown = sorted(set(tables or {}) - set(outputs))
    if unknown:
        raise GraphDefinitionError(
            f"tables= names {unknown}, which are not outputs of this job {list(outputs)}"
        )
    if len({p.names for p in patterns}) != 1:
        raise GraphDefinitionError(
            f"outputs {list(outputs)} use different placeholders; every output of a job must use the same"
        )
    return patterns


def _table_formats(
    outputs: tuple[str, ...], table_format: TableFormatName | dict[str, TableFormatName] | None
) -> dict[str, TableFormatName]:
    """The table format of each output pattern the job sets one for (the others take the setting's)."""
    if table_format is None:
        return {}
    chosen = dict.fromkeys(outputs, table_format) if isinstance(table_format, str) else dict(table_format)
    unknown = sorted(set(chosen) - set(outputs))
    if unknown:
        raise GraphDefinitionError(
            f"table_format= names {unknown}, which are not outputs of this job {list(outputs)}"
        )
    bad = sorted({str(f) for f in chosen.values()} - set(get_args(TableFormatName)))
    if bad:
        raise GraphDefinitionError(
            f"table_format {', '.join(bad)} is not a table format: use 'hive' or 'iceberg'"
        )
    return chosen


@dataclass(frozen=True)
class Job:
    label: str
    outputs: tuple[Pattern, ...]
    fn: JobFn
    # pattern -> table name (None: no table), and the format of the patterns that set one (the others:
    # DATABUILD_TABLE_FORMAT); see databuild.jobs.tables
    tables: dict[str, str | None] = field(default_factory=dict, compare=False)
    table_formats: dict[str, TableFormatName] = field(default_factory=dict, compare=False)
    inputs: InputsFn | None = field(default=None, compare=False)
    batch: int | None = None  # the most partitions one run builds; None: one per run
    pool: str | None = None  # the named pool (settings) its runs take a slot of
    max_running: int | None = None  # the most runs of this job at once, cluster-wide
    # Overrides of the worker's settings for this job's runs (None: the setting applies).
    retries: int | None = None  # attempts after the first
    timeout: timedelta | None = None  # of one attempt
    heartbeat_timeout: timedelta | None = None
    executor: ExecutorKind | None = None
    spark_conf: dict[str, str] = field(default_factory=dict, compare=False)
    # Each bound to one of its output patterns (databuild.graph.checks).
    checks: tuple[Check, ...] = field(default=(), compare=False)
    # Its code version (declared, or derived from its body): recorded on every instance it builds, and
    # what makes them stale when it changes (databuild.domain.staleness).
    version: str = ""
    # Late data: when a newer instance of an input it read goes live, its live partitions whose data time
    # is within this of now are rebuilt, once (databuild.domain.late_data). None: they only show stale.
    rebuild_on_new_inputs: timedelta | None = None

    def checks_of(self, ref: str) -> list[Check]:
        """The checks of the output pattern ``ref`` matches."""
        pattern = next((p for p in self.outputs if p.match(ref) is not None), None)
        return [] if pattern is None else [c for c in self.checks if c.output == pattern.text]

    def run(self, ctx: JobContext, params: dict[str, str], partitions: list[dict[str, str]]) -> None:
        """A batch job is called with every partition of its run (``fn(ctx, partitions)``); any other job
        with its placeholders (``fn(ctx, **params)``)."""
        if self.batch is not None:
            self.fn(ctx, partitions)
        else:
            self.fn(ctx, **params)

    def declared_inputs(self, params: dict[str, str]) -> list[str]:
        """The inputs the job declares it reads for ``params`` (none if it declares nothing). Raises
        ``GraphDefinitionError`` naming the job if the declaration fails or names a malformed ref."""
        if self.inputs is None:
            return []
        try:
            refs = [validate_ref(ref) for ref in self.inputs(**params)]
        except Exception as error:
            raise GraphDefinitionError(
                f"the inputs job {self.label!r} declares for {params} cannot be listed: {error}"
            ) from None
        return sorted(set(refs))

    def outputs_of(self, params: dict[str, str]) -> list[str]:
        return [pattern.format(params) for pattern in self.outputs]

    def inputs_by_output(
        self, members: Sequence[dict[str, str]], refs: Sequence[str]
    ) -> dict[str, list[str]]:
        """Which of ``refs`` (what a batch run read, or found missing) each output of the batch's
        ``members`` needs: the ones its own partition declares, and any that no partition declares
        (which might be anyone's)."""
        declared = [set(self.declared_inputs(params)) for params in members]
        anyones = [ref for ref in refs if not any(ref in mine for mine in declared)]
        return {
            out: sorted({*(ref for ref in refs if ref in mine), *anyones})
            for params, mine in zip(members, declared, strict=True)
            for out in self.outputs_of(params)
        }


@dataclass(frozen=True)
class JobTarget:
    """A job bound to concrete outputs: what one job run builds."""

    job: Job
    params: dict[str, str]
    outputs: list[str]


@dataclass(frozen=True)
class Resolution:
    """How the graph produces a ref: by a job, or it is external (announced by someone else)."""

    ref: str
    target: JobTarget | None

    @property
    def external(self) -> bool:
        return self.target is None


class Graph:
    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: dict[str, Job] = {}
        self._external: list[Pattern] = []

    def job(
        self,
        *outputs: str,
        label: str | None = None,
        tables: dict[str, str | None] | None = None,
        table_format: TableFormatName | dict[str, TableFormatName] | None = None,
        inputs: InputsFn | None = None,
        batch: int | None = None,
        pool: str | None = None,
        max_running: int | None = None,
        retries: int | None = None,
        timeout: timedelta | str | None = None,
        heartbeat_timeout: timedelta | str | None = None,
        executor: ExecutorKind | None = None,
        spark_conf: dict[str, str] | None = None,
        checks: Sequence[Check] | None = None,
        version: str | None = None,
        rebuild_on_new_inputs: timedelta | str | None = None,
    ) -> Callable[[JobFn], JobFn]:
        """Declare a job: ``@graph.job("daily_summary/{date}", "top_spenders/{date}")``.

        Every output pattern must use the same placeholders, so one ref fixes all sibling outputs.
        The function is called as ``fn(ctx, **placeholders)``. ``tables`` names the catalog table of an
        output pattern (default: its first segment, for ``table/{column}/...`` patterns), or leaves it
        out with None; ``table_format`` (``"iceberg"``, or one per pattern) sets the format of its tables
        where it differs from `DATABUILD_TABLE_FORMAT`. ``inputs`` declares what the job reads, as a
        function of its placeholders (``inputs=lambda date: [f"raw/{date}"]``): a want starts derivative
        wants for those before the first run instead of after a dep-miss; anything else the body reads is
        still discovered.

        ``batch=31`` lets one run build up to 31 partitions wanted together: the function is then called
        as ``fn(ctx, partitions)`` with one dict of placeholders per partition. ``max_running`` bounds the
        runs of this job at once, and ``pool`` names a pool of ``DATABUILD_POOLS`` whose slots it shares
        with other jobs; both hold cluster-wide.

        ``retries``, ``timeout`` (of one attempt), ``heartbeat_timeout`` and ``executor`` override the
        worker's `DATABUILD_JOB_ATTEMPTS`, `DATABUILD_JOB_TIMEOUT`, `DATABUILD_JOB_HEARTBEAT_TIMEOUT` and
        `DATABUILD_EXECUTOR` for this job (durations as ``timedelta`` or text such as ``"2h"``), within the
        settings' ranges (databuild.limits: retries 0 to 999, timeout from 1s, heartbeat_timeout from 4s);
        ``spark_conf`` sets Spark properties for its runs only (SQL properties on the worker's session;
        any property with ``executor="submit"``).

        ``checks`` test each new instance of an output before it goes live (databuild.graph.checks):
        ``checks=[not_null("user_id"), row_count(min=1, severity="warning")]``; in a job with several
        outputs each names its output pattern with ``output=``.

        ``version`` is the job's code version (default: derived from its body, so comments and
        formatting do not count); a change makes the partitions it built stale. With
        ``rebuild_on_new_inputs=timedelta(days=2)`` (or ``"2d"``), a newer instance of an input that goes
        live (late data) rebuilds the job's partitions that read the older one and whose data time is
        within two days of now, once each; older ones show stale (``databuild stale``).
        """
        if not outputs:
            raise GraphDefinitionError("a job needs at least one output pattern")
        _check_run_limits(batch=batch, max_running=max_running, pool=pool, retries=retries)
        limits = {
            "timeout": _duration("timeout", timeout, MIN_TIMEOUT),
            "heartbeat_timeout": _duration("heartbeat_timeout", heartbeat_timeout, MIN_HEARTBEAT_TIMEOUT),
            "rebuild_on_new_inputs": _duration("rebuild_on_new_inputs", rebuild_on_new_inputs, MIN_LOOKBACK),
        }
        _check_executor(executor)
        conf = _spark_conf(spark_conf)
        patterns = _output_patterns(outputs, tables)
        formats = _table_formats(outputs, table_format)

        def register(fn: JobFn) -> JobFn:
            name = label or fn.__name__
            if name in self._jobs:
                raise GraphDefinitionError(f"graph {self.name!r} already has a job labelled {name!r}")
            _check_version(name, version)
            declared = declare(name, outputs, checks)
            try:
                derived = code_version(fn) if version is None else version
            except GraphDefinitionError as error:
                raise GraphDefinitionError(f"job {name!r}: {error}") from None
            self._jobs[name] = Job(
                label=name,
                outputs=patterns,
                fn=fn,
                tables=dict(tables or {}),
                table_formats=formats,
                inputs=inputs,
                batch=batch,
                pool=pool,
                max_running=max_running,
                retries=retries,
                executor=executor,
                spark_conf=conf,
                checks=declared,
                version=derived,
                **limits,
            )
            return fn

        return register

    def external(self, *patterns: str) -> None:
        """Declare refs this graph never builds: they become available when announced (``publish``)."""
        self._external.extend(Pattern.parse(p) for p in patterns)

    @property
    def external_patterns(self) -> list[str]:
        return [p.text for p in self._external]

    @property
    def patterns(self) -> list[Pattern]:
        """Every pattern of the graph: the external ones, then each job's outputs."""
        return [*self._external, *(p for job in self._jobs.values() for p in job.outputs)]

    def pattern_for(self, ref: str) -> Pattern | None:
        """The pattern ``ref`` matches, if any (the graph refuses patterns that overlap)."""
        return next((p for p in self.patterns if p.match(ref) is not None), None)

    @property
    def jobs(self) -> list[Job]:
        return list(self._jobs.values())

    def job_by_label(self, label: str) -> Job:
        try:
            return self._jobs[label]
        except KeyError:
            raise UnknownJobError(f"graph {self.name!r} has no job labelled {label!r}") from None

    def resolve(self, ref: str) -> Resolution:
        validate_ref(ref)
        if any(p.match(ref) is not None for p in self._external):
            return Resolution(ref=ref, target=None)
        matches: list[JobTarget] = []
        for job in self._jobs.values():
            for pattern in job.outputs:
                params = pattern.match(ref)
                if params is not None:
                    matches.append(JobTarget(job, params, job.outputs_of(params)))
        if not matches:
            known = ", ".join(p.text for j in self._jobs.values() for p in j.outputs) or "none"
            raise UnknownJobError(
                f"no job in graph {self.name!r} produces {ref!r} (known output patterns: {known})"
            )
        if len(matches) > 1:
            labels = ", ".join(m.job.label for m in matches)
            raise GraphDefinitionError(f"ref {ref!r} matches more than one job: {labels}")
        return Resolution(ref=ref, target=matches[0])
