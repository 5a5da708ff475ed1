"""Late data on Temporal: the fresh wants a newer input instance starts by itself, for the jobs that
declare ``rebuild_on_new_inputs`` (the rule: ``databuild.domain.late_data``). Heard when a run's outputs go
live (its fan-out) and when an external partition is announced again; hearing it twice starts nothing new."""

from collections.abc import Sequence
from datetime import UTC, datetime

from temporalio.client import Client

from databuild.bel.queries import BelQueries
from databuild.domain.late_data import late_rebuilds
from databuild.domain.wants import WantStart
from databuild.graph import Graph
from databuild.models import WantSource, WantSpec
from databuild.temporal.wants import start_wants


async def rebuild_late_readers(
    client: Client, bel: BelQueries, graph: Graph, task_queue: str, refs: Sequence[str]
) -> list[WantSpec]:
    """Start a fresh want for each reader of an older instance of ``refs`` that its job's window says to
    rebuild; returns their specs (none when no job declares a window: then nothing is read). ``refs``
    themselves are readers too: a rebuild that read an input which newer news superseded while it ran
    (its wants delegated to it, and accepted what it built) is rebuilt for the newest, so the last news
    wins."""
    windows = {job.label: job.rebuild_on_new_inputs for job in graph.jobs if job.rebuild_on_new_inputs}
    if not windows or not refs:
        return []
    readers = await bel.call(bel.lineage.late_readers, list(refs))
    readers += await bel.call(bel.lineage.late_readers, list(refs), of=False)
    specs = [
        WantSpec(
            ref=r.ref,
            data_timestamp=r.data_time,
            source=WantSource.rebuild,
            fresh=True,
            fresh_of=r.fresh_of,
            cause=r.cause,
        )
        for r in late_rebuilds(readers, windows, datetime.now(UTC))
    ]
    await start_wants(client, [WantStart(spec=spec) for spec in specs], task_queue, bel)
    return specs
