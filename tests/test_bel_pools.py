"""The pools aggregate of the BEL (``bel.aggregates.pools``) on SQLite: admission to pool slots, leases."""

from datetime import timedelta

import pytest

from databuild.bel import BuildEventLog
from databuild.models import JobRunState, WantSpec
from tests.bel_sqlite import AT, decide, spec

pytestmark = pytest.mark.unit


def test_a_pool_admits_as_many_runs_as_it_has_slots(bel: BuildEventLog) -> None:
    first, second = (decide(bel, spec(f"up/{n}")) for n in (1, 2))
    assert bel.pools.have_room({"p": 1})
    assert bel.pools.request_admission(first.job_run_id, {"p": 1})
    assert not bel.pools.have_room({"p": 1})
    assert not bel.pools.request_admission(second.job_run_id, {"p": 1})
    assert not bel.pools.request_admission(second.job_run_id, {"p": 1})  # it is in line once
    assert bel.job_runs.get(second.job_run_id).waiting_for_pools == ["p"]
    assert len(bel.events.query(types=["JobRunWaiting"])) == 2  # each run joined the line once
    assert bel.pools.admitted_not_started() == [bel.job_runs.get(first.job_run_id).workflow_id]
    # The slot of a run that ends goes to the head of the line.
    bel.job_runs.fail(first.job_run_id, "boom")
    assert bel.pools.admitted_not_started() == [bel.job_runs.get(second.job_run_id).workflow_id]
    assert bel.pools.request_admission(second.job_run_id, {"p": 1})


def test_without_pools_or_once_ended_a_run_may_start(bel: BuildEventLog) -> None:
    verdict = decide(bel, spec("up/1"))
    assert bel.pools.request_admission(verdict.job_run_id, {})
    assert not bel.pools.batch_is_full(verdict.job_run_id)
    ended = decide(bel, spec("up/2"))
    bel.job_runs.fail(ended.job_run_id, "boom")
    assert bel.job_runs.get(ended.job_run_id).state is JobRunState.failed
    assert bel.pools.request_admission(ended.job_run_id, {"p": 1})
    assert bel.events.query(types=["JobRunWaiting"]) == []


def test_a_lease_lapses_unless_renewed(bel: BuildEventLog) -> None:
    verdict = decide(bel, spec("up/1"))
    assert not bel.pools.lease_expired(verdict.job_run_id)  # a queued run gets its lease
    bel.pools.renew_lease(verdict.job_run_id, timedelta(seconds=-1))
    assert bel.pools.lease_expired(verdict.job_run_id)
    bel.pools.renew_lease(verdict.job_run_id, timedelta(minutes=5))
    assert not bel.pools.lease_expired(verdict.job_run_id)
    assert bel.pools.lease_expired("jr-unknown")
    # An attempt that starts renews it in the same commit (it may start long after the run was queued).
    bel.pools.renew_lease(verdict.job_run_id, timedelta(seconds=-1))
    bel.job_runs.start(verdict.job_run_id, 1, "w", lease=timedelta(minutes=5))
    assert not bel.pools.lease_expired(verdict.job_run_id)
    bel.job_runs.fail(verdict.job_run_id, "boom")
    bel.pools.renew_lease(verdict.job_run_id, timedelta(seconds=-1))
    bel.job_runs.start(verdict.job_run_id, 2, "w", lease=timedelta(minutes=5))  # it ended: no attempt starts
    assert bel.pools.lease_expired(verdict.job_run_id)


def test_the_line_of_a_full_pool_goes_by_sla_slack(bel: BuildEventLog) -> None:
    holder = decide(bel, spec("up/1"))
    assert bel.pools.request_admission(holder.job_run_id, {"p": 1})
    no_sla = decide(bel, spec("up/2"))
    due_late = decide(bel, WantSpec(ref="up/3", data_timestamp=AT, sla=timedelta(hours=9)))
    due_soon = decide(bel, WantSpec(ref="up/4", data_timestamp=AT, sla=timedelta(hours=1)))
    for queued in (no_sla, due_late, due_soon):  # in that order
        assert not bel.pools.request_admission(queued.job_run_id, {"p": 1})
    for ended, admitted in ((holder, due_soon), (due_soon, due_late), (due_late, no_sla)):
        bel.job_runs.fail(ended.job_run_id, "boom")  # its slot goes to the run with the least slack
        assert bel.pools.admitted_not_started() == [bel.job_runs.get(admitted.job_run_id).workflow_id]
