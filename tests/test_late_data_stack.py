"""Late data on the real stack (a job's ``rebuild_on_new_inputs``): a newer instance of an external feed
rebuilds, by itself, the partitions of the last two days that read the older one, and what was built from
those in turn, once each and with the reason on the want; an older day only shows stale, and hearing the
same news again starts nothing."""

import asyncio
import threading
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from databuild.client import DataBuild
from databuild.domain.staleness import StaleKind
from databuild.errors import TemporalUnavailableError
from databuild.models import Want, WantSource, WantState
from databuild.views.lineage import partition_view
from tests.conftest import Stack
from tests.graphs import MID_HELD
from tests.helpers import lake, until

GRAPH = "tests.graphs:lookback"


async def arrives(stack: Stack, day: str, version: int) -> None:
    """Version ``version`` of the feed of ``day`` arrives: its data, written by another tool, in a folder
    of its own, then its announcement as a new instance."""
    await arrives_through(stack.db, stack, day, version)


async def arrives_through(db: DataBuild, stack: Stack, day: str, version: int) -> None:
    folder = lake(stack.settings) / "incoming" / day / f"v{version}"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"id": pa.array(range(version), pa.int64())}), folder / "part-0.parquet")
    await db.publish(f"feed/{day}", instance_id=f"feed-{day}-v{version}", location=folder.as_uri())


def rebuilds(stack: Stack) -> list[Want]:
    return [w for w in stack.bel.wants.query(limit=1000) if w.source is WantSource.rebuild]


async def test_a_newer_input_rebuilds_its_readers_inside_the_window_once(make_stack) -> None:
    stack = await make_stack(graph=GRAPH)
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    recent, old = f"{today:%Y-%m-%d}", f"{today - timedelta(days=30):%Y-%m-%d}"
    for day in (recent, old):
        await arrives(stack, day, 1)
    for ref, at in (
        (f"top/{recent}", today),
        (f"total/{recent}", today),
        (f"top/{old}", today - timedelta(days=30)),
    ):
        want = await stack.db.want(ref, data_timestamp=at)
        done = await asyncio.wait_for(stack.db.wait(want), timeout=300)
        assert done.state is WantState.successful, done.reason
    before = {p.ref: p.instance_id for p in stack.bel.partitions.query(limit=100)}

    # Late data for today: mid, then top (from mid's run), rebuilt; and total, which builds on its own
    # previous instance, once: superseding what it read itself is no late data.
    await arrives(stack, recent, 2)
    await until(
        lambda: len(rebuilds(stack)) == 3 and all(w.state.is_final for w in rebuilds(stack)), seconds=240
    )
    mid_want, top_want, total_want = sorted(rebuilds(stack), key=lambda w: w.ref)
    assert (mid_want.ref, top_want.ref, total_want.ref) == (
        f"mid/{recent}",
        f"top/{recent}",
        f"total/{recent}",
    )
    assert mid_want.state is top_want.state is total_want.state is WantState.successful, (
        mid_want.reason,
        top_want.reason,
        total_want.reason,
    )
    total = stack.bel.partitions.get(f"total/{recent}")
    assert (
        stack.bel.partitions.instance(total.instance_id or "").facts.rows == 1 + 2
    )  # v1's row, then v2's two
    assert partition_view(stack.bel, f"total/{recent}").data.previous == [before[f"total/{recent}"]]
    assert stack.bel.lineage.late_readers([f"total/{recent}"]) == []  # what the fan-out of its run found
    assert mid_want.fresh and mid_want.data_timestamp == today
    assert (
        mid_want.cause is not None
        and f"feed/{recent} has a newer instance feed-{recent}-v2" in mid_want.cause
    )
    assert top_want.cause is not None and f"mid/{recent} has a newer instance" in top_want.cause
    after = {p.ref: p.instance_id for p in stack.bel.partitions.query(limit=100)}
    assert {ref for ref in after if after[ref] != before[ref]} == {
        f"feed/{recent}",
        f"mid/{recent}",
        f"top/{recent}",
        f"total/{recent}",
    }
    assert await stack.db.stale(f"*/{recent}") == []  # the rebuilds read the newer feed

    # The older day is outside the window: its readers stay as they were, and show stale.
    await arrives(stack, old, 2)
    stale = await stack.db.stale(f"*/{old}")
    assert [(p.ref, p.reasons[0].kind) for p in stale] == [
        (f"mid/{old}", StaleKind.input_superseded),
        (f"top/{old}", StaleKind.input_stale),
    ]
    # The same news again (a repeated announcement, a retried fan-out) is no news: publish starts the late
    # rebuilds of a new instance before it returns, and it made none.
    _, created, _ = await stack.db.publish(f"feed/{recent}", instance_id=f"feed-{recent}-v2")
    assert not created
    assert len(rebuilds(stack)) == 3
    assert {p.ref: p.instance_id for p in stack.bel.partitions.query(limit=100)}[f"mid/{recent}"] == after[
        f"mid/{recent}"
    ]

    # A burst of news while a rebuild runs: the rebuilds it starts delegate to the run, which read an
    # older instance. When that run ends behind the news, the newest instance gets its rebuild, so the
    # readers end on the last version and nothing in the window stays stale.
    read, release = MID_HELD[recent] = (threading.Event(), threading.Event())
    burst = range(3, 9)
    await arrives(stack, recent, burst[0])
    assert await asyncio.to_thread(read.wait, 120), "the rebuild of mid never read the feed"
    for version in burst[1:]:
        await arrives(stack, recent, version)
    release.set()

    async def caught_up() -> bool:
        settled = all(w.state.is_final for w in rebuilds(stack))
        return settled and not await stack.db.stale(f"*/{recent}")

    await until(caught_up, "the readers of the feed caught up with its last version", seconds=120)
    mid = stack.bel.partitions.get(f"mid/{recent}")
    assert stack.bel.partitions.instance(mid.instance_id or "").facts.rows == burst[-1]
    # Rebuilt at most once per new input (the first build, v2's rebuild, then one per announcement).
    assert len(stack.bel.partitions.instances(f"mid/{recent}")) <= 2 + len(burst)

    # An announcement whose Temporal call failed after its commit (Temporal down a moment): repeated, it
    # starts the late rebuilds the first could not.
    offline = stack.settings.model_copy(update={"temporal_address": "127.0.0.1:9"})
    cut_off = DataBuild(None, stack.bel, stack.graph, offline)
    with pytest.raises(TemporalUnavailableError):
        await arrives_through(cut_off, stack, recent, 9)
    assert len(stack.bel.lineage.late_readers([f"feed/{recent}"])) > 0  # committed: the readers are behind
    _, created, _ = await stack.db.publish(f"feed/{recent}", instance_id=f"feed-{recent}-v9")
    assert not created
    await until(caught_up, "the repeated announcement rebuilt the readers", seconds=120)
    assert (
        stack.bel.partitions.instance(stack.bel.partitions.get(f"mid/{recent}").instance_id or "").facts.rows
        == 9
    )
