"""What a job run's happy path costs the database, on both backends: each command is one connection and
one transaction that returns its result from inside it (no reads before it to choose its locks, none
after it to read back what it wrote), and the outcome's commit brings back what telling its wants reads."""

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from sqlalchemy import event

from databuild.bel import BuildEventLog
from databuild.models import InstanceRef, JobRunState, WantState
from tests.test_bel import bel, decide, empty_url, spec

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
    started = bel.start_attempt(verdict.job_run_id, 1, "w", timedelta(minutes=5))
    assert sent.checkouts == 1, sent
    assert started.run.state is JobRunState.running and set(started.instances) == set(verdict.outputs)
    assert not bel.lease_expired(verdict.job_run_id)
    sent.clear()
    written = [InstanceRef(ref=ref, instance_id=i) for ref, i in started.instances.items()]
    ended = bel.succeed_job_run(verdict.job_run_id, [], written, attempt=1)
    assert sent.checkouts == 1, sent
    assert ended.run.state is JobRunState.succeeded and sorted(ended.run.writes, key=str) == sorted(
        written, key=str
    )
    assert [s.want_id for s in ended.subscribers or []] == [want.want_id]
    assert ended.admitted == [] and ended.checks == {}
    assert bel.want(want.want_id).state is WantState.building  # the want hears of it from the fan-out


def test_a_run_is_read_in_one_checkout(bel: BuildEventLog, sent: Sent) -> None:
    verdict = decide(bel, spec("a/2"))
    sent.clear()
    assert bel.job_run(verdict.job_run_id).job_run_id == verdict.job_run_id
    assert sent.checkouts == 1
