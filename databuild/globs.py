"""Ref glob patterns: ``*`` and ``?`` stay inside one segment, ``**`` spans segments.

A pattern is a list of steps, matched without backtracking: the positions of the ref that the steps
so far can reach are the bits of one integer, and each step maps that set to the next in time linear
in the ref, so a hostile pattern costs no more than a long one (and a pattern has at most
``MAX_WILDCARDS``). In SQL a pattern is a ``LIKE`` that every match satisfies (indexed when the
pattern starts with literal text), narrowed by the exact check: this matcher, registered as a function
on every SQLite connection, or on PostgreSQL a regular expression, which its automaton-based engine
also matches in linear time. Both are bound parameters; every other character matches itself, so
``%`` and ``_`` in refs are never wildcards.
"""

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Boolean
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from databuild.errors import InvalidPatternError
from databuild.refs import MAX_REF_LENGTH

MAX_WILDCARDS = 32
SQL_FUNCTION = "databuild_glob"  # registered on SQLite connections (databuild.bel.engine.transaction)

_ALLOWED = re.compile(r"[A-Za-z0-9_.=\-/*?]+")
_STEP = re.compile(r"\*\*/|\*\*|\*|\?|[^*?]+")

# What one step matches: a literal text, one character of a segment (``?``), characters of a segment
# (``*``), any characters (``**``), or zero or more whole segments (``**/``).
Kind = Literal["text", "?", "*", "**", "**/"]
_WILDCARDS: dict[str, Kind] = {"?": "?", "*": "*", "**": "**", "**/": "**/"}
_REGEX = {"?": "[^/]", "*": "[^/]*", "**": ".*", "**/": "(?:.*/)?"}


class _SlashBits(dict[int, str]):
    """A ``str.translate`` table writing a ref as binary digits: 1 where it has a ``/``."""

    def __missing__(self, _char: int) -> str:
        return "0"


_SLASH_BITS = _SlashBits({ord("/"): "1"})


@dataclass(frozen=True)
class RefGlob:
    pattern: str
    steps: tuple[tuple[Kind, str], ...]

    @property
    def literal(self) -> bool:
        return all(kind == "text" for kind, _ in self.steps)

    @property
    def like(self) -> str:
        """A ``LIKE`` pattern (escape ``\\``) that every matching ref satisfies: the literal text in
        order, each run of wildcards as its ``?`` count of ``_`` and a ``%`` if it has a star."""
        parts = []
        for is_text, run in _runs(self.steps):
            if is_text:
                parts.append("".join(text for _, text in run).translate(_LIKE_ESCAPES))
            else:
                stars = any(kind != "?" for kind, _ in run)
                parts.append("_" * sum(kind == "?" for kind, _ in run) + ("%" if stars else ""))
        return "".join(parts)

    @property
    def regex(self) -> str:
        """The anchored regular expression of the pattern (PostgreSQL's ``~``)."""
        body = "".join(re.escape(text) if kind == "text" else _REGEX[kind] for kind, text in self.steps)
        return f"^{body}$"

    def matches(self, ref: str) -> bool:
        end = len(ref)
        slashes = int(ref.translate(_SLASH_BITS)[::-1] or "0", 2)  # bit p: ref[p] is "/"
        every = (1 << (end + 1)) - 1  # the positions 0..end
        inside = every ^ slashes ^ (1 << end)  # positions of a character that is not "/"
        reached = 1
        for kind, text in self.steps:
            if kind == "?":
                reached = (reached & inside) << 1
            elif kind == "*":
                # Adding a reached bit to its run of non-slash bits carries it to the run's end: the
                # bits that flip are the positions from it to the next "/" (or the end of the ref).
                reached |= (inside + (reached & inside)) ^ inside
            elif kind == "text":
                reached = _after_text(ref, text, reached)
            elif kind == "**":
                reached = every & -(reached & -reached)  # every position from the first one reached
            else:  # "**/": just after any "/" at or beyond the first position reached
                reached |= (slashes & -(reached & -reached)) << 1
            if not reached:
                return False
        return bool(reached >> end & 1)


