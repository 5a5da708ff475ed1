"""The wants aggregate of the BEL (``bel.aggregates.wants``) on SQLite: registration, waiting for inputs, SLA
flags, cancelling, finishing and reopening, and the reads of wants."""

from datetime import timedelta

import pytest
from sqlalchemy import event as sql_event

from databuild.bel import BuildEventLog
from databuild.domain import events as ev
from databuild.domain.cost import SparkCost
from databuild.domain.endings import Finished
from databuild.domain.wants import WantStart
from databuild.errors import NotFoundError
from databuild.models import InstanceRef, JobRunState, WantSource, WantState
from tests.bel_sqlite import AT, build, decide, graph, spec

pytestmark = pytest.mark.unit


def test_registering_is_idempotent_and_the_want_reads_back(bel: BuildEventLog) -> None:
    want, created = bel.wants.register(spec("a/1"))
    again, created_again = bel.wants.register(spec("a/1"))
    assert (created, created_again) == (True, False) and want == again
    assert bel.wants.get(want.want_id) == want and bel.wants.find("nope") is None
    assert bel.wants.query(ref_glob="a/*") == [want] and bel.wants.query(state=WantState.failed) == []
    assert bel.wants.by_id([want.want_id, want.want_id]) == [want]
    assert bel.wants.decision_seq(want.want_id) == 0
    assert want.opening == 0 and WantStart.of(want) == WantStart(spec=want.spec)
    with pytest.raises(NotFoundError):
        bel.wants.get("nope")


def test_a_want_waits_for_its_missing_inputs_through_derivative_wants(bel: BuildEventLog) -> None:
    verdict = decide(bel, spec("mid/1"))
    want = bel.wants.query()[0]
    status, started, _ = bel.wants.await_dependencies(want.want_id, verdict.job_run_id, ["up/1", "ext/1"])
    assert status.live == [] and status.failed == {}
    assert sorted(d.spec.ref for d in started) == ["ext/1", "up/1"]
    assert {d.opening for d in started} == {0}
    by_id = {w.want_id: w for w in bel.wants.query(parent_want_id=want.want_id)}
    assert started == [WantStart.of(by_id[d.spec.want_id]) for d in started]
    assert bel.wants.get(want.want_id).state is WantState.upstream_building
    derivatives = bel.wants.derivatives_of([want.want_id])
    assert sorted(ref for _, _, ref, _ in derivatives) == ["ext/1", "up/1"]
    family, _runs = bel.wants.family(want.want_id)
    assert len(family) == 3 and {w.source for w in family[:2]} == {WantSource.derivative}
    # Asked again (a retried activity), nothing new is recorded.
    before = bel.events.last_idx()
    assert bel.wants.await_dependencies(want.want_id, verdict.job_run_id, ["up/1", "ext/1"])[1] == started
    assert bel.events.last_idx() == before


def test_an_ended_want_starts_no_derivatives(bel: BuildEventLog) -> None:
    want, _ = bel.wants.register(spec("mid/1"))
    bel.wants.cancel([want.want_id], "stop")
    status, started, _ = bel.wants.await_dependencies(want.want_id, None, ["up/1"])
    assert started == [] and status.failed == {"up/1": f"want {want.want_id} has ended (canceled)"}


def test_requirements_live_already_are_reported(bel: BuildEventLog) -> None:
    bel.partitions.publish_external("ext/1")
    want, _ = bel.wants.register(spec("a/1"))
    assert bel.wants.await_requirements(want.want_id, ["ext/1", "ext/2"]) == ["ext/1"]
    assert [e.type for e in bel.events.query(want_id=want.want_id)][-1] == "WantAwaitingRequirements"
    before = bel.events.last_idx()
    bel.wants.await_requirements(want.want_id, ["ext/1"])  # no longer new: nothing recorded
    assert bel.events.last_idx() == before


def test_sla_flags_are_raised_once(bel: BuildEventLog) -> None:
    want, _ = bel.wants.register(spec("a/1"))
    assert bel.wants.mark_sla_missed(want.want_id, AT).sla_missed
    assert bel.wants.mark_sla_at_risk(want.want_id, AT, AT + timedelta(hours=1), "a")[1]
    assert not bel.wants.mark_sla_at_risk(want.want_id, AT, AT, None)[1]
    bel.wants.mark_sla_missed(want.want_id, AT)
    assert len(bel.events.query(types=["WantSlaMissed", "WantSlaAtRisk"])) == 2
    assert bel.wants.sla_misses() == []  # no deadline of its own


def test_cancelling_ends_open_wants_and_abandons_the_runs_no_one_needs(bel: BuildEventLog) -> None:
    first = decide(bel, spec("a/1"))
    other = decide(bel, spec("up/1"))
    decide(bel, spec("up/1", WantSource.api))  # delegates: its run is still needed
    mine = [w for w in bel.wants.query() if w.ref in ("a/1", "up/1") and w.source is WantSource.cli]
    cancelled, told = bel.wants.cancel([w.want_id for w in mine], "operator")
    assert {w.state for w in cancelled} == {WantState.canceled}
    assert told == [bel.job_runs.get(first.job_run_id).workflow_id]
    assert bel.job_runs.get(first.job_run_id).state is JobRunState.cancelled
    assert bel.job_runs.get(other.job_run_id).state is JobRunState.queued
    assert bel.wants.cancel([w.want_id for w in mine], "again") == ([], [])


