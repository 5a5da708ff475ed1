"""Late data without servers: the rule of which readers a newer input instance rebuilds
(databuild.domain.late_data), the readers the BEL finds for it, and a window the graph refuses. (On the
real stack: tests/test_late_data_stack.py.)"""

from datetime import UTC, datetime, timedelta

import pytest

from databuild.bel import BuildEventLog
from databuild.domain.late_data import LateReader, late_rebuilds
from databuild.errors import GraphDefinitionError
from databuild.graph import Graph
from databuild.models import InstanceRef
from tests.test_staleness import AT, build, layers

pytestmark = pytest.mark.unit

NOW = datetime(2024, 1, 10, tzinfo=UTC)
DAY = timedelta(days=1)


def reader(
    ref: str, at: datetime, job: str = "mid", input_ref: str = "up/1", live: str = "up@2"
) -> LateReader:
    return LateReader(ref, f"{ref}@1", job, at, input_ref, "up@1", live)


def test_readers_inside_their_jobs_window_are_rebuilt_once_each_the_rest_not() -> None:
    windows = {"mid": 2 * DAY, "side": None}
    found = late_rebuilds(
        [
            reader("mid/9", NOW - DAY),
            reader("mid/9", NOW - DAY, input_ref="other/1", live="other@2"),  # two late inputs: one rebuild
            reader("mid/8", NOW - 2 * DAY),  # the window's edge is inside it
            reader("mid/1", NOW - 9 * DAY),  # outside: it only shows stale
            reader("side/9", NOW, job="side"),  # no window
            reader("ext/9", NOW, job="unknown"),  # a job the graph no longer has
        ],
        windows,
        NOW,
    )
    assert [(r.ref, r.data_time) for r in found] == [("mid/8", NOW - 2 * DAY), ("mid/9", NOW - DAY)]
    assert found[1].cause == (  # of its two late inputs, the first by ref
        "late data: other/1 has a newer instance other@2 than the up@1 that mid/9@1 read, within mid's 2d "
        "rebuild_on_new_inputs window"
    )
    # The same news makes the same want (heard twice: one rebuild); a newer instance again, another.
    (once,) = late_rebuilds([reader("mid/9", NOW)], windows, NOW)
    assert late_rebuilds([reader("mid/9", NOW - DAY)], windows, NOW)[0].fresh_of == once.fresh_of
    assert late_rebuilds([reader("mid/9", NOW, live="up@3")], windows, NOW)[0].fresh_of != once.fresh_of
    assert late_rebuilds([reader("mid/9", NOW)], {}, NOW) == []


@pytest.mark.parametrize(
    ("window", "why"),
    [
        ("0s", "give a duration from 1m"),
        (timedelta(seconds=30), "give a duration from 1m"),
        ("-1d", "is negative"),
        ("soon", "write it like 9h"),
    ],
)
def test_a_window_too_short_or_malformed_is_refused_when_the_graph_loads(window: object, why: str) -> None:
    g = Graph("g")
    with pytest.raises(GraphDefinitionError, match=f"^rebuild_on_new_inputs=.*{why}"):
        g.job("a/{n}", rebuild_on_new_inputs=window)(lambda ctx, n: None)  # type: ignore[arg-type]


def test_the_bel_finds_the_live_readers_of_an_older_instance_with_their_data_time(bel: BuildEventLog) -> None:
    built = layers(bel, 1)  # ext/1 -> up/1 -> mid/1 -> down/1; side/1 reads up/1
    assert bel.lineage.late_readers(["up/1", "ext/1"]) == []  # everything read the live instances
    bel.partitions.taint("up/1", reason="bad rows")
    newer = build(
        bel, "up/1", InstanceRef(ref="ext/1", instance_id="ext/1@1")
    )  # up/1 rebuilt (its want a day later)
    found = bel.lineage.late_readers(["up/1"])
    assert [(r.ref, r.job_label, r.input_read, r.input_live) for r in found] == [
        ("mid/1", "mid", built["up"].instance_id, newer.instance_id),
        ("side/1", "side", built["up"].instance_id, newer.instance_id),
    ]
    assert {r.data_time for r in found} == {AT}  # the data time of the wants that built the readers
    bel.partitions.publish_external("ext/1", instance_id="ext/1@2")
    assert [(r.ref, r.input_live) for r in bel.lineage.late_readers(["ext/1"])] == [("up/1", "ext/1@2")]
    # Asked of the readers themselves (what a rebuild that just ended read behind the news): the same.
    assert [(r.ref, r.input_ref) for r in bel.lineage.late_readers(["up/1", "down/1"], of=False)] == [
        ("up/1", "ext/1")
    ]
    bel.partitions.taint("mid/1", reason="rebuilt")
    build(bel, "mid/1", newer)  # a rebuilt reader reads the newer one: no longer late
    assert [r.ref for r in bel.lineage.late_readers(["up/1"])] == ["side/1"]
