"""Backfills: a named, idempotent set of wants over a time range of one output pattern. The partitions
of a range are a pure function of the request, so the backfill id and every want id are the same each
time the same backfill is asked for."""

import hashlib
from datetime import datetime, timedelta

from pydantic import ConfigDict, Field, computed_field, model_validator

from databuild.durations import Duration, Timestamp
from databuild.models import Model, Want, WantState

MAX_PARTITIONS = 100_000  # a year of hourly partitions is 8,760; more is almost surely a typo
DAY = timedelta(days=1)
HOUR = timedelta(hours=1)


def cancel_reason(backfill_id: str) -> str:
    """Why a want (or a derivative want only it needed) ended when its backfill was cancelled."""
    return f"its backfill {backfill_id} was cancelled"


class BackfillRequest(Model):
    """``pattern`` (one placeholder) for every step from ``start`` to ``end``, both included."""

    pattern: str
    start: Timestamp
    end: Timestamp
    step: Duration = DAY
    sla: Duration | None = None
    ttl: Duration | None = None
    stale_only: bool = Field(
        default=False, description="want only the partitions of the range that are stale, as fresh wants"
    )
    stale_set: str | None = Field(
        default=None,
        max_length=64,
        description="set by DataBuild: which stale instances a stale-only backfill wants (part of its id)",
    )

    @model_validator(mode="after")
    def _range(self) -> "BackfillRequest":
        if self.step <= timedelta(0) or (self.step % HOUR and self.step % DAY):
            raise ValueError(f"step {self.step} must be a whole number of hours or days, e.g. 1d or 1h")
        if self.end < self.start:
            raise ValueError(
                f"the range ends ({self.end:%Y-%m-%d %H:%M}) before it starts ({self.start:%Y-%m-%d %H:%M})"
            )
        count = (self.end - self.start) // self.step + 1
        if count > MAX_PARTITIONS:
            raise ValueError(f"the range has {count} partitions; at most {MAX_PARTITIONS} per backfill")
        return self

    @property
    def backfill_id(self) -> str:
        key = f"{self.pattern}\n{self.start.isoformat()}\n{self.end.isoformat()}\n{self.step.total_seconds()}"
        if self.stale_only:  # only then: every other backfill keeps the id it always had
            key += f"\nstale-only\n{self.stale_set or ''}"
        return "bf-" + hashlib.sha256(key.encode()).hexdigest()[:16]


class BackfillRetry(Model):
    """What retrying a backfill did."""

    backfill_id: str
    reopened: int = Field(description="its wants opened again (each with the ended wants it derived)")
    fail_locked: list[str] = Field(description="partitions still fail-locked: resolve them, then retry again")


class BackfillProgress(Model):
    # Its JSON carries the computed `done` and `finished`; reading it back ignores them.
    model_config = ConfigDict(extra="ignore")

    backfill_id: str
    request: BackfillRequest
    partitions: int
    registered: int = Field(description="wants registered so far")
    started: int = Field(
        default=0, description="wants whose workflows its window has started (in the order of its range)"
    )
    by_state: dict[WantState, int]
    created_at: datetime
    paused: bool = Field(default=False, description="its wants decide nothing new until it is resumed")
    canceled: bool = Field(
        default=False, description="cancelled: wants it registers from then on end cancelled"
    )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def done(self) -> int:
        """Wants that have ended (successful, failed, expired or canceled)."""
        return sum(n for state, n in self.by_state.items() if state.is_final)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def finished(self) -> bool:
        return self.registered == self.partitions and self.done == self.partitions


class WindowStep(Model):
    """Where a backfill's window stands after a step: it starts its wants' workflows in the order of its
    range, at most ``DATABUILD_BACKFILL_WINDOW`` of them open at once."""

    backfill_id: str
    read: int = Field(description="the window's place when the step was planned")
    rewinds: int = Field(default=0, description="how often a retry had rewound the window by then")
    started: int = Field(description="the wants before this place in its range have been started")
    partitions: int
    open: int = Field(description="wants it started that have not ended")
    low: int = Field(description="the first place of a want it started that is open (or `started`)")
    paused: bool
    canceled: bool
    to_start: list[Want] = Field(default=[], description="the wants this step starts")

    @property
    def done(self) -> bool:
        """Nothing left to start (a retry of the backfill starts its window again)."""
        return self.canceled or self.started >= self.partitions
