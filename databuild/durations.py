"""Human durations (``9h``, ``30d``, ``1d12h``, ``90m``) to ``timedelta`` and back; timestamps; and the
range rule every time DataBuild computes with obeys: times are UTC, from 0001-01-01 to 9999-12-31
(``datetime``'s range), so a time given with an offset that moves it outside is refused where it is read
(``to_utc``), a duration is at most ``MAX_DURATION`` (``Duration``), and a time plus a duration is computed
with ``later``, which says when the sum is past the calendar's end instead of raising."""

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

from databuild.errors import InvalidDurationError, InvalidInputError

_PART = re.compile(r"(\d+)([wdhms])")
_WRITTEN = re.compile(r"(?:\d+[wdhms])+")
_UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
# Longer is a typo, and a deadline (data time + duration) then stays far inside datetime's range.
MAX_DURATION = timedelta(days=36500)
_TOO_LONG = f"durations are at most {MAX_DURATION.days}d (100 years)"


def parse_duration(text: str) -> timedelta:
    raw = text.strip().lower()
    if raw.startswith("-"):
        raise InvalidDurationError(
            f"duration {text!r} is negative; durations count forward from the data time"
        )
    if not raw or _PART.sub("", raw) != "":
        raise InvalidDurationError(f"cannot read duration {text!r}; write it like 9h, 30d, 1d12h, 90m or 45s")
    parts = _PART.findall(raw)
    # More digits than any duration under the limit has: refused before int() is asked to read them.
    if any(len(number.lstrip("0")) > 12 for number, _ in parts):
        raise InvalidDurationError(f"duration {text[:40]!r} is too long; {_TOO_LONG}")
    seconds = sum(int(number) * _UNITS[unit] for number, unit in parts)
    if seconds > MAX_DURATION.total_seconds():
        raise InvalidDurationError(f"duration {text[:40]!r} is too long; {_TOO_LONG}")
    return timedelta(seconds=seconds)


def parse_setting_duration(text: str) -> timedelta:
    """A duration in a setting or option: as ``parse_duration``, and a bare number counts seconds."""
    return parse_duration(text + "s" if text.strip().isdigit() else text)


def format_duration(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    if seconds == 0:
        return "0s"
    parts = []
    for unit, size in _UNITS.items():
        if unit == "w":
            continue
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def checked_duration(value: timedelta) -> timedelta:
    """``value`` if it is a duration DataBuild takes: not negative, at most ``MAX_DURATION``."""
    if value < timedelta(0):
        raise InvalidDurationError("durations may not be negative; they count forward from the data time")
    if value > MAX_DURATION:
        raise InvalidDurationError(f"{format_duration(value)} is too long; {_TOO_LONG}")
    return value


def _as_written(value: object) -> object:
    """A duration written as on the command line (``1h``, ``1d12h``) read as one; anything else (a number of
    seconds, ISO 8601's ``PT1H``, a timedelta) is left to pydantic."""
    if isinstance(value, str) and _WRITTEN.fullmatch(value.strip().lower()):
        return parse_duration(value)
    return value


# A duration field of a model that crosses a boundary (API bodies, the SDK's specs): written as on the
# command line or as pydantic reads one.
Duration = Annotated[timedelta, BeforeValidator(_as_written), AfterValidator(checked_duration)]
LAST_MOMENT = datetime.max.replace(tzinfo=UTC)


def parse_timestamp(text: str) -> datetime:
    """ISO date or datetime, in UTC; naive values are UTC."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInputError(
            f"cannot read timestamp {text!r}; use ISO 8601 such as 2024-01-07 or 2024-01-07T09:00:00Z"
        ) from None
    return to_utc(value)


def to_utc(value: datetime) -> datetime:
    """``value`` in UTC (a naive value is UTC already). Raises ``InvalidInputError`` for a time whose offset
    moves it outside the calendar (``9999-12-31T23:00-05:00`` is in the year 10000 in UTC)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise InvalidInputError(
            f"{value.isoformat()} is outside the calendar in UTC (0001-01-01 to 9999-12-31); "
            "give a time inside it"
        ) from None


_NUMBER = re.compile(r"-?\d+(?:\.\d*)?")


def _timestamp_as_written(value: object) -> object:
    """A time written as the CLI takes it (``2016-01-01T00``, ``2024-01-07``, ``…Z``) read as the CLI reads
    it, and a number as Unix seconds, however large (pydantic would read a large one as milliseconds);
    a datetime is left to pydantic."""
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        value = float(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(value, UTC)
        except (OverflowError, OSError, ValueError):
            raise InvalidInputError(
                f"{value} seconds since 1970 is outside the calendar (0001-01-01 to 9999-12-31); give a "
                "time inside it, e.g. 2024-01-07 or 2024-01-07T09:00:00Z"
            ) from None
    return parse_timestamp(value) if isinstance(value, str) else value


# A time field of a model that crosses a boundary (API bodies, the SDK's specs): written as the CLI takes
# it, in UTC (naive values are UTC).
Timestamp = Annotated[datetime, BeforeValidator(_timestamp_as_written), AfterValidator(to_utc)]


def later(at: datetime, by: timedelta) -> datetime | None:
    """``at + by``, or None when that is after the calendar's last moment (9999-12-31 23:59:59 UTC)."""
    return at + by if by <= LAST_MOMENT - at else None
