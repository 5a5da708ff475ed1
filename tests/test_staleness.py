"""Stale partitions read from the BEL (views.staleness) and through the CLI, without Temporal: a changed
job version makes exactly its partitions and their readers stale, an unchanged one nothing; a newer or
tainted input does too. (The rule itself: tests/test_domain_staleness.py.)"""

import json
import os
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from databuild.bel import BuildEventLog
from databuild.config import Settings
from databuild.domain.staleness import StalePartition
from databuild.errors import InvalidPatternError
from databuild.graph import Graph
from databuild.models import InstanceRef, Partition, PartitionStatus, WantSource, WantSpec
from databuild.operations.stale_metrics import StaleCollector
from databuild.views.lineage import JobRunView, ListView, WantView
from databuild.views.staleness import stale_partitions
from databuild.views.why import Why, why
from databuild.web import create_app, web_context
from tests.conftest import forked_cli
from tests.graphs import layered_v1, layered_v2

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
AT = datetime(2024, 1, 1, tzinfo=UTC)


# ext/{n} -> up/{n} -> mid/{n} -> down/{n}, side/{n} reads up/{n} too; then the same graph but mid's code.
# In tests/graphs.py: the CLI's commands load them without importing this module's heavier imports.
before, after = layered_v1, layered_v2
GRAPHS = {
    "before": "tests.graphs:layered_v1",
    "after": "tests.graphs:layered_v2",
    "nowhere": "tests.graphs:nowhere",
}


def build(bel: BuildEventLog, ref: str, *reads: InstanceRef, graph: Graph = before) -> InstanceRef:
    """A want for ``ref`` whose run reads ``reads`` and writes a new instance, recording the version of
    ``graph``'s job as a worker running it would."""
    built = len(bel.partitions.instances(ref))
    spec = WantSpec(ref=ref, data_timestamp=AT + timedelta(days=built), source=WantSource.cli)
    bel.wants.register(spec)
    target = graph.resolve(ref).target
    assert target is not None
    verdict = bel.decisions.decide(spec.want_id, 1, graph.resolve(ref))
    assert verdict.kind == "execute", verdict
    bel.job_runs.start(verdict.job_run_id, 1, "w")
    written = InstanceRef(ref=ref, instance_id=f"{ref}@{built + 1}")
    bel.job_runs.succeed(verdict.job_run_id, list(reads), [written], job_version=target.job.version)
    return written


def layers(bel: BuildEventLog, n: int) -> dict[str, InstanceRef]:
    bel.partitions.publish_external(f"ext/{n}", instance_id=f"ext/{n}@1")
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
    bel.partitions.taint("mid/1", reason="new code")
    build(bel, "mid/1", first["up"], graph=after)
    assert reasons(bel, after, "**/1") == {"down/1": ["read mid/1 mid/1@1, since tainted"]}


def test_only_instances_that_can_be_stale_are_read_to_count_the_stale(bel: BuildEventLog) -> None:
    """What read nothing and was built by its job's current version cannot be stale (most of a big
    estate): counting the stale leaves it out, and finds the same as reading everything."""
    first = layers(bel, 1)
    alone = build(bel, "mid/9")  # read nothing, built by the version `after` changes
    now = {job.label: job.version for job in after.jobs}
    candidates = set(bel.lineage.live_built(stale_under=now))
    every = set(bel.lineage.live_built())
    assert "ext/1@1" in every and "ext/1@1" not in candidates  # external: read nothing
    assert {first[k].instance_id for k in ("up", "mid", "down", "side")} <= candidates  # each read something
    assert alone.instance_id in candidates
    assert set(reasons(bel, after)) == {"mid/1", "down/1", "mid/9"}
    unchanged = set(bel.lineage.live_built(stale_under={job.label: job.version for job in before.jobs}))
    assert unchanged == candidates - {alone.instance_id}


def test_a_newer_or_tainted_input_makes_its_readers_stale_transitively(bel: BuildEventLog) -> None:
    layers(bel, 1)
    layers(bel, 2)
    bel.partitions.publish_external("ext/1", instance_id="ext/1@2")  # the upstream rebuilt it
    bel.partitions.taint("up/2", reason="bad feed")
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
    bel.partitions.publish_external("ext/0", instance_id="ext/0@1")
    previous = build(bel, "sum/0", InstanceRef(ref="ext/0", instance_id="ext/0@1"), graph=g)
    for n in range(1, 20):  # each day reads the day before: 20 levels deep
        previous = build(bel, f"sum/{n}", previous, graph=g)
    assert stale_partitions(bel, g, "sum/19") == []
    bel.partitions.publish_external("ext/0", instance_id="ext/0@2")
    (found,) = stale_partitions(bel, g, "sum/19")
    assert [str(r) for r in found.reasons] == ["read sum/18 sum/18@1, which is stale"]
    assert len(stale_partitions(bel, g)) == 20


