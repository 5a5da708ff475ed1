"""An outage of the BEL's PostgreSQL (a failover: every connection terminated, new ones refused for a while)
costs no work: a job attempt that meets it while it records its outcome tries again in place until the
database is back (docs/operations/index.md, Database outages), so its build goes live on its first attempt
instead of failing every attempt inside its publish commit and fail-locking what it wrote correctly."""

import asyncio
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy.exc import OperationalError

from databuild.bel import BuildEventLog
from databuild.bel.engine.outages import through_outages
from databuild.errors import NotFoundError
from databuild.models import JobRunState, PartitionStatus, WantState
from databuild.testing import POSTGRES_ADMIN_URL, cut_off, postgres_database
from tests.conftest import require_postgres
from tests.graphs import OUTAGE_DATABASE


@pytest.fixture
def outage_url() -> Iterator[str]:
    require_postgres()
    with postgres_database(POSTGRES_ADMIN_URL, "outage", durable=False) as url:
        yield url


def test_a_command_rides_out_an_outage_and_nothing_else(outage_url: str) -> None:
    bel = BuildEventLog.create(outage_url)
    try:
        assert bel.events.query(limit=1) == []  # the log answers before the outage
        heard: list[str] = []
        cut_off(POSTGRES_ADMIN_URL, outage_url, 2.0)
        started = time.monotonic()
        with pytest.raises(OperationalError):
            bel.events.query(limit=1)  # what a command without patience meets
        events = through_outages(
            lambda: bel.events.query(limit=1), patience=timedelta(seconds=60), waiting=heard.append
        )
        assert events == [] and time.monotonic() - started >= 1.5
        assert heard and all("the build event log's database does not answer" in h for h in heard)

        with pytest.raises(NotFoundError):  # a refusal is no outage: said at once
            through_outages(lambda: bel.job_runs.get("no-such-run"), patience=timedelta(seconds=60))
        longer = cut_off(POSTGRES_ADMIN_URL, outage_url, 3.0)  # an outage that outlasts the patience
        with pytest.raises(OperationalError):
            through_outages(lambda: bel.events.query(limit=1), patience=timedelta(seconds=1))
        longer.join()
    finally:
        bel.dispose()


async def test_a_publish_commit_that_meets_a_failover_goes_live_on_its_first_attempt(
    make_stack, outage_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(OUTAGE_DATABASE, outage_url)
    stack = await make_stack(graph="tests.graphs:outage", database_url=outage_url)
    want = await stack.db.want("survived/1")
    done = await asyncio.wait_for(stack.db.wait(want), timeout=240)
    assert done.state is WantState.successful, done.reason
    partition = stack.bel.partitions.get("survived/1")
    assert partition.status is PartitionStatus.live
    (run,) = stack.bel.job_runs.query(limit=10)
    assert run.state is JobRunState.succeeded and run.attempts == 1, run  # the Spark work ran once
