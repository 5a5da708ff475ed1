"""Job executors without a cluster: the spark-submit executor in local mode (failures, gc of its
folders, an application that loses its worker; its dep-miss, lineage, facts and logs are proved on the
standalone cluster, tests/test_cluster.py). (How the settings choose executors:
tests/test_executor_choice.py.)"""

import asyncio
import time
import uuid
from pathlib import Path

from databuild.bel.store import BuildEventLog, new_job_run_id
from databuild.jobs.attempt_log import APPLICATION_OUTPUT
from databuild.jobs.executors import JobAttempt
from databuild.jobs.executors.submission import (
    SubmitFiles,
    SubmitResult,
)
from databuild.jobs.executors.submit import SubmitExecutor, SubmitOptions, default_spark_submit
from databuild.jobs.storage import Storage
from databuild.models import JobRunState, WantState
from databuild.operations.garbage import GcReport
from databuild.testing.cluster import QUICK_JVM, stop_group
from databuild.views.logs import attempt_log
from tests.conftest import cli
from tests.helpers import lake, until

SUBMIT_LOCAL = {
    "executor": "submit",
    "spark_submit_master": "local[1]",
    "spark_driver_memory": "1g",
    "spark_submit_args": f"--driver-java-options '{QUICK_JVM}'",
}


async def test_submit_executor_reports_job_errors_and_contract_breaches(make_stack) -> None:
    stack = await make_stack(graph="tests.graphs:flaky", job_attempts=2, **SUBMIT_LOCAL)
    n = uuid.uuid4().hex[:6]
    fails, typo = await asyncio.gather(stack.db.want(f"fails/{n}"), stack.db.want(f"typo/{n}"))
    fails_done, typo_done = await asyncio.wait_for(
        asyncio.gather(stack.db.wait(fails), stack.db.wait(typo)), timeout=300
    )
    runs = {r.job_label: r for r in stack.bel.job_runs.query(limit=10)}
    # A job that raises is retried by the policy, and its error (with its traceback) is the reason.
    assert fails_done.state is WantState.failed
    assert runs["always_fails"].attempts == 2
    assert runs["always_fails"].reason and f"RuntimeError: boom {n}" in runs["always_fails"].reason
    # Reading a ref the graph cannot provide breaks the job's contract: not retried.
    assert typo_done.state is WantState.failed
    assert runs["typo"].attempts == 1
    assert runs["typo"].reason and "reads 'nowhere/" in runs["typo"].reason
    # A failed application keeps its folder and log for the operator.
    submissions = lake(stack.settings) / "_databuild" / "submissions"
    kept = sorted(p.name for p in submissions.iterdir())
    assert kept == sorted(
        [
            f"{runs['always_fails'].job_run_id}-1",
            f"{runs['always_fails'].job_run_id}-2",
            f"{runs['typo'].job_run_id}-1",
        ]
    )
    # The requests never held the BEL's address (its credentials stay off shared storage).
    for folder in kept:
        request = (submissions / folder / "request.json").read_text()
        assert stack.settings.database_url.get_secret_value() not in request and "bel.sqlite" not in request
    assert all((submissions / f / SubmitFiles.LOG).is_file() for f in kept)
    # Each attempt's log has the job's traceback, then what the application printed.
    storage = Storage(stack.settings.storage_root)
    for attempt in (1, 2):
        failed = attempt_log(stack.bel, storage, runs["always_fails"].job_run_id, attempt).text
        body, output = failed.split(APPLICATION_OUTPUT)
        assert "Traceback (most recent call last)" in body and f"RuntimeError: boom {n}" in body
        assert "SparkContext" in output  # the JVM's log4j
    assert "JobContractError" in attempt_log(stack.bel, storage, runs["typo"].job_run_id).text
    # ... for a week (DATABUILD_GC_KEEP); an operator may collect them sooner.
    kept_for_now = GcReport.model_validate_json((await cli(stack, "gc", "--json")).stdout)
    assert kept_for_now.deleted == []
    collected = await cli(stack, "gc", "--keep", "0s", "--json")
    assert collected.returncode == 0, collected.stderr
    deleted = GcReport.model_validate_json(collected.stdout).deleted
    folders = [r for r in deleted if r.kind == "submission"]
    assert sorted(Path(r.location).name for r in folders) == kept
    assert {(r.kind, r.reason) for r in folders} == {("submission", "job run failed")}
    assert {r.job_run_id for r in deleted if r.kind == "log"} == {r.job_run_id for r in runs.values()}
    assert not list(submissions.iterdir())


