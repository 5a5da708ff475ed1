"""The events aggregate of the BEL (``bel.aggregates.events``) on SQLite: reading the log after a cursor,
statistics, and rebuilding the projections from the events alone."""

import pytest

from databuild.bel import BuildEventLog
from databuild.models import EventFilter, WantSource
from databuild.testing import projection_rows
from tests.bel_sqlite import build, decide, spec

pytestmark = pytest.mark.unit


def test_pages_of_events_follow_the_cursor(bel: BuildEventLog) -> None:
    up = build(bel, "up/1")
    build(bel, "mid/1", reads=[up])
    head = bel.events.last_idx()
    everything = bel.events.query(limit=1000)
    assert [e.idx for e in everything] == list(range(1, head + 1))
    first = bel.events.page(0, 3, EventFilter())
    assert [e.idx for e in first.events] == [1, 2, 3] and first.next_since_idx == 3
    rest = bel.events.page(first.next_since_idx, 1000, EventFilter())
    assert rest.events[-1].idx == head and rest.next_since_idx == head == rest.last_idx
    mid = bel.events.page(0, 1000, EventFilter(patterns=["mid/*"], types=["PartitionLive"]))
    assert [(e.type, e.ref) for e in mid.events] == [("PartitionLive", "mid/1")]
    assert mid.next_since_idx == head  # past the events that did not match
    assert {e.type for e in bel.events.query(pattern="up/*")} >= {"PartitionBuilding", "PartitionLive"}


def test_stats_count_runs_by_job_and_delegations(bel: BuildEventLog) -> None:
    build(bel, "up/1")
    decide(bel, spec("up/1", WantSource.api))  # live already: a historical delegation
    stats = bel.events.stats()
    (up,) = stats.jobs
    assert (up.job_label, up.succeeded, up.skipped, up.success_rate) == ("up", 1, 1, 1.0)
    assert stats.delegations_historical == 1 and stats.builds_avoided == 1


def test_projections_rebuild_from_the_events_alone(bel: BuildEventLog) -> None:
    up = build(bel, "up/1")
    build(bel, "mid/1", reads=[up])
    bel.partitions.taint("up/1", cascade=True)
    before = projection_rows(bel)
    assert bel.events.rebuild_projections() == bel.events.last_idx()
    assert projection_rows(bel) == before
