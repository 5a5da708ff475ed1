"""Scheduled wants: a pattern such as ``daily_summary/{date}`` filled from a schedule's time.

Placeholders: ``{date}`` (2024-01-07), ``{hour}`` (2024-01-07T05), ``{month}`` (2024-01), ``{year}``.
The want's data timestamp is the scheduled time itself, so a re-run or a backfill of the same time is
the same want (idempotent)."""

import string
from datetime import UTC, datetime, timedelta

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleBackfill,
    ScheduleHandle,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.service import RPCError, RPCStatusCode

from databuild.errors import (
    InvalidInputError,
    InvalidTransitionError,
    NotFoundError,
)
from databuild.refs import validate_ref
from databuild.temporal.protocol import (
    SCHEDULED_WANT_WORKFLOW,
    ScheduledWantInput,
)

FORMATS = {"date": "%Y-%m-%d", "hour": "%Y-%m-%dT%H", "month": "%Y-%m", "year": "%Y"}


def fill(pattern: str, at: datetime) -> str:
    """The ref ``pattern`` names at ``at`` (UTC)."""
    at = at.astimezone(UTC)
    return pattern.format(**{name: at.strftime(fmt) for name, fmt in FORMATS.items()})


def check_pattern(pattern: str) -> None:
    fields = [f for _, f, _, _ in string.Formatter().parse(pattern) if f is not None]
    unknown = sorted(set(fields) - FORMATS.keys())
    if unknown:
        raise InvalidInputError(
            f"schedule pattern {pattern!r} has unknown placeholder(s) {', '.join(unknown)}; "
            f"use {', '.join('{' + f + '}' for f in FORMATS)}"
        )
    if not fields:
        raise InvalidInputError(f"schedule pattern {pattern!r} has no time placeholder, e.g. {{date}}")
    validate_ref(fill(pattern, datetime(2024, 1, 7, 5, tzinfo=UTC)))


SCHEDULE_PREFIX = "want-schedule:"


def schedule_id(pattern: str) -> str:
    return SCHEDULE_PREFIX + pattern


async def create_want_schedule(
    client: Client, task_queue: str, input: ScheduledWantInput, cron: str, *, paused: bool = False
) -> str:
    """A Temporal Schedule whose runs want ``input.pattern`` for their scheduled time."""
    sid = schedule_id(input.pattern)
    try:
        await client.create_schedule(
            sid,
            Schedule(
                action=ScheduleActionStartWorkflow(
                    SCHEDULED_WANT_WORKFLOW, input, id=sid, task_queue=task_queue
                ),
                spec=ScheduleSpec(cron_expressions=[cron]),
                # Every scheduled time is its own want; a slow one must not hold the next back.
                policy=SchedulePolicy(
                    overlap=ScheduleOverlapPolicy.ALLOW_ALL, catchup_window=timedelta(days=1)
                ),
                state=ScheduleState(paused=paused, note=f"cron {cron}"),
            ),
        )
    except ScheduleAlreadyRunningError:
        raise InvalidTransitionError(
            f"a schedule for {input.pattern!r} exists; `databuild schedule remove {input.pattern}` first"
        ) from None
    except RPCError as error:
        raise InvalidInputError(
            f"Temporal refused the schedule ({error.message}); check --cron {cron!r}"
        ) from None
    return sid


async def backfill_want_schedule(client: Client, pattern: str, start: datetime, end: datetime) -> None:
    """Run the schedule for every time it would have fired in [start, end] (idempotent: one want per time)."""
    handle = client.get_schedule_handle(schedule_id(pattern))
    await _known_schedule(handle, pattern)
    await handle.backfill(
        ScheduleBackfill(start_at=start, end_at=end, overlap=ScheduleOverlapPolicy.ALLOW_ALL)
    )


async def delete_want_schedule(client: Client, pattern: str) -> None:
    handle = client.get_schedule_handle(schedule_id(pattern))
    await _known_schedule(handle, pattern)
    await handle.delete()


async def list_want_schedules(client: Client) -> list[tuple[str, str, bool]]:
    """(pattern, its cron expression, paused) of the want schedules."""
    found = []
    async for listed in await client.list_schedules():
        if listed.id.startswith(SCHEDULE_PREFIX):
            described = await client.get_schedule_handle(listed.id).describe()
            spec, state = described.schedule.spec, described.schedule.state
            cron = ", ".join(spec.cron_expressions) or (state.note or "").removeprefix("cron ")
            found.append((listed.id.removeprefix(SCHEDULE_PREFIX), cron, state.paused))
    return sorted(found)


async def _known_schedule(handle: ScheduleHandle, pattern: str) -> None:
    try:
        await handle.describe()
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            raise NotFoundError(f"no schedule for {pattern!r}; see `databuild schedule list`") from None
        raise
