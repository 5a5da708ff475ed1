"""What an error means to whoever asked: the one mapping the CLI (its exit code) and the HTTP API (its
status) share. DataBuild's own errors say it by class (databuild.errors); what the client of a dependency
raises when that dependency is down or refuses DataBuild is translated here, once; anything else is
unexpected (a bug): its traceback goes to a log, and the caller gets one line saying where."""

from sqlalchemy.exc import InterfaceError, OperationalError, SQLAlchemyError
from temporalio.service import RPCError, RPCStatusCode

from databuild.errors import (
    DatabaseUnavailableError,
    DataBuildError,
    TemporalSetupError,
    TemporalUnavailableError,
)

# The exception types of dependencies whose meaning ``understood`` may know (the HTTP API handles these).
FOREIGN: tuple[type[Exception], ...] = (RPCError, SQLAlchemyError)

UNEXPECTED_EXIT = 1
UNEXPECTED_STATUS = 500

_TEMPORAL_DOWN = (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED)
_TEMPORAL_REFUSED = (RPCStatusCode.PERMISSION_DENIED, RPCStatusCode.UNAUTHENTICATED)
MISSING_SEARCH_ATTRIBUTE = "no mapping defined for search attribute"


def understood(error: BaseException) -> DataBuildError | None:
    """``error`` as a DataBuild error that names the problem and the fix, or None if it is unexpected."""
    if isinstance(error, DataBuildError):
        return error
    if isinstance(error, RPCError):
        return _temporal(error)
    if isinstance(error, OperationalError | InterfaceError):
        return DatabaseUnavailableError(
            f"the build event log's database does not answer ({first_line(error.orig)}); start it, or point "
            "DATABUILD_DATABASE_URL at it, then repeat the command"
        )
    return None


def _temporal(error: RPCError) -> DataBuildError | None:
    if error.status in _TEMPORAL_DOWN:
        return TemporalUnavailableError(
            f"Temporal stopped answering ({error.message}); start it again (`databuild dev`, or the server at "
            "DATABUILD_TEMPORAL_ADDRESS), then repeat the command: repeating it registers nothing twice"
        )
    if error.status in _TEMPORAL_REFUSED:
        return TemporalSetupError(
            f"Temporal refused DataBuild ({error.message}); check DATABUILD_TEMPORAL_API_KEY, the TLS "
            "settings and what the namespace allows"
        )
    if error.status is RPCStatusCode.NOT_FOUND and "namespace" in error.message.lower():
        return TemporalSetupError(f"{error.message}; create the namespace, or set DATABUILD_NAMESPACE")
    if MISSING_SEARCH_ATTRIBUTE in error.message:
        return TemporalSetupError(
            f"{error.message}: the namespace lacks DataBuild's search attributes and this client could not "
            "add them; start a worker (`databuild worker`) once, which adds them"
        )
    return None


def exit_code(error: BaseException) -> int:
    known = understood(error)
    return UNEXPECTED_EXIT if known is None else known.exit_code


def http_status(error: BaseException) -> int:
    known = understood(error)
    return UNEXPECTED_STATUS if known is None else known.http_status


def unexpected(error: BaseException, log: str) -> str:
    """The one line an unexpected error gets. Only its type: its message was never checked for secrets."""
    return f"unexpected {type(error).__name__} (a bug in DataBuild); its traceback is in {log}"


def first_line(value: object) -> str:
    return str(value).strip().splitlines()[0] if str(value).strip() else type(value).__name__


# Characters of a failure's message that travel with it (as an activity's failure, a run's reason): a
# message of megabytes made a failure Temporal refuses. Whoever cuts one logs it whole.
MAX_REASON = 2000


def bounded(text: str, where: str = "the log") -> str:
    """``text`` cut to ``MAX_REASON`` characters, saying how many more ``where`` has."""
    if len(text) <= MAX_REASON:
        return text
    return f"{text[:MAX_REASON]}... ({len(text) - MAX_REASON:,} more characters in {where})"
