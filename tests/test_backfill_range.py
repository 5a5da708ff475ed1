"""A backfill's partitions without a server: a pure function of its request (pattern, range, step), and
bad ranges refused. (Backfills on the real stack: tests/test_backfill.py.)"""

from datetime import UTC, datetime, timedelta

import pytest

from databuild.backfill import BackfillRequest
from databuild.domain.backfills import backfill_partitions
from databuild.errors import InvalidInputError
from databuild.graph import load_graph

pytestmark = pytest.mark.unit


def test_partitions_of_a_range_are_a_pure_function_of_the_request() -> None:
    graph = load_graph("examples.demo:graph")
    days = BackfillRequest(pattern="raw_events/{date}", start=datetime(2024, 2, 1), end=datetime(2024, 2, 3))
    assert backfill_partitions(days, graph) == [
        (f"raw_events/2024-02-0{d}", datetime(2024, 2, d, tzinfo=UTC)) for d in (1, 2, 3)
    ]
    hours = BackfillRequest(
        pattern="raw_events/{date}",
        start=datetime(2024, 2, 1, 22),
        end=datetime(2024, 2, 2, 1),
        step=timedelta(hours=1),
    )
    assert [ref for ref, _ in backfill_partitions(hours, graph)] == [
        "raw_events/2024-02-01T22",
        "raw_events/2024-02-01T23",
        "raw_events/2024-02-02T00",
        "raw_events/2024-02-02T01",
    ]
    assert days.backfill_id == BackfillRequest(**days.model_dump()).backfill_id != hours.backfill_id
    with pytest.raises(InvalidInputError, match="not an output pattern"):
        backfill_partitions(BackfillRequest(pattern="nope/{date}", start=days.start, end=days.end), graph)
    for bad, reason in (
        ({"end": datetime(2024, 1, 1)}, "before it starts"),
        ({"step": timedelta(minutes=90)}, "whole number of hours or days"),
        ({"end": datetime(2040, 1, 1), "step": timedelta(hours=1)}, "at most 100000"),
    ):
        with pytest.raises(ValueError, match=reason):
            BackfillRequest(**{**days.model_dump(), **bad})
