"""What the unit tests of the BEL's aggregates share: a small graph and its wants (the `bel` fixture, a log on a
SQLite file, is tests/conftest.py's)."""

from datetime import UTC, datetime

from databuild.bel import BuildEventLog
from databuild.domain.decisions import Verdict
from databuild.graph import Graph
from databuild.models import InstanceRef, WantSource, WantSpec

graph = Graph("aggregates")
graph.external("ext/{n}")
graph.job("a/{n}", "b/{n}")(lambda ctx, n: None)
for layer in ("up", "mid", "down"):  # the BEL only sees the reads it is told
    graph.job(f"{layer}/{{n}}", label=layer)(lambda ctx, n: None)

AT = datetime(2024, 1, 1, tzinfo=UTC)


def spec(ref: str, source: WantSource = WantSource.cli) -> WantSpec:
    return WantSpec(ref=ref, data_timestamp=AT, source=source)


def decide(bel: BuildEventLog, want: WantSpec, seq: int = 1) -> Verdict:
    bel.wants.register(want)
    return bel.decisions.decide(want.want_id, seq, graph.resolve(want.ref))


def build(bel: BuildEventLog, ref: str, reads: list[InstanceRef] | None = None) -> InstanceRef:
    """A want for ``ref`` whose run writes instance ``<ref>@<n>`` (n: the run's count of builds)."""
    verdict = decide(bel, spec(ref))
    assert verdict.kind == "execute"
    bel.job_runs.start(verdict.job_run_id, 1, "w")
    written = InstanceRef(ref=ref, instance_id=f"{ref}@{len(bel.partitions.instances(ref)) + 1}")
    bel.job_runs.succeed(verdict.job_run_id, reads or [], [written])
    return written