def test_why_explains_each_state_as_a_chain_of_recorded_facts(bel: BuildEventLog) -> None:
    layers(bel, 1)
    layers(bel, 2)
    fresh = why(bel, before, "down/1")
    assert (fresh.status, fresh.stale, len(fresh.chain)) == (PartitionStatus.live, False, 1)
    run = bel.partitions.instance("down/1@1").job_run_id
    assert (
        fresh.chain[0].text
        == f"live: instance down/1@1, built by job run {run} (job down, version 1) from mid/1 mid/1@1"
    )

    # A new version of mid: down/1 is stale through mid/1, whose version changed.
    changed = why(bel, after, "down/1")
    assert changed.stale and [f.text for f in changed.chain[1:]] == [
        "stale: read mid/1 instance mid/1@1, which is stale:",
        "stale: job mid's version changed from 1 (which built it) to 2",
    ]
    # The upstream republished ext/1: the chain ends at the newer instance and who announced it.
    bel.partitions.publish_external("ext/1", instance_id="ext/1@2")
    chain = [(f.ref, f.text) for f in why(bel, before, "down/1").chain[1:]]
    assert chain == [
        ("down/1", "stale: read mid/1 instance mid/1@1, which is stale:"),
        ("mid/1", "stale: read up/1 instance up/1@1, which is stale:"),
        (
            "up/1",
            "stale: read ext/1 instance ext/1@1, which was superseded by instance ext/1@2 (announced externally)",
        ),
    ]
    # A taint names its reason, in the reader's chain and in the tainted partition's own.
    bel.partitions.taint("up/2", reason="bad feed")
    assert [f.text for f in why(bel, before, "mid/2").chain[1:]] == [
        "stale: read up/2 instance up/2@1, which was tainted: bad feed"
    ]
    assert [f.text for f in why(bel, before, "up/2").chain] == ["tainted: bad feed"]
    assert why(bel, before, "up/9").status is PartitionStatus.missing


def test_stale_and_why_through_the_cli_without_temporal_and_the_api(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'bel.sqlite'}"
    bel = BuildEventLog.create(url)
    layers(bel, 1)
    down_run = bel.partitions.get("down/1").built_by
    assert down_run is not None
    bel.dispose()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATABUILD_")}
    env |= {"PYTHONPATH": str(ROOT), "COLUMNS": "200", "DATABUILD_TEMPORAL_ADDRESS": "127.0.0.1:9"}
    env |= {"DATABUILD_DATABASE_URL": url}

    # Each command in a process of its own, forked from one that imported the CLI once.
    commands = [
        ("before", "stale"),
        ("after", "stale", "--json"),
        ("after", "stale", "mid/*"),
        ("after", "partitions", "show", "mid/1"),
        ("nowhere", "partitions", "show", "mid/1"),
        ("after", "why", "down/1"),
        ("after", "why", "down/1", "--json"),
        ("after", "partitions", "list"),
        ("after", "partitions", "list", "--json"),
        ("after", "job-runs", "show", down_run),
        ("before", "job-runs", "show", down_run),
    ]
    ran = forked_cli([(list(c[1:]), {"DATABUILD_GRAPH": GRAPHS[c[0]]}) for c in commands], env, tmp_path)
    unchanged, listed, table, shown, unloaded, explained, as_json, parts, parts_json, run, run_before = ran
    assert unchanged.returncode == 0 and "nothing is stale" in unchanged.stdout, unchanged.stderr
    assert listed.returncode == 0, listed.stderr
    found = [StalePartition.model_validate(p) for p in json.loads(listed.stdout)]
    assert [(p.ref, [r.kind.value for r in p.reasons]) for p in found] == [
        ("down/1", ["input_stale"]),
        ("mid/1", ["code_changed"]),
    ]
    assert (
        table.returncode == 0
        and "job version changed 1 -> 2" in table.stdout
        and "down/1" not in table.stdout
    )
    assert shown.returncode == 0 and "stale: job version changed 1 -> 2" in shown.stdout, shown.stderr
    assert "job version 1" in shown.stdout
    # The lineage is the BEL's alone: a graph that does not load leaves out only whether it is stale.
    assert unloaded.returncode == 0 and "job version 1" in unloaded.stdout, unloaded.stderr
    assert "whether it is stale is not shown" in unloaded.stderr and "nowhere" in unloaded.stderr
    assert explained.returncode == 0, explained.stderr
    assert "down/1 live (stale)" in explained.stdout and "version changed from 1" in explained.stdout
    assert Why.model_validate_json(as_json.stdout).chain[-1].ref == "mid/1"
    # Lists say which live partitions are stale, and why (the first reason).
    rows = {
        cells[1].strip(): cells[2] for line in parts.stdout.splitlines() if len(cells := line.split("│")) > 2
    }
    assert parts.returncode == 0 and "stale: job version changed 1 -> 2" in rows["mid/1"], parts.stdout
    assert "stale: read mid/1" in rows["down/1"] and "stale" not in rows["up/1"], parts.stdout
    listed_cli = ListView[Partition].model_validate_json(parts_json.stdout)
    assert listed_cli.index.stale.keys() == {"mid/1@1", "down/1@1"}
    # A job run's view marks what it wrote and read that is stale (by the graph the command loads).
    wrote = [line for line in run.stdout.splitlines() if "down/1" in line and "uuid:" in line]
    assert run.returncode == 0 and wrote and all(", stale" in line for line in wrote), run.stdout
    assert run_before.returncode == 0 and ", stale" not in run_before.stdout, run_before.stdout

    bel = BuildEventLog.create(url)
    app = create_app(web_context(Settings(home=tmp_path, graph=GRAPHS["after"]), bel))
    client = TestClient(app, base_url="http://127.0.0.1:8000", client=("127.0.0.1", 50000))
    api = client.get("/api/stale", params={"pattern": "down/*"})
    assert api.status_code == 200 and [p["ref"] for p in api.json()] == ["down/1"], api.text
    explained_api = client.get("/api/why/mid/1")
    assert explained_api.status_code == 200 and Why.model_validate(explained_api.json()).stale
    view = client.get("/api/partitions/down/1").json()
    assert [r["kind"] for r in view["stale"]] == ["input_stale"]
    assert view["index"]["instances"]["down/1@1"]["job_version"] == "1"
    assert client.get("/api/partitions/up/1").json()["stale"] == []
    # Every view with an index says which of its live instances are stale: lists, want trees, job runs.
    listed_api = ListView[Partition].model_validate(client.get("/api/partitions").json()).index.stale
    assert [r.kind.value for r in listed_api["down/1@1"]] == ["input_stale"] and "up/1@1" not in listed_api
    assert client.get("/partitions").text.count('class="state state-stale"') == 2
    down = bel.partitions.get("down/1")
    assert down.built_by is not None
    run = JobRunView.model_validate(client.get(f"/api/job-runs/{down.built_by}").json())
    assert run.index.stale.keys() == {"down/1@1", "mid/1@1"}  # what it wrote, and what it read
    assert client.get(f"/job-runs/{down.built_by}").text.count('class="state state-stale"') >= 2
    (want,) = bel.wants.query(ref_glob="down/1")
    tree = WantView.model_validate(client.get(f"/api/wants/{want.want_id}").json())
    assert "down/1@1" in tree.index.stale and "stale" in client.get(f"/wants/{want.want_id}").text
    page = client.get("/partitions/down/1")
    assert page.status_code == 200 and "read mid/1 mid/1@1, which is stale" in page.text, page.text[-2000:]
    assert 'id="job-version"' in page.text and 'id="stale-reasons"' not in client.get("/partitions/up/1").text
    metrics = client.get("/metrics").text
    assert 'databuild_stale_partitions{job_label="mid"} 1.0' in metrics
    assert 'databuild_stale_partitions{job_label="down"} 1.0' in metrics
    assert 'job_label="up"' not in metrics.split("databuild_stale_partitions", 1)[1]
    bel.dispose()


