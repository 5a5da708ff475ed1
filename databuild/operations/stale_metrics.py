"""`databuild_stale_partitions`: the stale live partitions per job, on `/metrics`.

Staleness is derived from the whole live set and the graph's versions (databuild.views.staleness, a
layer above this one, which the caller hands in as ``count``); a scrape every few seconds would repeat
that work for a figure that moves when builds land. So it is computed at most once per ``every``, on a
thread of its own: a scrape waits for it at most ``patience`` (a small estate's figures are ready at
once) and otherwise serves the last figures, so a million live partitions never hold up ``/metrics``."""

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.exc import DBAPIError

from databuild.errors import DataBuildError

log = logging.getLogger(__name__)

STALE_EVERY = 60.0  # seconds between computations
PATIENCE = 0.5  # seconds a scrape waits for a computation it started


class StaleCollector(Collector):
    def __init__(
        self,
        count: Callable[[], Mapping[str, int]],
        *,
        every: float = STALE_EVERY,
        patience: float = PATIENCE,
    ) -> None:
        self.count = count
        self.every = every
        self.patience = patience
        self._lock = threading.Lock()
        self._figures: dict[str, int] | None = None  # None: not counted (yet, or the last count failed)
        self._counted_at: float | None = None
        self._counting: threading.Thread | None = None

    def describe(self) -> Iterable[Metric]:
        return [_family()]  # names only: registering must not compute anything

    def collect(self) -> Iterable[Metric]:
        with self._lock:  # one computation at a time, however many scrapes ask
            due = self._counted_at is None or time.monotonic() - self._counted_at >= self.every
            if due and self._counting is None:
                self._counting = threading.Thread(target=self._recount, name="stale-metrics", daemon=True)
                self._counting.start()
            counting = self._counting
        if counting is not None:
            counting.join(self.patience)
        with self._lock:
            counts = self._figures or {}
        family = _family()
        for label in sorted(counts):
            family.add_metric([label], counts[label])
        return [family]

    def _recount(self) -> None:
        figures: dict[str, int] | None = None
        try:
            figures = dict(self.count())
        except (DBAPIError, DataBuildError) as error:
            # The graph or the BEL is unavailable: say nothing rather than a wrong zero.
            log.warning("metrics: stale partitions not counted: %s", error)
        except Exception:  # a bug: logged with its traceback, and the next period tries again
            log.exception("metrics: stale partitions not counted")
        with self._lock:
            self._figures, self._counted_at, self._counting = figures, time.monotonic(), None


def _family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "databuild_stale_partitions",
        "Live partitions that are stale, by the job that built them (computed at most once a minute)",
        labels=["job_label"],
    )
