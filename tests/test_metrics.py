"""Prometheus metrics, scraped over HTTP from the real web server and read back against what the BEL holds
(SQLite and PostgreSQL): wants by state and SLA flags, job runs by job and state, run durations, pool
queues, and this process's BEL write latency. (A real worker's endpoint: tests/test_metrics_stack.py.)"""

import socket
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from databuild.bel import BuildEventLog
from databuild.bel.engine.transaction import WRITE_SECONDS
from databuild.config import Settings
from databuild.domain.decisions import Execute
from databuild.domain.pools import pools_of
from databuild.errors import InvalidInputError, PortInUseError
from databuild.graph import Graph
from databuild.models import CheckResult, CheckSeverity, InstanceRef, JobRun, WantSpec, WantState
from databuild.operations.metrics import DURATION_BUCKETS, BelCollector, exposition, serving_metrics
from databuild.testing import free_port
from databuild.web import create_app, serving, web_context
from tests.conftest import require_postgres
from tests.test_bel import reset_postgres

Labels = frozenset[tuple[str, str]]
Samples = dict[tuple[str, Labels], float]

graph = Graph("metered")
graph.job("one/{n}", label="one", max_running=1)(lambda ctx, n: None)
graph.job("free/{n}", label="free")(lambda ctx, n: None)
POOLS = {"etl": 2, "idle": 3}  # named pools no run uses: shown with their size
T0 = datetime(2024, 1, 1, tzinfo=UTC)
DURATION = "databuild_job_run_duration_seconds"


