"""The chaos run's graph: the demo, and an incremental job fed by late data.

``corrections/{date}`` is an external feed the run announces again and again (a new instance each time,
as late corrections arrive). ``user_totals/{date}`` merges each day's corrections into what its previous
instance held, by user (an upsert, as a slowly changing table is kept), and declares a late-data window
wide enough for the demo's 2024 days: every new correction rebuilds it by itself, once, and its read of
its own previous instance must never rebuild it again."""

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from databuild.graph import JobContext
from examples.demo import demo_graph

if TYPE_CHECKING:
    from pathlib import Path

CORRECTED_USERS = 10  # users in every correction: user_totals keeps one row for each
LATE_WINDOW = "3650d"

graph = demo_graph("chaos", declare_inputs=True)
graph.external("corrections/{date}")


@graph.job(
    "user_totals/{date}", inputs=lambda date: [f"corrections/{date}"], rebuild_on_new_inputs=LATE_WINDOW
)
def user_totals(ctx: JobContext, date: str) -> None:
    corrected = ctx.read(f"corrections/{date}")
    previous = ctx.read_previous(f"user_totals/{date}")
    kept = (
        corrected
        if previous is None
        else corrected.unionByName(previous.join(corrected, "user_id", "left_anti"))
    )
    ctx.write(f"user_totals/{date}", kept)


def write_correction(folder: "Path", version: int) -> None:
    """Version ``version`` of a day's corrections, as another tool writes it: each user's new count."""
    folder.mkdir(parents=True, exist_ok=True)
    users = pa.array(range(CORRECTED_USERS), pa.int64())
    counts = pa.array([version] * CORRECTED_USERS, pa.int64())
    pq.write_table(pa.table({"user_id": users, "events": counts}), folder / "part-0.parquet")
