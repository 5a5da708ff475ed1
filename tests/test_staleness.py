"""Stale partitions read from the BEL (views.staleness) and through the CLI, without Temporal: a changed
job version makes exactly its partitions and their readers stale, an unchanged one nothing; a newer or
tainted input does too. (The rule itself: tests/test_domain_staleness.py.)"""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from databuild.bel import BuildEventLog
from databuild.errors import InvalidPatternError
from databuild.graph import Graph
from databuild.models import InstanceRef, WantSource, WantSpec
from databuild.views.staleness import stale_partitions

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
AT = datetime(2024, 1, 1, tzinfo=UTC)


def layered(mid_version: str) -> Graph:
    """ext/{n} -> up/{n} -> mid/{n} -> down/{n}; side/{n} reads up/{n} too."""
    g = Graph("layered")
    g.external("ext/{n}")
    for label in ("up", "down", "side"):
        g.job(f"{label}/{{n}}", label=label, version="1")(lambda ctx, n: None)
    g.job("mid/{n}", label="mid", version=mid_version)(lambda ctx, n: None)
    return g


before = layered("1")
after = layered("2")  # the same graph but mid's code


@pytest.fixture
def bel(tmp_path: Path) -> Iterator[BuildEventLog]:
    log = BuildEventLog.create(f"sqlite:///{tmp_path / 'bel.sqlite'}")
    yield log
    log.dispose()


def build(bel: BuildEventLog, ref: str, *reads: InstanceRef, graph: Graph = before) -> InstanceRef:
    """A want for ``ref`` whose run reads ``reads`` and writes a new instance, recording the version of
    ``graph``'s job as a worker running it would."""
    built = len(bel.instances(ref))
    spec = WantSpec(ref=ref, data_timestamp=AT + timedelta(days=built), source=WantSource.cli)
    bel.register_want(spec)
    target = graph.resolve(ref).target
    assert target is not None
    verdict = bel.decide(spec.want_id, 1, graph.resolve(ref))
    assert verdict.kind == "execute", verdict
    bel.start_job_run(verdict.job_run_id, 1, "w")
    written = InstanceRef(ref=ref, instance_id=f"{ref}@{built + 1}")
    bel.succeed_job_run(verdict.job_run_id, list(reads), [written], job_version=target.job.version)
    return written


def layers(bel: BuildEventLog, n: int) -> dict[str, InstanceRef]:
    bel.publish_external(f"ext/{n}", instance_id=f"ext/{n}@1")
    ext = InstanceRef(ref=f"ext/{n}", instance_id=f"ext/{n}@1")
    up = build(bel, f"up/{n}", ext)
    mid = build(bel, f"mid/{n}", up)
    return {"up": up, "mid": mid, "down": build(bel, f"down/{n}", mid), "side": build(bel, f"side/{n}", up)}


def reasons(bel: BuildEventLog, graph: Graph, pattern: str | None = None) -> dict[str, list[str]]:
    return {p.ref: [str(r) for r in p.reasons] for p in stale_partitions(bel, graph, pattern)}


def test_a_changed_version_makes_exactly_its_partitions_and_their_readers_stale(bel: BuildEventLog) -> None:
    first = layers(bel, 1)
    layers(bel, 2)
    assert reasons(bel, before) == {}  # an unchanged version: nothing is stale
    assert reasons(bel, after) == {
        "down/1": ["read mid/1 mid/1@1, which is stale"],
        "down/2": ["read mid/2 mid/2@1, which is stale"],
        "mid/1": ["job version changed 1 -> 2"],
        "mid/2": ["job version changed 1 -> 2"],
    }
    # A pattern narrows what is listed, not what is read: down/1's input is loaded to judge it.
    assert list(reasons(bel, after, "down/*")) == ["down/1", "down/2"]
    assert list(reasons(bel, after, "**/1")) == ["down/1", "mid/1"]
    # Tainted and rebuilt by the new version, mid/1 is fresh; down/1 read the tainted instance.
    bel.taint("mid/1", reason="new code")
    build(bel, "mid/1", first["up"], graph=after)
    assert reasons(bel, after, "**/1") == {"down/1": ["read mid/1 mid/1@1, since tainted"]}


def test_a_newer_or_tainted_input_makes_its_readers_stale_transitively(bel: BuildEventLog) -> None:
    layers(bel, 1)
    layers(bel, 2)
    bel.publish_external("ext/1", instance_id="ext/1@2")  # the upstream rebuilt it
    bel.taint("up/2", reason="bad feed")
    found = reasons(bel, before)
    assert found == {
        "up/1": ["read ext/1 ext/1@1, since superseded by ext/1@2"],
        "mid/1": ["read up/1 up/1@1, which is stale"],
        "side/1": ["read up/1 up/1@1, which is stale"],
        "down/1": ["read mid/1 mid/1@1, which is stale"],
        "mid/2": ["read up/2 up/2@1, since tainted"],
        "side/2": ["read up/2 up/2@1, since tainted"],
        "down/2": ["read mid/2 mid/2@1, which is stale"],
    }


def test_a_malformed_pattern_is_refused(bel: BuildEventLog) -> None:
    with pytest.raises(InvalidPatternError):
        stale_partitions(bel, before, "up/[1]")


def test_an_upstream_deeper_than_the_levels_read_one_by_one_is_read_whole(bel: BuildEventLog) -> None:
    g = Graph("cumulative")
    g.external("ext/{n}")
    g.job("sum/{n}", label="sum", version="1")(lambda ctx, n: None)
    bel.publish_external("ext/0", instance_id="ext/0@1")
    previous = build(bel, "sum/0", InstanceRef(ref="ext/0", instance_id="ext/0@1"), graph=g)
    for n in range(1, 20):  # each day reads the day before: 20 levels deep
        previous = build(bel, f"sum/{n}", previous, graph=g)
    assert stale_partitions(bel, g, "sum/19") == []
    bel.publish_external("ext/0", instance_id="ext/0@2")
    (found,) = stale_partitions(bel, g, "sum/19")
    assert [str(r) for r in found.reasons] == ["read sum/18 sum/18@1, which is stale"]
    assert len(stale_partitions(bel, g)) == 20
