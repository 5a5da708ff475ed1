"""The job runs aggregate of the BEL (``bel.aggregates.job_runs``) on SQLite: a run's start and outcomes, stale
attempts, and the reads of runs."""

import pytest

from databuild.bel import BuildEventLog
from databuild.errors import ConcurrentChangeError, NotFoundError, StaleAttemptError
from databuild.models import InstanceRef, JobRunCause, JobRunState, PartitionStatus
from tests.bel_sqlite import build, decide, spec

pytestmark = pytest.mark.unit


def test_a_run_starts_once_per_attempt_and_publishes_its_outputs(bel: BuildEventLog) -> None:
    verdict = decide(bel, spec("a/1"))
    planned = [InstanceRef(ref=o, instance_id=f"{o}-i") for o in verdict.outputs]
    with pytest.raises(ConcurrentChangeError):
        bel.job_runs.start(verdict.job_run_id, 1, "w", planned[:1])
    run = bel.job_runs.start(verdict.job_run_id, 1, "w", planned)
    assert run.state is JobRunState.running and run.attempts == 1
    assert [o.instance_id for o in bel.job_runs.attempt_outputs_of(verdict.job_run_id)] == ["a/1-i", "b/1-i"]
    assert set(bel.job_runs.attempt_outputs(["a/1-i"])) == {"a/1-i"}
    bel.job_runs.check_current_attempt(verdict.job_run_id, 1)
    done = bel.job_runs.succeed(verdict.job_run_id, [], planned, attempt=1)
    assert done.run.state is JobRunState.succeeded and done.run.writes == planned
    with pytest.raises(StaleAttemptError):
        bel.job_runs.check_current_attempt(verdict.job_run_id, 1)
    # An ended run is returned unchanged by a repeated start.
    assert bel.job_runs.start(verdict.job_run_id, 2, "w").state is JobRunState.succeeded
    assert bel.job_runs.oldest_open() is None


def test_a_superseded_attempt_records_nothing(bel: BuildEventLog) -> None:
    verdict = decide(bel, spec("up/1"))
    bel.job_runs.start(verdict.job_run_id, 1, "w")
    bel.job_runs.start(verdict.job_run_id, 2, "w")
    with pytest.raises(StaleAttemptError):
        bel.job_runs.succeed(verdict.job_run_id, [], [InstanceRef(ref="up/1", instance_id="x")], attempt=1)
    assert bel.job_runs.get(verdict.job_run_id).state is JobRunState.running


def test_failure_fail_locks_and_abandoning_releases(bel: BuildEventLog) -> None:
    failed = decide(bel, spec("up/1"))
    bel.job_runs.fail(failed.job_run_id, "boom")
    assert bel.partitions.get("up/1").status is PartitionStatus.failed
    lost = decide(bel, spec("mid/1"))
    assert bel.job_runs.abandon(lost.job_run_id, "worker gone")
    assert not bel.job_runs.abandon(lost.job_run_id, "again")
    run = bel.job_runs.get(lost.job_run_id)
    assert run.cause is JobRunCause.lost and bel.partitions.get("mid/1").status is PartitionStatus.missing


def test_a_dep_miss_records_what_was_missing(bel: BuildEventLog) -> None:
    verdict = decide(bel, spec("mid/1"))
    bel.job_runs.start(verdict.job_run_id, 1, "w")
    run = bel.job_runs.dep_miss(verdict.job_run_id, ["up/1"], [], attempt=1)
    assert run.run.state is JobRunState.dep_miss and run.run.missing == ["up/1"]


def test_reads_of_runs(bel: BuildEventLog) -> None:
    up = build(bel, "up/1")
    build(bel, "mid/1", reads=[up])
    runs = bel.job_runs.query()
    assert {r.job_label for r in runs} == {"up", "mid"}
    assert [r.job_label for r in bel.job_runs.query(ref_glob="mid/*")] == ["mid"]
    assert [r.job_label for r in bel.job_runs.query(job_label="up", state=JobRunState.succeeded)] == ["up"]
    (mid,) = bel.job_runs.query(job_label="mid")
    assert mid.reads == [up] and bel.job_runs.by_id([mid.job_run_id]) == [mid]
    assert set(bel.job_runs.durations(["up", "mid"])) == {"up", "mid"}
    assert {r.job_label for r in bel.job_runs.latest_succeeded(["up", "mid", "down"])} == {"up", "mid"}
    with pytest.raises(NotFoundError):
        bel.job_runs.get("jr-nope")
