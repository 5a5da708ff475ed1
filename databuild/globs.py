"""Ref glob patterns: ``*`` and ``?`` stay inside one segment, ``**`` spans segments.

A pattern becomes a literal prefix (for an indexed ``LIKE``) plus an anchored regular expression,
both passed to SQL as bound parameters; every other character matches itself, so ``%`` and ``_``
in refs are never wildcards.
"""

import re
from dataclasses import dataclass
from typing import Any

from databuild.errors import InvalidPatternError
from databuild.refs import MAX_REF_LENGTH

_ALLOWED = re.compile(r"[A-Za-z0-9_.=\-/*?]+")


@dataclass(frozen=True)
class RefGlob:
    pattern: str
    prefix: str
    regex: str

    def matches(self, ref: str) -> bool:
        return re.fullmatch(self.regex, ref) is not None


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
    parts: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            parts.append("(?:.*/)?")  # zero or more whole segments
            i += 3
        elif pattern.startswith("**", i):
            parts.append(".*")
            i += 2
        elif pattern[i] == "*":
            parts.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            parts.append("[^/]")
            i += 1
        else:
            parts.append(re.escape(pattern[i]))
            i += 1
    prefix = re.split(r"[*?]", pattern, maxsplit=1)[0]
    return RefGlob(pattern=pattern, prefix=prefix, regex="^" + "".join(parts) + "$")


def like_prefix(column: Any, prefix: str) -> Any:
    """``column LIKE prefix%`` with ``%``, ``_`` and ``\\`` in the prefix taken literally."""
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return column.like(escaped + "%", escape="\\")


def ref_filter(column: Any, pattern: str) -> Any:
    """A SQL condition: ``column`` matches the glob (indexed prefix, then the regex)."""
    glob = compile_glob(pattern)
    if "*" not in pattern and "?" not in pattern:
        return column == pattern
    condition = column.regexp_match(glob.regex)
    return like_prefix(column, glob.prefix) & condition if glob.prefix else condition
