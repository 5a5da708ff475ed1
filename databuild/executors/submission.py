"""The contract between the spark-submit executor and the application it submits: files in one
directory per attempt on shared storage (a request, progress, the result, and the worker's heartbeat
and cancel marker), so it holds wherever the driver runs and never depends on reading logs."""

import os
import uuid
from pathlib import Path

from databuild.executors.body import BodyResult, JobAttempt
from databuild.models import Model


class SubmittedJob(Model):
    """What the application needs to run one attempt on its own."""

    attempt: JobAttempt
    graph: str  # module:attribute, imported by the application as the worker imports it
    storage_root: Path
    # The application stops its work and exits when the worker's heartbeat is older than this: the
    # worker died, or lost the activity, and nobody would publish what it builds.
    abandon_after_seconds: float


# The BEL the application reads to check inputs (the worker records the outcome) reaches it through
# this variable of its environment.
DATABASE_URL_VARIABLE = "DATABUILD_DATABASE_URL"


class JobFailure(Model):
    type: str
    message: str
    traceback: str = ""


class SubmitResult(Model):
    """Exactly one of ``body`` (the job ran to its end) and ``failure`` (the job raised)."""

    body: BodyResult | None = None
    failure: JobFailure | None = None


class SubmitProgress(Model):
    message: str = ""
    spark_jobs: int = 0
    tasks_done: int = 0
    tasks_total: int = 0


class SubmitFiles:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.request = root / "request.json"
        self.result = root / "result.json"
        self.progress = root / "progress.json"
        self.heartbeat = root / "worker-heartbeat"
        self.cancel = root / "cancel"
        self.log = root / "application.log"
        # spark-submit takes a script path and puts its folder first on sys.path: a folder holding
        # only this script shadows no module.
        self.entry = root / "main.py"


ENTRY_SCRIPT = (
    "import sys\n\nfrom databuild.executors.submitted import main\n\nsys.exit(main(sys.argv[1:]))\n"
)


def write_atomically(path: Path, text: str) -> None:
    """Readers on shared storage see the old file or the new, never a partial one."""
    partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    partial.write_text(text)
    os.replace(partial, path)
