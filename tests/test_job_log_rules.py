"""The rules behind job attempt logs and instance facts, on their own: whether a rebuild's schema
changed, when an attempt's log and a submission folder may go, and how a long log keeps both ends. The
same on the real stack: tests/test_job_logs.py."""

from datetime import UTC, datetime, timedelta

import pytest

from databuild.domain.facts import schema_changed
from databuild.domain.retention import Verdict, log_verdict, submission_verdict, write_verdict
from databuild.jobs.attempt_log import APPLICATION_OUTPUT, TRUNCATED, bounded, with_application_output
from databuild.models import Column, Instance, InstanceFacts, InstanceStatus, JobRun, JobRunState

pytestmark = pytest.mark.unit


def job_run(state: JobRunState, created: datetime, *, attempts: int = 1) -> JobRun:
    """A job run ``jr-1`` of ``job`` in ``state``, created (and last changed) at ``created``."""
    return JobRun(
        job_run_id="jr-1",
        job_label="job",
        outputs=["a/1"],
        params={},
        state=state,
        want_id=None,
        attempts=attempts,
        reason=None,
        missing=[],
        reads=[],
        writes=[],
        workflow_id="job-run:job:jr-1",
        created_at=created,
        updated_at=created,
    )


def facts(*columns: tuple[str, str]) -> InstanceFacts:
    return InstanceFacts(
        rows=1, bytes=1, columns=[Column(name=n, type=t, nullable=False) for n, t in columns]
    )


@pytest.mark.parametrize(
    "previous,current,changed",
    [
        (facts(("id", "bigint")), facts(("id", "bigint")), False),
        (facts(("id", "bigint")), facts(("id", "int")), True),  # a type
        (facts(("id", "bigint")), facts(("id", "bigint"), ("name", "string")), True),  # a column more
        (facts(("a", "int"), ("b", "int")), facts(("b", "int"), ("a", "int")), True),  # the order
        (
            facts(("id", "bigint")),
            InstanceFacts(rows=9, bytes=9, columns=[Column(name="id", type="bigint")]),
            False,
        ),
        (None, facts(("id", "bigint")), False),  # nothing recorded before: no change we can show
        (facts(("id", "bigint")), None, False),
    ],
)
def test_schema_changed_compares_names_types_and_order(
    previous: InstanceFacts | None, current: InstanceFacts | None, changed: bool
) -> None:
    assert schema_changed(previous, current) is changed


def test_an_ended_runs_logs_go_after_the_retention_and_no_one_elses() -> None:
    now, week = datetime(2024, 3, 1, tzinfo=UTC), timedelta(days=7)
    run = job_run(JobRunState.failed, now - 2 * week)
    assert log_verdict(now - 2 * week, run, now=now, keep=week).delete
    assert log_verdict(now - timedelta(days=1), run, now=now, keep=week).kept == "within retention"
    running = run.model_copy(update={"state": JobRunState.running})
    assert log_verdict(now - 2 * week, running, now=now, keep=week).kept == "being written"
    assert log_verdict(now - 2 * week, None, now=now, keep=week).kept == "unknown to the BEL"


def test_a_submission_folder_goes_only_if_its_bel_started_that_attempt_and_it_is_over() -> None:
    now, week = datetime(2024, 3, 1, tzinfo=UTC), timedelta(days=7)
    old = now - 2 * week
    run = job_run(JobRunState.running, old, attempts=2)
    assert submission_verdict(2, old, run, now=now, keep=week).kept == "being written"
    assert (
        submission_verdict(1, old, run, now=now, keep=week).reason == "attempt 1 was superseded by attempt 2"
    )
    assert submission_verdict(1, now, run, now=now, keep=week).kept == "within retention"
    # Another graph's folders, under the same root: a job run this BEL does not know, or an attempt it
    # never started, whatever their age.
    assert submission_verdict(3, old, run, now=now, keep=timedelta(0)).kept == "unknown to the BEL"
    assert submission_verdict(1, old, None, now=now, keep=timedelta(0)).kept == "unknown to the BEL"
    ended = run.model_copy(update={"state": JobRunState.failed})
    assert submission_verdict(2, old, ended, now=now, keep=week).reason == "job run failed"


def test_bounded_logs_keep_both_ends_within_the_limit() -> None:
    text = "".join(f"line {n:05d}\n" for n in range(5000)) + "Traceback ...\nValueError: last\n"
    kept = bounded(text, 4096)
    assert len(kept.encode()) <= 4096 and TRUNCATED in kept
    assert kept.startswith("line 00000\n") and kept.endswith("ValueError: last\n")
    assert bounded("short\n", 4096) == "short\n"
    both = with_application_output(text, "JVM " * 10_000 + "\nJVM last words\n", 8192)
    body, output = both.split(APPLICATION_OUTPUT)
    assert len(both.encode()) <= 8192 + len(APPLICATION_OUTPUT) + 4
    assert body.rstrip().endswith("ValueError: last") and output.endswith("JVM last words\n")


def test_a_partitioned_write_goes_whole_or_a_partition_at_a_time() -> None:
    now, week = datetime(2024, 3, 1, tzinfo=UTC), timedelta(days=7)
    old = now - 2 * week
    run = job_run(JobRunState.succeeded, old)

    def instance(ref: str, status: InstanceStatus, retired: datetime | None = None) -> Instance:
        return Instance(
            instance_id=f"i-{ref}",
            ref=ref,
            job_run_id="jr-1",
            external=False,
            status=status,
            stale_cause=None,
            reason=None,
            created_at=old,
            retired_at=retired,
        )

    def verdict(
        run: JobRun | None, inside: list[Instance], attempt: int = 1
    ) -> tuple[Verdict, dict[str, Verdict]]:
        return write_verdict(attempt, old, run, inside, now=now, keep=week, oldest_open_run=None)

    live, retired = instance("a/1", InstanceStatus.live), instance("a/2", InstanceStatus.superseded, old)
    # Some partitions needed: the folder stays, and the others go one by one.
    folder, each = verdict(run, [live, retired])
    assert folder.kept == "live" and each["i-a/1"].kept == "live" and each["i-a/2"].delete
    # None needed: the folder goes whole.
    folder, each = verdict(run, [retired, instance("a/3", InstanceStatus.superseded, old)])
    assert folder.delete and each == {}
    # A partition retired within the retention keeps it.
    assert verdict(run, [instance("a/4", InstanceStatus.superseded, now - timedelta(days=1))])[0].kept == (
        "within retention"
    )
    # Nothing published: by age once the run ended; kept while it runs; another graph's is left alone.
    failed = run.model_copy(update={"state": JobRunState.failed})
    assert verdict(failed, [])[0].reason.startswith("left by attempt 1 of job run jr-1 (failed)")
    assert verdict(failed, [])[0].delete
    assert verdict(run.model_copy(update={"state": JobRunState.running}), [])[0].kept == "being written"
    assert verdict(None, [])[0].kept == "unknown to the BEL"
    assert verdict(run, [], attempt=2)[0].kept == "unknown to the BEL"
