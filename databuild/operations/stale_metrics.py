"""`databuild_stale_partitions`: the stale live partitions per job, on `/metrics`.

Staleness is derived from the whole live set and the graph's versions (databuild.views.staleness, a
layer above this one, which the caller hands in as ``count``); a scrape every few seconds would repeat
that work for a figure that moves when builds land. So it is computed at most once per ``every`` and the
last figures are served in between."""

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


class StaleCollector(Collector):
    def __init__(self, count: Callable[[], Mapping[str, int]], *, every: float = STALE_EVERY) -> None:
        self.count = count
        self.every = every
        self._lock = threading.Lock()
        self._last: tuple[float, dict[str, int]] | None = None

    def describe(self) -> Iterable[Metric]:
        return [_family()]  # names only: registering must not compute anything

    def collect(self) -> Iterable[Metric]:
        family = _family()
        with self._lock:  # concurrent scrapes wait for one computation instead of each doing it
            now = time.monotonic()
            if self._last is None or now - self._last[0] >= self.every:
                try:
                    self._last = (now, dict(self.count()))
                except (DBAPIError, DataBuildError) as error:
                    # The graph or the BEL is unavailable: say nothing rather than a wrong zero.
                    log.warning("metrics: stale partitions not counted: %s", error)
                    return [family]
            counts = self._last[1]
        for label in sorted(counts):
            family.add_metric([label], counts[label])
        return [family]


def _family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "databuild_stale_partitions",
        "Live partitions that are stale, by the job that built them (computed at most once a minute)",
        labels=["job_label"],
    )