async def test_gc_on_a_shared_storage_root_leaves_the_other_graphs_submissions_alone(
    make_stack, tmp_path: Path
) -> None:
    """Two graphs (two BELs) share one storage root, each with submission folders. One's gc with no
    retention deletes its own failed attempt's folder and leaves the other's running application's
    folder, so that application keeps running (it would stop on finding its request gone)."""
    shared = tmp_path / "shared-lake"
    ours = await make_stack(graph="tests.graphs:flaky", storage_root=shared, job_attempts=1, **SUBMIT_LOCAL)
    theirs = await make_stack(graph="tests.graphs:spin", storage_root=shared, **SUBMIT_LOCAL)
    n = uuid.uuid4().hex[:6]
    spinning = await theirs.db.want(f"spin/{n}")
    failing = await ours.db.want(f"fails/{n}")
    assert (await asyncio.wait_for(ours.db.wait(failing), timeout=300)).state is WantState.failed
    submissions = shared / "_databuild" / "submissions"
    (our_run,) = ours.bel.job_runs.query()

    def their_progress() -> Path | None:
        runs = theirs.bel.job_runs.query()
        found = submissions / f"{runs[0].job_run_id}-1" / SubmitFiles.PROGRESS if runs else None
        return found if found is not None and found.is_file() else None

    for _ in range(1800):  # its application reports progress once its driver runs the job
        if their_progress() is not None:
            break
        await asyncio.sleep(0.1)
    progress = their_progress()
    assert progress is not None, "their application never reported progress"
    (their_run,) = theirs.bel.job_runs.query()

    collected = await cli(ours, "gc", "--keep", "0s", "--json")
    assert collected.returncode == 0, collected.stderr
    deleted = GcReport.model_validate_json(collected.stdout).deleted
    assert [(Path(r.location).name, r.reason) for r in deleted if r.kind == "submission"] == [
        (f"{our_run.job_run_id}-1", "job run failed")
    ]
    assert {r.job_run_id for r in deleted} == {our_run.job_run_id}  # nor their logs or instances
    assert sorted(p.name for p in submissions.iterdir()) == [f"{their_run.job_run_id}-1"]
    # Their application watches its folder every second: it still finds its request, and runs on, as
    # three more of its progress reports after the gc show.
    for _ in range(3):
        before = progress.stat().st_mtime_ns
        await until(lambda before=before: progress.stat().st_mtime_ns != before, seconds=30)
    assert theirs.bel.job_runs.get(their_run.job_run_id).state is JobRunState.running
    assert (submissions / f"{their_run.job_run_id}-1" / SubmitFiles.REQUEST).is_file()
    # Their own gc keeps their running attempt's folder too.
    kept = GcReport.model_validate_json((await cli(theirs, "gc", "--keep", "0s", "--json")).stdout)
    assert [r for r in kept.deleted if r.kind == "submission"] == []
    await theirs.db.cancel(spinning.want_id)
    assert (await asyncio.wait_for(theirs.db.wait(spinning), timeout=60)).state is WantState.canceled


def test_submitted_application_stops_when_its_worker_stops_heartbeating(tmp_path: Path) -> None:
    """A worker killed mid-job leaves its application running on the cluster; the application notices
    the worker's heartbeat file has stopped changing, cancels its Spark jobs and exits."""
    storage = Storage(tmp_path / "lake")
    bel = BuildEventLog.create(f"sqlite:///{tmp_path / 'bel.sqlite'}")
    bel.dispose()
    job_run_id = new_job_run_id()
    attempt = JobAttempt(
        job_run_id=job_run_id,
        attempt=1,
        job_label="spin_job",
        params={"n": "orphan"},
        instances={"spin/orphan": str(uuid.uuid4())},
    )
    options = SubmitOptions(
        master="local[1]",
        driver_memory="1g",
        graph="tests.graphs:spin",
        database_url=bel.url,
        abandon_after_seconds=3,
        spark_submit=default_spark_submit(),
    )
    started = time.monotonic()
    # Launched as `run` would, but nobody supervises it: its heartbeat file never changes again.
    local = tmp_path / "local"
    local.mkdir()
    application, files = SubmitExecutor(options, storage=storage).launch(attempt, local)
    try:
        assert application.wait(timeout=180) == 0, (local / SubmitFiles.LOG).read_text()[-3000:]
    finally:
        stop_group(application)
    result = SubmitResult.model_validate_json(files.read(SubmitFiles.RESULT))
    assert result.failure is not None and result.failure.type == "JobCancelledError", result
    assert "no heartbeat from the worker for 3s" in result.failure.message
    assert time.monotonic() - started < 120
