"""What the happy paths of a job run and a want cost the database, on both backends: each command is one connection and
one transaction that returns its result from inside it (no reads before it to choose its locks, none
after it to read back what it wrote), and the outcome's commit brings back what telling its wants reads."""

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from sqlalchemy import event

from databuild.bel import BuildEventLog
from databuild.domain.endings import Finished
from databuild.models import InstanceRef, JobRunState, WantState
from tests.test_bel import bel, decide, empty_url, graph, spec

__all__ = ["bel", "empty_url"]  # the two-backend fixtures


@dataclass
class Sent:
    """Connections checked out and statements sent, on both of a log's engines."""

    checkouts: int = 0
    statements: list[str] = field(default_factory=list)

    def clear(self) -> None:
        self.checkouts = 0
        self.statements.clear()


@pytest.fixture
def sent(bel: BuildEventLog) -> Iterator[Sent]:
    counted = Sent()

    def checked_out(*_: object) -> None:
        counted.checkouts += 1

    def statement(_conn: object, _cursor: object, text: str, *_: object) -> None:
        counted.statements.append(text)

    engines = {bel.reader, bel.writer}
    for engine in engines:
        event.listen(engine, "checkout", checked_out)
        event.listen(engine, "before_cursor_execute", statement)
    yield counted
    for engine in engines:
        event.remove(engine, "checkout", checked_out)
        event.remove(engine, "before_cursor_execute", statement)


def test_a_job_runs_happy_path_is_two_round_trips_of_one_transaction_each(
    bel: BuildEventLog, sent: Sent
) -> None:
    """Start (planning the instance of each output itself) and publish: one checkout each, and the
    publish's commit returns the run, its first page of subscribers, the runs to wake and the checks of
    what it published, so the fan-out that follows reads nothing more."""
    want = spec("a/1")
    verdict = decide(bel, want)
    sent.clear()
    started = bel.job_runs.start_attempt(verdict.job_run_id, 1, "w", timedelta(minutes=5))
    assert sent.checkouts == 1, sent
    assert started.run.state is JobRunState.running and set(started.instances) == set(verdict.outputs)
    assert not bel.pools.lease_expired(verdict.job_run_id)
    sent.clear()
    written = [InstanceRef(ref=ref, instance_id=i) for ref, i in started.instances.items()]
    ended = bel.job_runs.succeed(verdict.job_run_id, [], written, attempt=1)
    assert sent.checkouts == 1, sent
    assert ended.run.state is JobRunState.succeeded and sorted(ended.run.writes, key=str) == sorted(
        written, key=str
    )
    assert [s.want_id for s in ended.subscribers or []] == [want.want_id]
    assert ended.admitted == [] and ended.checks == {}
    assert bel.wants.get(want.want_id).state is WantState.building  # the want hears of it from the fan-out


def test_a_run_is_read_in_one_checkout(bel: BuildEventLog, sent: Sent) -> None:
    verdict = decide(bel, spec("a/2"))
    sent.clear()
    assert bel.job_runs.get(verdict.job_run_id).job_run_id == verdict.job_run_id
    assert sent.checkouts == 1


def test_a_wants_happy_path_is_three_round_trips_of_one_transaction_each(
    bel: BuildEventLog, sent: Sent
) -> None:
    """A want as the client registers it, as its workflow's first step records and decides it, and as it
    finishes: one checkout each (its run's path is the test above)."""
    want = spec("a/3")
    bel.wants.register(want)  # the client's, once the workflow is started
    assert sent.checkouts == 1, sent
    sent.clear()
    seq, verdict = bel.decisions.first_step(want, graph.resolve(want.ref))
    assert sent.checkouts == 1, sent
    assert seq == 1 and verdict.kind == "execute"
    written = run_to_success(bel, verdict.job_run_id)
    sent.clear()
    done, finished = bel.wants.finish(want.want_id, WantState.successful, instance_id=written[want.ref])
    assert sent.checkouts == 1, sent
    assert done.state is WantState.successful and finished is Finished.recorded


def test_a_first_step_records_the_want_once_and_decides_after_the_last_step(bel: BuildEventLog) -> None:
    """A first step records a want the client has not yet (once), and a new workflow run of a want whose
    run died decides from the step after the last one recorded, following the run it queued."""
    want = spec("a/4")
    seq, verdict = bel.decisions.first_step(want, graph.resolve(want.ref))
    assert (seq, verdict.kind) == (1, "execute")
    assert bel.wants.register(want)[1] is False  # the client's, after: already recorded
    again, followed = bel.decisions.first_step(want, graph.resolve(want.ref))
    assert again == 2 and followed.job_run_id == verdict.job_run_id  # its run, not a second one
    assert [e.type for e in bel.events.query(want_id=want.want_id)].count("WantCreated") == 1


def run_to_success(bel: BuildEventLog, job_run_id: str) -> dict[str, str]:
    started = bel.job_runs.start_attempt(job_run_id, 1, "w", timedelta(minutes=5))
    written = [InstanceRef(ref=ref, instance_id=i) for ref, i in started.instances.items()]
    bel.job_runs.succeed(job_run_id, [], written, attempt=1)
    return started.instances
