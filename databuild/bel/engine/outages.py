"""Riding out an outage of the BEL's database (a failover, a restart, its connections terminated): a command
that lost its connection, or found none, is repeated with backoff until the database answers again or
patience runs out. Only for commands that are safe to repeat: every outcome command of a job run is (a
repeat of one that committed after all finds the run ended and records nothing)."""

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from databuild.failures import first_line

log = logging.getLogger(__name__)
T = TypeVar("T")

PATIENCE = timedelta(minutes=10)  # longer than a managed PostgreSQL's failover takes
FIRST_PAUSE = 0.25  # seconds; doubled after each failure, up to LONGEST_PAUSE
LONGEST_PAUSE = 10.0


def is_outage(error: BaseException) -> bool:
    """Whether ``error`` says the database did not answer (rather than refused the command)."""
    if isinstance(error, DBAPIError) and error.connection_invalidated:
        return True
    return isinstance(error, OperationalError | InterfaceError)


def through_outages(
    command: Callable[[], T],
    *,
    patience: timedelta = PATIENCE,
    waiting: Callable[[str], None] = lambda _message: None,
    stop: threading.Event | None = None,
) -> T:
    """``command()``, repeated while the database does not answer, for up to ``patience``; then (or when
    ``stop`` is set) its last error. ``waiting`` hears why each pause is taken (a job's progress line)."""
    deadline = time.monotonic() + patience.total_seconds()
    pause = FIRST_PAUSE
    while True:
        try:
            return command()
        except Exception as error:
            if (
                not is_outage(error)
                or time.monotonic() + pause > deadline
                or (stop is not None and stop.is_set())
            ):
                raise
            cause = first_line(getattr(error, "orig", None) or error)
            message = f"the build event log's database does not answer ({cause}); trying again in {pause:g} s"
            log.warning("%s", message)
            waiting(message)
            if stop is not None:
                stop.wait(pause)
            else:
                time.sleep(pause)
            pause = min(pause * 2, LONGEST_PAUSE)
