"""Errors leave every activity the same way: a DataBuild error becomes a Temporal ApplicationError whose
type is the error's class name and which is retried only if the class says a retry can help
(``DataBuildError.retryable``). Installed on the worker as an interceptor, so activities just raise."""

from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from databuild.errors import DataBuildError, SubmittedJobError, error_class
from databuild.failures import MAX_REASON, bounded


def application_error(error: DataBuildError) -> ApplicationError:
    if isinstance(error, SubmittedJobError):
        # What the job raised in its own application reads as if it ran in-process: its type decides.
        kind = error_class(error.kind)
        retryable = kind.retryable if kind is not None else True
        return ApplicationError(
            _said(error), bounded(error.traceback), type=error.kind, non_retryable=not retryable
        )
    return ApplicationError(
        _said(error), *error.details(), type=type(error).__name__, non_retryable=not error.retryable
    )


def _said(error: Exception) -> str:
    """The error's message as it travels: bounded, and logged whole when it is cut."""
    text = str(error)
    if len(text) > MAX_REASON:
        activity.logger.warning("%s (its whole message): %s", type(error).__name__, text)
    return bounded(text, "the worker's log")


class DataBuildErrors(Interceptor):
    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Converting(next)


class _Converting(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        try:
            return await self.next.execute_activity(input)
        except DataBuildError as error:
            converted = application_error(error)
            # The submitted job's own traceback is the story; how it travelled back is not.
            raise converted from (None if isinstance(error, SubmittedJobError) else error)
        except WorkflowAlreadyStartedError as error:
            # Raised as is, it leaves the activity hanging until its timeout.
            raise ApplicationError(str(error), type="WorkflowAlreadyStartedError") from error
        except ApplicationError:
            raise
        except Exception as error:
            if len(str(error)) <= MAX_REASON:
                raise
            # Not chained: the whole message would travel as the cause, and be the reason again.
            raise ApplicationError(_said(error), type=type(error).__name__) from None
