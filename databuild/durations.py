"""Human durations (``9h``, ``30d``, ``1d12h``, ``90m``) to ``timedelta`` and back."""

import re
from datetime import UTC, datetime, timedelta

from databuild.errors import InvalidDurationError, InvalidInputError

_PART = re.compile(r"(\d+)([wdhms])")
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


def parse_timestamp(text: str) -> datetime:
    """ISO date or datetime; naive values are UTC."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInputError(
            f"cannot read timestamp {text!r}; use ISO 8601 such as 2024-01-07 or 2024-01-07T09:00:00Z"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)
