"""Scheduled wants: a pattern such as ``daily_summary/{date}`` filled from a schedule's time.

Placeholders: ``{date}`` (2024-01-07), ``{hour}`` (2024-01-07T05), ``{month}`` (2024-01), ``{year}``.
The want's data timestamp is the scheduled time itself, so a re-run or a backfill of the same time is
the same want (idempotent)."""

import string
from datetime import UTC, datetime

from databuild.errors import InvalidInputError
from databuild.refs import validate_ref

FORMATS = {"date": "%Y-%m-%d", "hour": "%Y-%m-%dT%H", "month": "%Y-%m", "year": "%Y"}


def fill(pattern: str, at: datetime) -> str:
    """The ref ``pattern`` names at ``at`` (UTC)."""
    at = at.astimezone(UTC)
    return pattern.format(**{name: at.strftime(fmt) for name, fmt in FORMATS.items()})


def check_pattern(pattern: str) -> None:
    fields = [f for _, f, _, _ in string.Formatter().parse(pattern) if f is not None]
    unknown = sorted(set(fields) - FORMATS.keys())
    if unknown:
        raise InvalidInputError(
            f"schedule pattern {pattern!r} has unknown placeholder(s) {', '.join(unknown)}; "
            f"use {', '.join('{' + f + '}' for f in FORMATS)}"
        )
    if not fields:
        raise InvalidInputError(f"schedule pattern {pattern!r} has no time placeholder, e.g. {{date}}")
    validate_ref(fill(pattern, datetime(2024, 1, 7, 5, tzinfo=UTC)))


SCHEDULE_PREFIX = "want-schedule:"


def schedule_id(pattern: str) -> str:
    return SCHEDULE_PREFIX + pattern