def _after_text(ref: str, text: str, reached: int) -> int:
    """The positions just after ``text`` where it starts at a reached position."""
    found = 0
    last = reached.bit_length() - 1
    at = ref.find(text, (reached & -reached).bit_length() - 1)
    while 0 <= at <= last:
        if reached >> at & 1:
            found |= 1 << (at + len(text))
        at = ref.find(text, at + 1)
    return found


_LIKE_ESCAPES = str.maketrans({"\\": "\\\\", "%": "\\%", "_": "\\_"})


def _runs(steps: tuple[tuple[Kind, str], ...]) -> Iterator[tuple[bool, list[tuple[Kind, str]]]]:
    """The steps in runs of literal text and runs of wildcards."""
    run: list[tuple[Kind, str]] = []
    for step in steps:
        if run and (run[-1][0] == "text") != (step[0] == "text"):
            yield run[-1][0] == "text", run
            run = []
        run.append(step)
    if run:
        yield run[-1][0] == "text", run


@functools.lru_cache(maxsize=1024)
def compile_glob(pattern: str) -> RefGlob:
    if not pattern:
        raise InvalidPatternError("the ref pattern is empty; use `**` to match every ref")
    if len(pattern) > MAX_REF_LENGTH:
        raise InvalidPatternError(
            f"the ref pattern is {len(pattern)} characters long; the limit is {MAX_REF_LENGTH}"
        )
    if not _ALLOWED.fullmatch(pattern):
        bad = sorted({c for c in pattern if not _ALLOWED.fullmatch(c)})
        raise InvalidPatternError(
            f"ref pattern {pattern!r} has characters refs cannot contain: {''.join(bad)!r}; patterns use "
            "ref characters plus `*` (within a segment), `**` (across segments) and `?`"
        )
    if "***" in pattern:
        raise InvalidPatternError(f"ref pattern {pattern!r} has `***`; use `*` or `**`")
    steps = tuple(
        (_WILDCARDS.get(token, "text"), "" if token in _WILDCARDS else token)
        for token in _STEP.findall(pattern)
    )
    wildcards = sum(kind != "text" for kind, _ in steps)
    if wildcards > MAX_WILDCARDS:
        raise InvalidPatternError(
            f"ref pattern {pattern!r} has {wildcards} wildcards; the limit is {MAX_WILDCARDS}"
        )
    return RefGlob(pattern=pattern, steps=steps)


def sql_glob(pattern: str | None, ref: str | None) -> bool | None:
    """The SQL function ``databuild_glob(pattern, ref)`` on SQLite."""
    if pattern is None or ref is None:
        return None
    return compile_glob(pattern).matches(ref)


def like_prefix(column: Any, prefix: str) -> Any:
    """``column LIKE prefix%`` with ``%``, ``_`` and ``\\`` in the prefix taken literally."""
    return column.like(prefix.translate(_LIKE_ESCAPES) + "%", escape="\\")


def ref_filter(column: Any, pattern: str) -> Any:
    """A SQL condition: ``column`` matches the glob (its ``LIKE`` first, then the exact check)."""
    glob = compile_glob(pattern)
    if glob.literal:
        return column == pattern
    return column.like(glob.like, escape="\\") & _GlobMatch(column, glob.pattern, glob.regex)


class _GlobMatch(FunctionElement[bool]):
    """``ref`` matches a glob: ``databuild_glob(pattern, ref)`` on SQLite, ``ref ~ regex`` on PostgreSQL.
    Arguments: the ref column, the pattern, its regular expression."""

    type = Boolean()
    inherit_cache = True


@compiles(_GlobMatch)
def _sqlite(element: _GlobMatch, compiler: SQLCompiler, **kw: Any) -> str:
    ref, pattern, _regex = element.clauses
    return f"{SQL_FUNCTION}({compiler.process(pattern, **kw)}, {compiler.process(ref, **kw)})"


@compiles(_GlobMatch, "postgresql")
def _postgresql(element: _GlobMatch, compiler: SQLCompiler, **kw: Any) -> str:
    ref, _pattern, regex = element.clauses
    return f"({compiler.process(ref, **kw)} ~ {compiler.process(regex, **kw)})"
