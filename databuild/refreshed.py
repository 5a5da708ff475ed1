"""A figure that is costly to compute over a big estate (every stale partition, every partition counted by
pattern) and served often (each scrape, each page view): computed on a thread of its own, at most once
per ``every``, one computation at a time. A reader waits for a computation at most ``patience`` (a small
estate's figure is ready by then, so it always reads a fresh one) and otherwise gets the last figure, so a
million partitions never hold up a page or a scrape."""

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
        self._done_at: float | None = None
        self._running: threading.Thread | None = None

    def get(self) -> Figure[T] | None:
        """The latest figure (None: none yet, or the BEL or graph was unavailable when last computed)."""
        with self._lock:
            due = self._done_at is None or time.monotonic() - self._done_at >= self.every
            if due and self._running is None:
                self._running = threading.Thread(target=self._refresh, name=self.name, daemon=True)
                self._running.start()
            running = self._running
        if running is not None:
            running.join(self.patience)
        with self._lock:
            return self._figure

    def _refresh(self) -> None:
        figure: Figure[T] | None = None
        started = datetime.now(UTC)
        try:
            figure = Figure(self.compute(), started)
        except (DBAPIError, DataBuildError) as error:
            # Unavailable: nothing rather than a wrong figure.
            log.warning("%s: not computed: %s", self.name, error)
        except Exception:  # a bug: logged with its traceback; the next period tries again
            log.exception("%s: not computed", self.name)
        with self._lock:
            self._figure, self._done_at, self._running = figure, time.monotonic(), None
