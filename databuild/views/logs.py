"""One job attempt's log, as the CLI, the API and the dashboard show it, read from the storage."""

from pydantic import Field

from databuild.bel.queries import BelQueries
from databuild.errors import NotFoundError
from databuild.jobs.attempt_log import TRUNCATED
from databuild.jobs.storage import Storage
from databuild.models import JobRunState, Model


class AttemptLogView(Model):
    job_run_id: str
    job_label: str
    attempt: int
    attempts: int = Field(description="how many attempts the job run has had")
    location: str = Field(description="where the log is kept (a URI)")
    truncated: bool = Field(
        description="the log outgrew DATABUILD_JOB_LOG_MAX_BYTES: its middle was left out"
    )
    text: str


def attempt_log(
    bel: BelQueries, storage: Storage, job_run_id: str, attempt: int | None = None
) -> AttemptLogView:
    """The log of ``attempt`` (default: the latest) of a job run. Raises ``NotFoundError`` saying why
    there is none: an unknown run or attempt, one still running, or a log that was never kept or is gone."""
    run = bel.job_runs.get(job_run_id)
    if run.attempts == 0:
        raise NotFoundError(f"job run {job_run_id} is {run.status} and has run no attempt, so it has no log")
    number = run.attempts if attempt is None else attempt
    if not 1 <= number <= run.attempts:
        raise NotFoundError(
            f"job run {job_run_id} has no attempt {number}: it has had {run.attempts} (--attempt 1 to {run.attempts})"
        )
    key = storage.log_key(job_run_id, number)
    try:
        text = storage.read_text(key)
    except FileNotFoundError:
        if run.state is JobRunState.running and number == run.attempts:
            why = "it is running, and its log is saved when it ends"
        else:
            why = (
                "garbage collection removes a job run's logs DATABUILD_GC_KEEP after it ended; runs from "
                "before job logs have none; and an attempt whose worker died mid-job could not save one"
            )
        raise NotFoundError(
            f"no log of attempt {number} of job run {job_run_id} at {storage.uri_of(key)}: {why}"
        ) from None
    return AttemptLogView(
        job_run_id=job_run_id,
        job_label=run.job_label,
        attempt=number,
        attempts=run.attempts,
        location=storage.uri_of(key),
        truncated=TRUNCATED in text,
        text=text,
    )
