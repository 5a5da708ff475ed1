"""The contract between the spark-submit executor and the application it submits: files in one
folder per attempt on the storage (a request, progress, the result, and the worker's heartbeat
and cancel marker), so it holds wherever the driver runs and never depends on reading logs."""

from databuild.domain.cost import SparkCost
from databuild.jobs.attempt_log import DEFAULT_MAX_BYTES
from databuild.jobs.executors.body import BodyResult, JobAttempt
from databuild.jobs.storage import Storage
from databuild.models import Model


class SubmittedJob(Model):
    """What the application needs to run one attempt on its own."""

    attempt: JobAttempt
    graph: str  # module:attribute, imported by the application as the worker imports it
    storage_root: str
    # The application stops its work and exits when the worker's heartbeat is older than this: the
    # worker died, or lost the activity, and nobody would publish what it builds.
    abandon_after_seconds: float
    log_max_bytes: int = DEFAULT_MAX_BYTES


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
    # Of a failure: what its Spark work cost until then (the body's result carries it otherwise).
    cost: SparkCost | None = None


class SubmitProgress(Model):
    message: str = ""
    spark_jobs: int = 0
    tasks_done: int = 0
    tasks_total: int = 0


class SubmitFiles:
    """One attempt's files, in its folder on the storage (through ``Storage``, so on any store)."""

    REQUEST = "request.json"
    RESULT = "result.json"
    PROGRESS = "progress.json"
    HEARTBEAT = "worker-heartbeat"
    CANCEL = "cancel"
    LOG = "application.log"

    def __init__(self, storage: Storage, key: str) -> None:
        self.storage = storage
        self.key = key

    def write(self, name: str, text: str) -> None:
        self.storage.write_text(f"{self.key}/{name}", text)

    def read(self, name: str) -> str:
        """Raises ``FileNotFoundError`` if the file is not there (yet)."""
        return self.storage.read_text(f"{self.key}/{name}")

    def exists(self, name: str) -> bool:
        return self.storage.exists(f"{self.key}/{name}")

    def location(self, name: str = "") -> str:
        return self.storage.uri_of(f"{self.key}/{name}".rstrip("/"))


# spark-submit takes a local script path and puts its folder first on sys.path: a folder holding only
# this script shadows no module.
ENTRY_SCRIPT = (
    "import sys\n\nfrom databuild.jobs.executors.submitted import main\n\nsys.exit(main(sys.argv[1:]))\n"
)
