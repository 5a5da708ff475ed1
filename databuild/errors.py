"""Typed error hierarchy. Every error a user can cause names the problem and, where there is one, the fix.

Each class says how it crosses the boundaries: ``retryable`` (whether an activity that raised it may
succeed on a retry; activities.errors turns it into a Temporal ``ApplicationError`` accordingly),
``http_status`` (what the HTTP API answers) and ``exit_code`` (the CLI's: 2 for usage and configuration
errors, 1 for a dependency that is down). What a dependency's own client raises is translated into these
in one place, databuild.failures, which the CLI and the HTTP API share."""

from typing import ClassVar


class DataBuildError(Exception):
    """Base of every error DataBuild raises on purpose."""

    retryable: ClassVar[bool] = True
    http_status: ClassVar[int] = 500
    exit_code: ClassVar[int] = 2

    def details(self) -> tuple[object, ...]:
        """What a workflow that catches it needs besides its message (an activity error's details)."""
        return ()


class InvalidInputError(DataBuildError, ValueError):
    """Input was rejected before anything was recorded."""

    retryable = False
    http_status = 400


class InvalidPartitionRefError(InvalidInputError):
    pass


class InvalidDurationError(InvalidInputError):
    pass


class InvalidWantError(InvalidInputError):
    pass


class InvalidPatternError(InvalidInputError):
    """A ref glob pattern is malformed."""


class UnknownJobError(InvalidInputError):
    """No job in the graph declares an output pattern matching the ref."""


class AnnouncementRefusedError(InvalidInputError):
    """An announcement of a ref its source may not announce: not external here, or outside the
    patterns of the upstream subscription it came through."""


class ConfigurationError(DataBuildError):
    """A setting names something DataBuild cannot use (a URL that is not one, a storage root that is no
    folder it may write): the fix is the setting. Retryable: a worker goes on once an operator fixes it."""

    http_status = 503  # the server's setup, not the request, has to change


class UnavailableError(DataBuildError):
    """A dependency (Temporal, the BEL's database, the storage) does not answer: start it, then repeat."""

    http_status = 503
    exit_code = 1


class GraphDefinitionError(ConfigurationError):
    """The user's graph is malformed (bad pattern, clashing outputs, unloadable module)."""

    retryable = False


class GraphLoadError(GraphDefinitionError):
    """The user's graph module (`DATABUILD_GRAPH`) does not import or declare its graph: the message names
    the setting, the exception and the user's file and line; its cause carries the whole traceback."""


class NotFoundError(DataBuildError, LookupError):
    """An id or ref that the build event log does not know."""

    http_status = 404


class InvalidTransitionError(DataBuildError):
    """A state change the lifecycle does not allow; it is rejected, never applied."""

    retryable = False
    http_status = 409


class TemporalSetupError(ConfigurationError):
    """The Temporal namespace lacks something DataBuild needs and may not create itself, or refuses
    DataBuild's credentials."""


class TemporalUnavailableError(UnavailableError):
    """The Temporal server does not answer at the configured address."""


class DatabaseUnavailableError(UnavailableError):
    """The BEL's database does not answer."""


class StorageUnavailableError(UnavailableError, OSError):
    """A remote storage (S3, GCS, Azure, HDFS) does not answer. An ``OSError`` too, as what it replaces
    was: code that tolerates a storage hiccup keeps doing so."""


class StorageSetupError(ConfigurationError, OSError):
    """A local storage root DataBuild cannot use (not a folder, not writable). An ``OSError`` too."""


class PortInUseError(ConfigurationError):
    """A port `databuild dev` or `databuild web` would listen on is held by another process."""


class ConcurrentChangeError(DataBuildError):
    """What a command read changed before it could lock it; retrying the command is safe."""

    http_status = 409


class WantReplacedError(DataBuildError):
    """A write of a want's workflow run that a retry replaced (it serves an older opening of the want):
    nothing was recorded. ``opening`` is the want's opening now, which a run still going on carries on as."""

    retryable = False
    http_status = 409

    def __init__(self, want_id: str, run_opening: int, opening: int) -> None:
        super().__init__(
            f"want {want_id} was reopened since this run started (it serves opening {run_opening}, the "
            f"want is at {opening}): a newer run serves it, and this run's write is refused"
        )
        self.opening = opening

    def details(self) -> tuple[object, ...]:
        return (self.opening,)


class StaleAttemptError(DataBuildError):
    """A job attempt that was superseded (its heartbeat timed out and another attempt started)."""


class MissingInputsError(DataBuildError):
    """Raised inside a job when inputs are not live; the run ends as dep_miss, listing them all."""

    def __init__(self, refs: list[str]) -> None:
        self.refs = sorted(set(refs))
        super().__init__("missing inputs: " + ", ".join(self.refs))


class JavaNotFoundError(ConfigurationError):
    pass


class SparkStartError(DataBuildError):
    """The worker's Spark driver did not start; the message names the log that says why."""


class JobCancelledError(DataBuildError):
    """The job body stopped because its activity was cancelled."""


class JobContractError(DataBuildError):
    """The job broke its contract (wrote a ref it does not declare, or left an output unwritten)."""

    retryable = False


class CheckFailedError(DataBuildError):
    """A blocking check failed on an instance the job wrote: the run publishes nothing and fails. Not
    retried: the same code on the same inputs writes the same data; fix it, then `databuild resolve`."""

    retryable = False


class TableSchemaError(DataBuildError):
    """An output's schema would lose data in its table (a column dropped or narrowed, a type changed, other
    partition columns): the run publishes nothing and fails, and the table keeps what it had. Not retried:
    the same code writes the same schema; fix the job, then `databuild resolve` its partitions."""

    retryable = False


class BusyError(DataBuildError):
    """The server is doing as much of this kind of work at once as it allows (plans of big backfills
    hold memory and CPU that every other request needs): repeat in a few seconds."""

    http_status = 429
    exit_code = 1


class SparkJobError(DataBuildError):
    """The job's Spark work failed in the JVM; the message starts with the deepest Java cause (the whole
    trace is in the attempt's log). Retried, as any error of the job's."""


class ChecksTimedOutError(DataBuildError):
    """`databuild check` ran out of time on the worker (DATABUILD_CHECK_TIMEOUT): a check hangs, or needs
    longer than the setting allows. Nothing was recorded."""

    http_status = 504
    exit_code = 1


class SubmittedJobError(DataBuildError):
    """A job run as its own Spark application (spark-submit) raised, or its application ended without
    reporting a result. ``kind`` is the type name of what the job raised, ``traceback`` its traceback."""

    def __init__(self, message: str, *, kind: str = "SubmittedJobError", traceback: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.traceback = traceback


def error_class(name: str) -> type[DataBuildError] | None:
    """The DataBuild error class of that name (a job run in its own application reports only names)."""
    pending: list[type[DataBuildError]] = [DataBuildError]
    while pending:
        kind = pending.pop()
        if kind.__name__ == name:
            return kind
        pending.extend(kind.__subclasses__())
    return None
