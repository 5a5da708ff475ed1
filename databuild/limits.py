"""The valid ranges of how a job run is run: the worker's settings (``DATABUILD_JOB_*``), a job's own
``@graph.job(retries=, timeout=, heartbeat_timeout=)`` and the policy a job run workflow was started
with. Outside them Temporal cannot run the job at all (a negative attempt count or a zero timeout fails
every workflow task of the run, which then stays queued with its outputs locked), or runs it in a way
nobody wants (0 attempts is Temporal's "retry forever", so the run never fails and never fail-locks)."""

from datetime import timedelta
from typing import Protocol

from databuild.durations import MAX_DURATION, format_duration

# Past a thousand attempts a failing job retries for days (and Temporal keeps the count in an int32).
MAX_ATTEMPTS = 1000
# The job activity heartbeats this often; a heartbeat timeout of less than two beats times attempts out.
JOB_HEARTBEAT_EVERY = timedelta(seconds=2)
MIN_HEARTBEAT_TIMEOUT = 2 * JOB_HEARTBEAT_EVERY
MIN_TIMEOUT = timedelta(seconds=1)
MIN_LEASE = timedelta(seconds=1)
# The shortest late-data window a job may declare (rebuild_on_new_inputs).
MIN_LOOKBACK = timedelta(minutes=1)


def shown(value: object) -> str:
    """A bound or a value as the settings write it (``4s``, ``36500d``, ``1000``)."""
    if not isinstance(value, timedelta):
        return str(value)
    if value < timedelta(0) or value % timedelta(seconds=1):
        return f"{value.total_seconds():g}s"
    return format_duration(value)


class Policy(Protocol):
    """How a job run's activity is run (``protocol.JobPolicy``)."""

    @property
    def attempts(self) -> int: ...
    @property
    def start_to_close_timeout(self) -> timedelta: ...
    @property
    def heartbeat_timeout(self) -> timedelta: ...
    @property
    def lease(self) -> timedelta: ...


def policy_problem(policy: Policy) -> str | None:
    """What makes a job run's policy unusable (the first thing), or None if it can run."""
    if not 1 <= policy.attempts <= MAX_ATTEMPTS:
        return f"attempts {policy.attempts} is not within 1 to {MAX_ATTEMPTS}"
    durations = (
        ("timeout", policy.start_to_close_timeout, MIN_TIMEOUT),
        ("heartbeat timeout", policy.heartbeat_timeout, MIN_HEARTBEAT_TIMEOUT),
        ("lease", policy.lease, MIN_LEASE),
    )
    for name, value, low in durations:
        if not low <= value <= MAX_DURATION:
            return f"{name} {shown(value)} is not within {shown(low)} to {shown(MAX_DURATION)}"
    return None
