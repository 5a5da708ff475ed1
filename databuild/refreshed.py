"""A figure that is costly to compute over a big estate (every stale partition, every partition counted by
pattern) and served often (each scrape, each page view): computed on a thread of its own, one computation
at a time, at most once per ``every`` and never more than a tenth of the time (a computation that took a
minute waits ten before the next). The reader that starts a computation waits for it at most ``patience``
(a small estate's figure is ready by then, so it reads a fresh one); every other reader gets the last
figure at once, so a million partitions never hold up a page or a scrape."""

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Generic, TypeVar

from sqlalchemy.exc import DBAPIError

from databuild.errors import DataBuildError

log = logging.getLogger(__name__)

T = TypeVar("T")
DUTY = 10  # a computation that took d seconds is not started again within DUTY * d seconds


@dataclass(frozen=True)
class Figure(Generic[T]):
    value: T
    at: datetime  # when its computation started: it is at least this recent


class Refreshed(Generic[T]):
    def __init__(self, compute: Callable[[], T], *, name: str, every: float, patience: float) -> None:
        self.compute = compute
        self.name = name
        self.every = every
        self.patience = patience
        self._lock = threading.Lock()
        self._figure: Figure[T] | None = None  # None: not computed yet, or the last computation failed
        self._due_at = 0.0  # time.monotonic() from which a reader starts the next computation
        self._running: threading.Thread | None = None

    def get(self) -> Figure[T] | None:
        """The latest figure (None: none yet, or the BEL or graph was unavailable when last computed)."""
        started: threading.Thread | None = None
        with self._lock:
            if self._running is None and time.monotonic() >= self._due_at:
                started = self._running = threading.Thread(target=self._refresh, name=self.name, daemon=True)
                started.start()
        if started is not None:
            started.join(self.patience)
        with self._lock:
            return self._figure

    def _refresh(self) -> None:
        figure: Figure[T] | None = None
        started, began = datetime.now(UTC), time.monotonic()
        try:
            figure = Figure(self.compute(), started)
        except (DBAPIError, DataBuildError) as error:
            # Unavailable: nothing rather than a wrong figure.
            log.warning("%s: not computed: %s", self.name, error)
        except Exception:  # a bug: logged with its traceback; the next period tries again
            log.exception("%s: not computed", self.name)
        with self._lock:
            done = time.monotonic()
            self._figure, self._running = figure, None
            self._due_at = done + max(self.every, DUTY * (done - began))
