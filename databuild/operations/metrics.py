"""Prometheus metrics: ``/metrics`` on the web server, and an endpoint of its own on each worker
(``DATABUILD_METRICS_PORT``).

What the BEL holds (wants, job runs, durations, pools) is read when scraped, by a collector over the
projections (``databuild/bel/reads/measures.py``), not counted in this process: every web server and worker
reports the same cluster-wide truth, and a restarted process loses nothing. What only this process
knows (how long its BEL writes take, its CPU, memory and garbage collections) comes beside it.
"""

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.exposition import choose_encoder, start_http_server
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy.exc import DBAPIError

from databuild.bel.engine.transaction import WRITE_SECONDS
from databuild.bel.reads.measures import ClusterCounts, read_counts
from databuild.errors import PortInUseError
from databuild.operations.stale_metrics import StaleCollector

if TYPE_CHECKING:
    from databuild.bel.queries import BelQueries

log = logging.getLogger(__name__)

# Spark jobs take seconds to hours; the last bound is the default job timeout (6 h).
DURATION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0)
# Durations are of each job's latest runs per outcome: a scrape reads at most this many runs of each,
# however long the history, and the quantiles follow how long the job takes now. So the histogram is a
# gauge histogram (a bucket also goes down when slow runs leave the window): quantiles come straight from
# its buckets, without rate().
RECENT_RUNS = 500


class BelCollector(Collector):
    """The cluster's wants, job runs, run durations and pools, read from the BEL at each scrape."""

    def __init__(
        self,
        bel: "BelQueries",
        pools: Mapping[str, int],
        *,
        recent: int = RECENT_RUNS,
        upper_bounds: Sequence[float] = DURATION_BUCKETS,
    ) -> None:
        self.bel = bel
        self.pools = dict(pools)  # named pools of the settings: shown while no run uses them
        self.recent = recent
        self.upper_bounds = list(upper_bounds)

    def describe(self) -> Iterable[Metric]:
        # Names only: registering the collector must not query the BEL.
        return _Families(self.recent).all()

    def collect(self) -> Iterable[Metric]:
        started = time.perf_counter()
        families = _Families(self.recent)
        try:
            with self.bel.snapshot_connection() as conn:  # every count from one state of the log
                counts = read_counts(conn, recent=self.recent, upper_bounds=self.upper_bounds)
        except DBAPIError as error:
            # The process's own metrics still matter (and say the BEL is down) when the database is not.
            log.warning("metrics: the BEL did not answer: %s", error)
            families.up.add_metric([], 0)
            return families.all()
        families.up.add_metric([], 1)
        families.took.add_metric([], time.perf_counter() - started)
        families.fill(counts, self.pools)
        return families.all()


