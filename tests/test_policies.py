"""Per-job policies in the graph (and a worker that refuses out-of-range settings), the SLA estimate, and
alert routing and channel URLs, on their own."""

import dataclasses
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from databuild.config import Settings
from databuild.domain.alerts import Alert, AlertKind, receives
from databuild.domain.estimates import Confidence, Step, durations_of, estimate
from databuild.errors import GraphDefinitionError, InvalidInputError
from databuild.graph import Graph
from databuild.limits import policy_problem
from databuild.temporal.protocol import JobPolicy
from tests.conftest import forked_cli
from worker.run import check_policy

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def test_a_job_overrides_the_settings_it_declares_and_keeps_the_rest() -> None:
    graph = Graph("g")

    @graph.job("a/{d}", retries=0, timeout="2h", spark_conf={"spark.sql.shuffle.partitions": "64"})
    def a(ctx: object, d: str) -> None: ...

    @graph.job("b/{d}")
    def b(ctx: object, d: str) -> None: ...

    settings = Settings(job_attempts=3, job_heartbeat_timeout=timedelta(seconds=20))
    own = JobPolicy.of(graph.job_by_label("a"), settings)
    assert (own.attempts, own.start_to_close_timeout) == (1, timedelta(hours=2))
    assert own.heartbeat_timeout == timedelta(seconds=20)  # not declared: the setting's
    assert JobPolicy.of(graph.job_by_label("b"), settings).attempts == 3
    assert graph.job_by_label("a").spark_conf == {"spark.sql.shuffle.partitions": "64"}


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"retries": -1}, "retries=-1: give a whole number from 0 to 999"),
        ({"retries": 1000}, "retries=1000: give a whole number from 0 to 999"),
        ({"timeout": "-5m"}, "timeout="),
        ({"timeout": timedelta(days=36501)}, "give a duration from 1s to 36500d"),
        ({"heartbeat_timeout": timedelta(0)}, "give a duration from 4s to 36500d"),
        ({"heartbeat_timeout": "3s"}, "heartbeat_timeout='3s': give a duration from 4s"),
        ({"executor": "lambda"}, "choose one of"),
        ({"spark_conf": {"shuffle": "4"}}, "Spark properties"),
    ],
)
def test_bad_policies_are_refused_naming_the_fix(option: dict[str, object], message: str) -> None:
    with pytest.raises(GraphDefinitionError, match=message):
        Graph("g").job("a/{d}", **option)  # type: ignore[arg-type]


def test_a_policy_out_of_range_is_named_and_a_worker_refuses_to_start_with_it() -> None:
    """Settings and declarations check their ranges; what bypasses them (settings copied with changes, a
    Job built by hand) is refused when the worker starts, and a run's workflow releases such a policy."""
    graph = Graph("g")

    @graph.job("a/{d}")
    def a(ctx: object, d: str) -> None: ...

    job = graph.job_by_label("a")
    settings = Settings()
    assert policy_problem(JobPolicy.of(job, settings)) is None
    for change, problem in (
        ({"job_attempts": 0}, "attempts 0 is not within 1 to 1000"),
        ({"job_attempts": -1}, "attempts -1 is not within 1 to 1000"),
        ({"job_start_to_close_timeout": timedelta(0)}, "timeout 0s is not within 1s to 36500d"),
        ({"job_heartbeat_timeout": timedelta(seconds=-1)}, "heartbeat timeout -1s is not within 4s"),
        ({"job_lease": timedelta(milliseconds=500)}, "lease 0.5s is not within 1s to 36500d"),
    ):
        changed = settings.model_copy(update=change)  # not validated, as an older worker's could be
        assert (policy_problem(JobPolicy.of(job, changed)) or "").startswith(problem)
        with pytest.raises(
            InvalidInputError, match=f"^job 'a' cannot run: {problem}.*DATABUILD_JOB_ATTEMPTS"
        ):
            check_policy(job, changed)
    with pytest.raises(InvalidInputError, match="attempts 0 is not within"):
        check_policy(dataclasses.replace(job, retries=-1), settings)