def test_a_finish_is_recorded_once_and_a_retry_reopens_it(bel: BuildEventLog) -> None:
    written = build(bel, "up/1")
    want = bel.wants.query()[0]
    done, how = bel.wants.finish(
        want.want_id, WantState.successful, instance_id=written.instance_id, opening=0
    )
    assert (done.state, how) == (WantState.successful, Finished.recorded)
    assert bel.wants.finish(want.want_id, WantState.failed, opening=0)[1] is Finished.already
    assert bel.wants.reopen([want.want_id]) == []  # only failed or canceled wants reopen
    assert bel.wants.get(want.want_id).opening == 0
    failed, _ = bel.wants.register(spec("ext/9"))
    bel.wants.finish(failed.want_id, WantState.failed, "no")
    (reopened,) = bel.wants.reopen([failed.want_id])
    assert reopened.state is WantState.new and bel.wants.decision_seq(failed.want_id) == 1
    assert reopened.opening == 1 and WantStart.of(reopened) == WantStart(spec=failed.spec, opening=1)
    assert bel.wants.finish(failed.want_id, WantState.failed, opening=0)[1] is Finished.stale
    assert bel.wants.get(failed.want_id).state is WantState.new


def test_links_of_wants_to_runs(bel: BuildEventLog) -> None:
    verdict = decide(bel, spec("up/1"))
    joined = decide(bel, spec("up/1", WantSource.api))
    assert joined.job_run_id == verdict.job_run_id
    ids = sorted(w.want_id for w in bel.wants.query())
    links = bel.wants.links(ids)
    assert sorted(relation for _, _, relation in links) == ["delegated", "executed"]
    wanted, total = bel.wants.wanted_by(verdict.job_run_id)
    assert total == 2 and {w for w, _ in wanted} == set(ids)
    assert bel.wants.waiting_on(verdict.job_run_id) == 2
    assert bel.wants.delegations_to(verdict.job_run_id)[1] == 1
    bel.job_runs.start(verdict.job_run_id, 1, "w")
    bel.job_runs.succeed(verdict.job_run_id, [], [InstanceRef(ref="up/1", instance_id="u")])
    assert [run.state for _, run in bel.job_runs.of_want(ids[0])] == [JobRunState.succeeded]


def test_no_statement_of_a_wants_path_is_built_per_call(bel: BuildEventLog) -> None:
    """Every statement a want's BEL calls run (register, decide, the run's start and success, the cost,
    the finish and what the activities read around them) is built once: on SQLite, building a statement
    costs more than running it. The second want runs only statement objects the first one ran."""
    ran: list[object] = []

    def record(_conn: object, statement: object, *_: object) -> None:
        if not isinstance(statement, str):
            ran.append(statement)

    def one_want(n: int) -> set[int]:
        ran.clear()
        want = spec(f"a/{n}")
        bel.wants.register(want)
        bel.wants.decision_seq(want.want_id)
        verdict = bel.decisions.decide(want.want_id, 1, graph.resolve(want.ref), opening=0)
        bel.wants.get(want.want_id)
        bel.job_runs.get(verdict.job_run_id)
        written = [InstanceRef(ref=ref, instance_id=f"{ref}@1") for ref in (f"a/{n}", f"b/{n}")]
        bel.job_runs.start(verdict.job_run_id, 1, "w", written, timedelta(minutes=5))
        cost = ev.JobRunCostRecorded(
            job_run_id=verdict.job_run_id,
            attempt=1,
            job_label=verdict.job_label,
            executor="session",
            cost=SparkCost(task_seconds=1.0, cpu_seconds=0.5, tasks=2),
        )
        bel.job_runs.succeed(verdict.job_run_id, [], written, 1, cost=cost)
        bel.partitions.by_ref([w.ref for w in written])
        bel.partitions.checks_of([w.instance_id for w in written])
        bel.wants.subscriptions_of(want.want_id, [w.ref for w in written])
        bel.wants.finish(want.want_id, WantState.successful, None, written[0].instance_id, opening=0)
        bel.backfills.finished_of(want.want_id)
        return {id(statement) for statement in ran}

    engines = {bel.reader, bel.writer}
    for engine in engines:
        sql_event.listen(engine, "before_execute", record)
    try:
        first = one_want(1)
        kept = list(ran)  # alive, so that no statement of the second want reuses an id of the first's
        second = one_want(2)
    finally:
        for engine in engines:
            sql_event.remove(engine, "before_execute", record)
    assert kept and second <= first, [str(s) for s in ran if id(s) not in first]