class _Families:
    """The metric families the BEL collector yields, empty until filled from the BEL's counts."""

    def __init__(self, recent: int) -> None:
        self.up = GaugeMetricFamily("databuild_bel_up", "1 if the BEL answered this scrape's queries, else 0")
        self.took = GaugeMetricFamily(
            "databuild_bel_metrics_seconds", "How long this scrape's BEL queries took"
        )
        self.wants = GaugeMetricFamily("databuild_wants", "Wants by state", labels=["state"])
        self.missed = GaugeMetricFamily(
            "databuild_wants_sla_missed",
            "Wants whose SLA passed before their partition was live, by state (the flag stays raised)",
            labels=["state"],
        )
        self.at_risk = GaugeMetricFamily(
            "databuild_wants_sla_at_risk",
            "Wants predicted (p90) to miss their SLA, by state (the flag stays raised)",
            labels=["state"],
        )
        # `job_label`, not `job`: Prometheus gives every target a `job` label of its own.
        self.runs = GaugeMetricFamily(
            "databuild_job_runs", "Job runs by job and state", labels=["job_label", "state"]
        )
        self.durations = GaugeHistogramMetricFamily(
            "databuild_job_run_duration_seconds",
            f"How long the latest {recent} runs of each job that ended in each state took "
            "(their latest attempt)",
            labels=["job_label", "state"],
        )
        self.waiting = GaugeMetricFamily(
            "databuild_pool_waiting", "Job runs waiting for a slot of the pool", labels=["pool"]
        )
        self.running = GaugeMetricFamily("databuild_pool_running", "Slots of the pool held", labels=["pool"])
        self.slots = GaugeMetricFamily("databuild_pool_slots", "Slots of the pool", labels=["pool"])
        # Counters: read whole from the BEL at each scrape, they only grow (a rate() is spend per second).
        self.task_seconds = CounterMetricFamily(
            "databuild_task_seconds",
            "Spark executor run time of the job runs' attempts whose cost is known (Spark's accounting)",
            labels=["job_label"],
        )
        self.avoided = CounterMetricFamily(
            "databuild_builds_avoided",
            "Builds avoided by delegation (a want served by a run it did not start), by job and kind",
            labels=["job_label", "kind"],
        )
        self.check_failures = GaugeMetricFamily(
            "databuild_check_failures",
            "Partition instances whose latest result of a check failed, by job, check and severity",
            labels=["job_label", "check", "severity"],
        )

        self.table_commits = CounterMetricFamily(
            "databuild_table_commits",
            "Commits DataBuild made to a table (an Iceberg snapshot, a Hive re-point), by table and format",
            labels=["table", "format"],
        )
        self.table_failures = CounterMetricFamily(
            "databuild_table_commit_failures",
            "Commits to a table that failed, leaving it behind the BEL until a later one, by table and format",
            labels=["table", "format"],
        )

    def all(self) -> list[Metric]:
        return [
            self.up,
            self.took,
            self.wants,
            self.missed,
            self.at_risk,
            self.runs,
            self.durations,
            self.waiting,
            self.running,
            self.slots,
            self.check_failures,
            self.task_seconds,
            self.avoided,
            self.table_commits,
            self.table_failures,
        ]

    def fill(self, counts: ClusterCounts, pools: Mapping[str, int]) -> None:
        for want in counts.wants:
            self.wants.add_metric([want.state.value], want.wants)
            self.missed.add_metric([want.state.value], want.sla_missed)
            self.at_risk.add_metric([want.state.value], want.sla_at_risk)
        for run in counts.job_runs:
            self.runs.add_metric([run.job_label, run.state.value], run.runs)
        for timed in counts.durations:
            buckets = [
                (str(float(bound)), float(n))  # as the client library writes `le`
                for bound, n in zip(timed.upper_bounds, timed.cumulative, strict=True)
            ]
            self.durations.add_metric(
                [timed.job_label, timed.state.value],
                [*buckets, ("+Inf", float(timed.count))],
                timed.sum_seconds,
            )
        recorded = {pool.pool: pool for pool in counts.pools}
        for name in sorted(recorded.keys() | pools.keys()):
            pool = recorded.get(name)
            self.waiting.add_metric([name], pool.waiting if pool else 0)
            self.running.add_metric([name], pool.running if pool else 0)
            # The size the runs were admitted against wins over this process's settings.
            size = pool.slots if pool and pool.slots else pools.get(name)
            if size is not None:
                self.slots.add_metric([name], size)
        for spent in counts.task_seconds:
            self.task_seconds.add_metric([spent.job_label], spent.task_seconds)
        for avoided in counts.avoided:
            self.avoided.add_metric([avoided.job_label, avoided.kind], avoided.builds)
        for table in counts.tables:
            self.table_commits.add_metric([table.table, table.format], table.commits)
            self.table_failures.add_metric([table.table, table.format], table.failures)
        for failed in counts.check_failures:
            self.check_failures.add_metric(
                [failed.job_label, failed.check, failed.severity.value], failed.instances
            )


def metrics_registry(
    bel: "BelQueries", pools: Mapping[str, int], stale: Callable[[], Mapping[str, int]] | None = None
) -> CollectorRegistry:
    """A registry of its own per app, so several apps in one process (tests, `databuild dev`) never clash:
    the BEL's counts, this process's BEL write latency, and its process and Python runtime figures; with
    ``stale`` (the stale partitions per job), those too."""
    registry = CollectorRegistry()
    registry.register(BelCollector(bel, pools))
    if stale is not None:
        registry.register(StaleCollector(stale))
    registry.register(WRITE_SECONDS)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


def exposition(registry: CollectorRegistry, accept: str | None) -> tuple[bytes, str]:
    """The registry's metrics in the format the scraper accepts (Prometheus text, or OpenMetrics), and its
    content type. Queries the BEL: call it off the event loop."""
    encode, content_type = choose_encoder(accept or "")
    return encode(registry), content_type


@contextlib.contextmanager
def serving_metrics(port: int, bel: "BelQueries", pools: Mapping[str, int]) -> Iterator[None]:
    """A worker's endpoint: ``http://<host>:<port>/metrics`` on all interfaces for the duration of the
    block, on threads of its own (a scrape never waits for the worker's event loop). Port 0: none."""
    if not port:
        yield
        return
    try:
        server, thread = start_http_server(port, registry=metrics_registry(bel, pools))
    except OSError as error:
        raise PortInUseError(
            f"DATABUILD_METRICS_PORT={port}: cannot serve metrics there ({error.strerror or error}); "
            "is another worker on this host using it? Give each worker its own port"
        ) from error
    log.info("metrics at http://0.0.0.0:%d/metrics", port)
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