def test_stale_metrics_are_computed_at_most_once_per_period_and_never_a_wrong_zero() -> None:
    calls: list[int] = []

    def count() -> dict[str, int]:
        calls.append(1)
        if len(calls) == 3:
            raise InvalidPatternError("the BEL could not be read")
        return {"mid": 2}

    def figures(collector: StaleCollector) -> list[tuple[dict[str, str], float]]:
        (family,) = collector.collect()
        return [(sample.labels, sample.value) for sample in family.samples]

    cached = StaleCollector(count, every=3600, patience=30)
    assert figures(cached) == figures(cached) == [({"job_label": "mid"}, 2)] and len(calls) == 1
    eager = StaleCollector(count, every=0, patience=30)
    assert figures(eager) == [({"job_label": "mid"}, 2)]
    time.sleep(0.1)  # past ten times the last count's duration: the next scrape counts again
    assert figures(eager) == [] and len(calls) == 3  # not counted: nothing, rather than a zero


def test_a_slow_stale_count_never_holds_up_a_scrape() -> None:
    """Counting a big estate's stale partitions takes a while: scrapes go on with the last figures (none
    at first) while it runs on its own thread, and only one count runs however many scrapes come."""
    release = threading.Event()
    calls: list[int] = []

    def count() -> dict[str, int]:
        calls.append(1)
        release.wait(30)
        return {"mid": len(calls)}

    def figures(collector: StaleCollector) -> list[tuple[dict[str, str], float]]:
        (family,) = collector.collect()
        return [(sample.labels, sample.value) for sample in family.samples]

    collector = StaleCollector(count, every=0, patience=0.05)
    started = time.monotonic()
    assert figures(collector) == [] and figures(collector) == []
    assert time.monotonic() - started < 5 and len(calls) == 1
    release.set()
    deadline = time.monotonic() + 10
    while not (found := figures(collector)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [labels for labels, _ in found] == [{"job_label": "mid"}]