# Each a worker started with one variable out of range, all forked from one process that imported the CLI.
OUT_OF_RANGE = [
    ("DATABUILD_JOB_ATTEMPTS", "0", "1 to 1000"),
    ("DATABUILD_JOB_ATTEMPTS", "-1", "1 to 1000"),
    ("DATABUILD_MAX_CONCURRENT_JOBS", "0", "1 or more"),
    ("DATABUILD_JOB_TIMEOUT", "0", "1s to 36500d"),
    ("DATABUILD_JOB_HEARTBEAT_TIMEOUT", "0", "4s to 36500d"),
    ("DATABUILD_JOB_LEASE", "0s", "1s to 36500d"),
]


def test_a_worker_refuses_to_start_naming_the_setting(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATABUILD_")} | {"COLUMNS": "500"}
    commands = [(["worker"], {variable: value}) for variable, value, _ in OUT_OF_RANGE]
    for (variable, _, valid), worker in zip(OUT_OF_RANGE, forked_cli(commands, env, tmp_path), strict=True):
        assert worker.returncode == 2, (variable, worker.stderr)
        assert worker.stderr == f"error: bad setting {variable}: out of range; give {valid}\n"


def test_the_estimate_adds_a_job_to_its_slowest_input_and_counts_what_a_running_run_has_left() -> None:
    durations = {"report": durations_of([10.0] * 8 + [30.0] * 2), "load": durations_of([100.0] * 5)}
    running = Step(ref="load/x", job_label="load", running_since=T0 - timedelta(seconds=40))
    step = Step(ref="report/x", job_label="report", inputs=[running, Step(ref="feed/x", job_label="load")])
    found = estimate(step, durations, T0)
    assert found.eta_p90 == T0 + timedelta(seconds=100 + 30)  # the slowest input, then the report (p90)
    assert found.eta_p50 == T0 + timedelta(seconds=100 + 10)
    assert found.slowest_step == "load (feed/x)" and found.confidence is Confidence.high
    deadline = T0 + timedelta(seconds=120)
    assert found.at_risk(deadline) and not found.at_risk(deadline + timedelta(seconds=60))
    assert found.check_at(deadline + timedelta(seconds=60), T0) == T0 + timedelta(seconds=50)


def test_an_external_input_or_a_job_never_run_makes_the_estimate_the_earliest() -> None:
    step = Step(ref="r/x", job_label="report", inputs=[Step(ref="feed/x", job_label=None)])
    found = estimate(step, {"report": durations_of([5.0])}, T0)
    assert found.confidence is Confidence.none and found.external == ["feed/x"]
    assert found.eta_p90 == T0 + timedelta(seconds=5)
    assert estimate(step, {}, T0).unknown == ["r/x"]


def test_channel_tags_route_by_kind_job_and_ref() -> None:
    alert = Alert(
        kind=AlertKind.sla_missed,
        subject="w-1",
        ref="daily/2024-01-01",
        job_label="daily",
        at=T0,
        summary="",
        link="/",
    )
    assert receives(set(), alert)
    assert receives({"kind:sla_missed", "team-a"}, alert)
    assert receives({"ref:daily/*", "job:weekly", "job:daily"}, alert)
    assert not receives({"kind:want_failed"}, alert)
    assert not receives({"kind:sla_missed", "ref:weekly/*"}, alert)


def test_a_url_apprise_cannot_use_is_refused_with_the_fix(tmp_path: Path) -> None:
    from databuild.operations.alerts import channels

    settings = Settings(home=tmp_path, alert_urls="nosuchscheme://x")
    with pytest.raises(InvalidInputError, match=r"DATABUILD_ALERT_URLS .*apprise"):
        channels(settings)
    missing = Settings(home=tmp_path, alert_config=tmp_path / "nope.yml")
    with pytest.raises(InvalidInputError, match="DATABUILD_ALERT_CONFIG"):
        channels(missing)
