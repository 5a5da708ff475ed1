"""The rules that start, abandon and admit job runs (``decisions.started``, ``decisions.unwanted``,
``pools.request``) on plain data: no database."""

import pytest

from databuild.domain import decisions, pools
from databuild.domain import events as ev
from databuild.errors import ConcurrentChangeError
from databuild.models import InstanceRef, JobRunCause, JobRunState

pytestmark = pytest.mark.unit

RUN = decisions.OpenRun(job_run_id="jr-1", locked_outputs=["a/1"])


def test_an_attempt_starts_unless_its_run_ended() -> None:
    instances = [InstanceRef(ref="a/1", instance_id="i1")]
    (event,) = decisions.started("jr-1", JobRunState.queued, ["a/1"], 2, "w", instances)
    assert isinstance(event, ev.JobRunStarted)
    assert (event.attempt, event.worker, event.instances) == (2, "w", instances)
    assert decisions.started("jr-1", JobRunState.succeeded, ["a/1"], 2, "w", instances) == []


def test_an_attempt_planned_for_other_outputs_than_the_batch_has_now_must_plan_again() -> None:
    with pytest.raises(ConcurrentChangeError, match="now builds a/1, a/2"):
        decisions.started(
            "jr-1", JobRunState.queued, ["a/1", "a/2"], 1, "w", [InstanceRef(ref="a/1", instance_id="i")]
        )
    assert len(decisions.started("jr-1", JobRunState.queued, ["a/1", "a/2"], 1, "w", [])) == 1


def test_a_queued_run_no_open_want_waits_on_is_abandoned() -> None:
    events = decisions.unwanted(RUN, JobRunState.queued, waiting=0)
    ended = [e for e in events if isinstance(e, ev.JobRunFailed)]
    assert len(ended) == 1 and ended[0].cause is JobRunCause.abandoned
    assert ended[0].reason == ev.ABANDONED_REASON
    assert [e.type for e in events if isinstance(e, ev.PartitionReleased)] == ["PartitionReleased"]


def test_a_run_someone_waits_on_or_that_started_is_left_alone() -> None:
    assert decisions.unwanted(RUN, JobRunState.queued, waiting=1) == []
    assert decisions.unwanted(RUN, JobRunState.running, waiting=0) == []
    assert decisions.unwanted(None, JobRunState.succeeded, waiting=0) == []


def test_a_run_without_pools_is_admitted_at_once() -> None:
    asked = pools.request("jr-1", JobRunState.queued, False, {}, in_line=False)
    assert asked.settled and [e.type for e in asked.events] == ["JobRunAdmitted"]


def test_a_run_with_pools_joins_their_lines_once() -> None:
    asked = pools.request("jr-1", JobRunState.queued, False, {"p": 1}, in_line=False)
    assert not asked.settled
    (event,) = asked.events
    assert isinstance(event, ev.JobRunWaiting) and event.pools == {"p": 1}
    again = pools.request("jr-1", JobRunState.queued, False, {"p": 1}, in_line=True)
    assert not again.settled and again.events == []


def test_an_admitted_or_ended_run_may_start() -> None:
    for state, admitted in ((JobRunState.queued, True), (JobRunState.failed, False)):
        asked = pools.request("jr-1", state, admitted, {"p": 1}, in_line=False)
        assert asked.settled and asked.events == []
    assert [e.type for e in pools.admissions(["a", "b"])] == ["JobRunAdmitted", "JobRunAdmitted"]
