"""`databuild_stale_partitions`: the stale live partitions per job, on `/metrics`.

Staleness is derived from the whole live set and the graph's versions (databuild.views.staleness, a
layer above this one, which the caller hands in as ``count``); a scrape every few seconds would repeat
that work for a figure that moves when builds land. So it is counted at most once per ``every``, in the
background (databuild.refreshed): a scrape waits for a count at most ``patience`` and otherwise serves
the last figures (none before the first count ends, or when the last one failed: never a wrong zero)."""

from collections.abc import Callable, Iterable, Mapping

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from databuild.refreshed import Refreshed

STALE_EVERY = 60.0  # seconds between counts
PATIENCE = 0.5  # seconds a scrape waits for a count


class StaleCollector(Collector):
    def __init__(
        self,
        count: Callable[[], Mapping[str, int]],
        *,
        every: float = STALE_EVERY,
        patience: float = PATIENCE,
    ) -> None:
        self.counts = Refreshed(
            lambda: dict(count()), name="stale partitions", every=every, patience=patience
        )

    def describe(self) -> Iterable[Metric]:
        return [_family()]  # names only: registering must not compute anything

    def collect(self) -> Iterable[Metric]:
        family = _family()
        figure = self.counts.get()
        counts = figure.value if figure is not None else {}
        for label in sorted(counts):
            family.add_metric([label], counts[label])
        return [family]


def _family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "databuild_stale_partitions",
        "Live partitions that are stale, by the job that built them (computed at most once a minute)",
        labels=["job_label"],
    )