def parse(body: str) -> Samples:
    """Every sample of a Prometheus text exposition, by name and labels."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for metric in text_string_to_metric_families(body)
        for sample in metric.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def series(samples: Samples, name: str, *keys: str) -> set[tuple[str, ...]]:
    """The label values (``keys``, in order) of every sample named ``name``."""
    return {tuple(dict(labels)[k] for k in keys) for n, labels in samples if n == name}


async def scrape(url: str) -> Samples:
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.get(url)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(response.text)


def read_directly(bel: BuildEventLog, recent: int, bounds: Sequence[float] = DURATION_BUCKETS) -> Samples:
    registry = CollectorRegistry()
    registry.register(BelCollector(bel, {}, recent=recent, upper_bounds=bounds))
    registry.register(WRITE_SECONDS)
    return parse(exposition(registry, None)[0].decode())


# SQLite is the unit tier's; PostgreSQL is a server.
@pytest.fixture(params=[pytest.param("sqlite", marks=pytest.mark.unit), "postgresql"])
def bel(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BuildEventLog]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'bel.sqlite'}"
    else:
        url = require_postgres()
        reset_postgres(url)
    log = BuildEventLog.create(url)
    yield log
    log.dispose()


def want(bel: BuildEventLog, ref: str) -> tuple[str, str]:
    """Register a want for ``ref`` (with an SLA) and decide it: (want id, its new job run)."""
    spec = WantSpec(ref=ref, data_timestamp=T0, sla=timedelta(hours=1))
    bel.wants.register(spec)
    verdict = bel.decisions.decide(spec.want_id, 1, graph.resolve(ref))
    assert isinstance(verdict, Execute)
    return spec.want_id, verdict.job_run_id


def checked(ref: str, name: str, severity: str, passed: bool = False) -> CheckResult:
    return CheckResult(name=name, ref=ref, severity=CheckSeverity(severity), passed=passed, message="-")


def seconds(run: JobRun) -> float:
    assert run.started_at is not None and run.ended_at is not None
    return (run.ended_at - run.started_at).total_seconds()


def assert_durations(
    samples: Samples, runs: list[JobRun], bounds: Sequence[float] = DURATION_BUCKETS
) -> None:
    """The duration histogram of each job and outcome counts exactly the runs the BEL timed."""
    timed = [r for r in runs if r.started_at is not None and r.ended_at is not None]
    keys = {(r.job_label, r.state.value) for r in timed}
    assert series(samples, f"{DURATION}_gcount", "job_label", "state") == keys
    for label, state in keys:
        took = [seconds(r) for r in timed if (r.job_label, r.state.value) == (label, state)]
        assert value(samples, f"{DURATION}_gcount", job_label=label, state=state) == len(took)
        assert value(samples, f"{DURATION}_gsum", job_label=label, state=state) == pytest.approx(
            sum(took),
            abs=1e-3 * len(took),  # SQLite counts time in whole milliseconds
        )
        assert value(samples, f"{DURATION}_bucket", job_label=label, state=state, le="+Inf") == len(took)
        for bound in bounds:
            if any(abs(t - bound) < 1e-3 for t in took):
                continue  # SQLite's milliseconds may put a duration this close on the other side
            expected = sum(t <= bound for t in took)
            got = value(samples, f"{DURATION}_bucket", job_label=label, state=state, le=str(bound))
            assert got == expected, (label, state, bound)


async def test_the_web_server_reports_what_the_log_holds(bel: BuildEventLog, tmp_path: Path) -> None:
    writes_before = value(read_directly(bel, 500), "databuild_bel_write_seconds_count")

    # A job bounded to one run at a time: the first run takes the slot, the other two wait for it.
    one = [want(bel, f"one/{n}") for n in range(3)]
    job = next(j for j in graph.jobs if j.label == "one")
    assert [bel.pools.request_admission(run, pools_of(job, POOLS)) for _, run in one] == [True, False, False]
    # Runs of another job that end in each way.
    free = [want(bel, f"free/{n}") for n in range(4)]
    written = [InstanceRef(ref=f"free/{n}", instance_id=f"i{n}") for n in range(4)]
    for (_, run), instance in zip(free, written, strict=True):
        bel.job_runs.start(run, 1, "w", [instance])
    # Checks: a warning that failed on a published instance, a blocking one that kept another unpublished.
    bel.job_runs.succeed(
        free[0][1], [], [written[0]], 1, checks={"free/0": [checked("free/0", "rows", "warning")]}
    )
    bel.job_runs.succeed(
        free[1][1], [], [written[1]], 1, checks={"free/1": [checked("free/1", "rows", "warning", True)]}
    )
    bel.job_runs.record_checks(
        free[2][1],
        1,
        [written[2]],
        {"free/2": [checked("free/2", "rows", "warning"), checked("free/2", "ids", "blocking")]},
    )
    bel.job_runs.fail(free[2][1], "boom")  # free/3 goes on running
    # SLA flags: one want missed its SLA and was built after all, one missed it and is open, one at risk.
    bel.wants.mark_sla_missed(free[0][0], T0 + timedelta(hours=1))
    bel.wants.finish(free[0][0], WantState.successful)
    bel.wants.mark_sla_missed(free[3][0], T0 + timedelta(hours=1))
    bel.wants.mark_sla_at_risk(free[1][0], T0 + timedelta(hours=1), T0 + timedelta(hours=2), None)

    settings = Settings(home=tmp_path, database_url=bel.url, pools="etl=2,idle=3")
    async with serving(create_app(web_context(settings, bel)), "127.0.0.1", free_port()) as base:
        samples = await scrape(f"{base}/metrics")
        async with httpx.AsyncClient() as client:
            open_metrics = await client.get(
                f"{base}/metrics", headers={"accept": "application/openmetrics-text; version=1.0.0"}
            )
    assert open_metrics.headers["content-type"].startswith("application/openmetrics-text")
    assert open_metrics.text.endswith("# EOF\n")

    assert value(samples, "databuild_bel_up") == 1
    wants = bel.wants.query(limit=1000)
    for state in WantState:
        assert value(samples, "databuild_wants", state=state.value) == sum(w.state is state for w in wants)
        flags = {
            "databuild_wants_sla_missed": sum(w.state is state and w.sla_missed for w in wants),
            "databuild_wants_sla_at_risk": sum(w.state is state and w.sla_at_risk for w in wants),
        }
        for name, count in flags.items():
            assert value(samples, name, state=state.value) == count
    assert value(samples, "databuild_wants_sla_missed", state="successful") == 1
    assert value(samples, "databuild_wants_sla_missed", state="building") == 1
    assert value(samples, "databuild_wants_sla_at_risk", state="building") == 1

    runs = bel.job_runs.query(limit=1000)
    by_job = {(r.job_label, r.state.value) for r in runs}
    assert series(samples, "databuild_job_runs", "job_label", "state") == by_job
    for label, outcome in by_job:
        assert value(samples, "databuild_job_runs", job_label=label, state=outcome) == sum(
            (r.job_label, r.state.value) == (label, outcome) for r in runs
        )
    assert value(samples, "databuild_job_runs", job_label="free", state="succeeded") == 2
    assert_durations(samples, runs)

    assert series(samples, "databuild_check_failures", "job_label", "check", "severity") == {
        ("free", "rows", "warning"),
        ("free", "ids", "blocking"),
    }
    assert value(samples, "databuild_check_failures", job_label="free", check="rows", severity="warning") == 2
    assert value(samples, "databuild_check_failures", job_label="free", check="ids", severity="blocking") == 1

    # One run holds the only slot of the job's own pool and two wait; configured pools show while unused.
    assert value(samples, "databuild_pool_running", pool="job:one") == 1
    assert value(samples, "databuild_pool_waiting", pool="job:one") == 2
    assert value(samples, "databuild_pool_slots", pool="job:one") == 1
    for pool, slots in POOLS.items():
        assert value(samples, "databuild_pool_waiting", pool=pool) == 0
        assert value(samples, "databuild_pool_slots", pool=pool) == slots

    # This process's own figures: each store call above that wrote is one more write observed.
    assert value(samples, "databuild_bel_write_seconds_count") >= writes_before + 20
    assert value(samples, "process_cpu_seconds_total") > 0


@pytest.mark.unit
def test_durations_are_of_the_latest_runs_of_each_job_and_outcome(tmp_path: Path) -> None:
    bel = BuildEventLog.create(f"sqlite:///{tmp_path / 'bel.sqlite'}")
    runs = [want(bel, f"free/{n}")[1] for n in range(3)]
    for n, run in enumerate(runs):  # the first takes longer than the bucket of 0.1 s; each ends later
        bel.job_runs.start(run, 1, "w")
        time.sleep(0.2 if n == 0 else 0)
        bel.job_runs.succeed(run, [], [])
    found = {run.job_run_id: run for run in bel.job_runs.by_id(runs)}
    slow, *latest = (found[run] for run in runs)
    assert seconds(slow) > 0.1
    assert_durations(read_directly(bel, recent=3, bounds=[0.1]), [slow, *latest], [0.1])
    assert_durations(read_directly(bel, recent=2, bounds=[0.1]), latest, [0.1])
    bel.dispose()


@pytest.mark.unit
async def test_a_scrape_while_the_bel_is_down_says_so(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        url = f"postgresql+psycopg://postgres@127.0.0.1:{closed.getsockname()[1]}/none"
    bel = BuildEventLog(url)
    port = free_port()
    with serving_metrics(port, bel, {"etl": 2}):
        samples = await scrape(f"http://127.0.0.1:{port}/metrics")
    assert value(samples, "databuild_bel_up") == 0
    assert not series(samples, "databuild_wants", "state")
    assert value(samples, "process_cpu_seconds_total") > 0  # the process's own figures still come
    assert "the BEL did not answer" in caplog.text
    bel.dispose()


@pytest.mark.unit
def test_bad_metrics_ports_are_refused_with_the_setting_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for bad in ("nine", "-1", "65536"):
        monkeypatch.setenv("DATABUILD_METRICS_PORT", bad)
        with pytest.raises(InvalidInputError, match=r"^bad setting DATABUILD_METRICS_PORT: "):
            Settings.from_env()
    monkeypatch.setenv("DATABUILD_METRICS_PORT", "9464")
    assert Settings.from_env().metrics_port == 9464
    assert Settings().metrics_port == 0  # off unless asked for

    bel = BuildEventLog.create(f"sqlite:///{tmp_path / 'bel.sqlite'}")
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        with (
            pytest.raises(PortInUseError, match=r"DATABUILD_METRICS_PORT=\d+: cannot serve metrics"),
            serving_metrics(taken.getsockname()[1], bel, {}),
        ):
            pass
    bel.dispose()
