"""How one attempt of a job run is named: its Spark job group (or Connect tag) and its folders on the
storage."""


def attempt_name(job_run_id: str, attempt: int) -> str:
    """One attempt of a job run: its Spark job group (or Connect tag) and its folders on the storage."""
    return f"{job_run_id}-{attempt}"


def parse_attempt_name(name: str) -> tuple[str, int] | None:
    job_run_id, sep, attempt = name.rpartition("-")
    return (job_run_id, int(attempt)) if sep and attempt.isdigit() else None
