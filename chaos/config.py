"""The chaos run's configuration: its fault kinds, what it wants, and when."""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from typing import Literal

from databuild.models import FINAL_WANT_STATES

FaultKind = Literal["kill_worker", "restart_temporal", "terminate_bel", "bel_outage", "restart_stack"]
FAULT_KINDS: tuple[FaultKind, ...] = (
    "kill_worker",
    "restart_temporal",
    "terminate_bel",
    "bel_outage",
    "restart_stack",
)
# How often each kind is drawn after the first of each: killing the whole stack is the rarest.
FAULT_WEIGHTS: dict[FaultKind, int] = {
    "kill_worker": 3,
    "restart_temporal": 2,
    "terminate_bel": 2,
    "bel_outage": 1,
    "restart_stack": 1,
}
FIRST_DAY = date(2024, 1, 7)  # the first daily_summary wanted; its window starts on 2024-01-01
FINAL = {state.value for state in FINAL_WANT_STATES}


@dataclass(frozen=True)
class ChaosConfig:
    seed: int
    backfill: str = "daily_summary"  # what the backfill wants, one a day from FIRST_DAY
    days: int = 1  # how many (a daily_summary reads 7 days of daily_users, each its day of raw_events)
    extra_wants: int = 20  # concurrent wants for partitions the backfill needs too (other data times)
    workers: int = 2
    fault_gap: tuple[float, float] = (4.0, 10.0)  # seconds between two faults, uniformly drawn
    # How long a BEL outage lasts (a failover: connections terminated, new ones refused), uniformly drawn.
    outage_seconds: tuple[float, float] = (30.0, 60.0)
    news: int = 2  # days whose corrections are announced again after each round (late data), twice each
    kinds: tuple[FaultKind, ...] = FAULT_KINDS  # () for a run without faults (a baseline)
    max_faults: int | None = None  # stop injecting after this many
    # Before the random faults: these, in order, each once a job is running (mid-build).
    script: tuple[FaultKind, ...] = ()
    minutes: float = 0.0  # soak: after the first round, taint-and-rebuild rounds until this long
    settle_seconds: float = 300.0  # after the faults stop, how long every want has to end
    steer: bool = True  # pause, resume, cancel and retry a backfill of the first round meanwhile
    steer_gap: tuple[float, float] = (1.0, 5.0)  # seconds before each steering step, uniformly drawn


Log = Callable[[str], None]
