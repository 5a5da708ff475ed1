"""The three views after the demo, through the CLI, the HTTP API and the BEL; then a taint and a rebuild.

The demo runs once per session (``demo_run``). The taint changes what the demo built, so it runs on a stack
of its own over a copy of the demo's BEL and lake: every test here passes in any order, and so do the
other modules that read the session's demo.
"""

import asyncio
import json
import shutil
import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import make_url

from databuild.config import Settings
from databuild.models import InstanceStatus, JobRunState, PartitionStatus, WantState
from databuild.views.lineage import (
    JobRunView,
    ListView,
    PartitionView,
    RelatedEntities,
    WantView,
    instance_view,
    partition_view,
    want_view,
)
from databuild.web import create_app, web_context
from tests.conftest import DemoRun, Stack, cli, cli_batch
from tests.helpers import lake

pytestmark = pytest.mark.slow

DAYS = [f"2024-01-0{d}" for d in range(1, 8)]


def referenced(view: WantView) -> tuple[set[str], set[str], set[str]]:
    """Want ids, job run ids and instance ids the tree's data mentions."""
    wants, runs, instances = set(), set(), set()
    for n in view.data.nodes.values():
        wants.add(n.want_id)
        wants.update(e.want_id for e in n.derivatives)
        if n.instance_id:
            instances.add(n.instance_id)
        runs.update(link.job_run_id for group in n.job_runs for link in group.runs)
        runs.update(e.triggered_by for e in n.derivatives)
    return wants, runs, instances


@pytest.fixture
def api(demo_run: DemoRun) -> Iterator[TestClient]:
    stack = demo_run.stack
    loopback = ("127.0.0.1", 50000)  # no API tokens configured: loopback clients may write
    app = create_app(web_context(stack.settings, stack.bel))
    with TestClient(app, base_url="http://127.0.0.1:8000", client=loopback) as client:
        yield client


def test_fulfillment_tree_of_the_demo_want_is_exactly_what_was_built(demo_run: DemoRun) -> None:
    bel, want = demo_run.stack.bel, demo_run.want
    view = want_view(bel, want.want_id)
    nodes = view.data.nodes
    root = nodes[view.data.want_id]
    live = {p.ref: p.instance_id for p in bel.partitions.query(limit=1000)}

    # Root: the rollup dep-missed, then succeeded: one collapsed group of two runs.
    assert root.want_id == want.want_id and root.instance_id == live["daily_summary/2024-01-07"]
    [rollup] = root.job_runs
    assert rollup.job_label == "weekly_rollup" and len(rollup.runs) == 2
    miss, built = (view.index.job_runs[link.job_run_id] for link in rollup.runs)
    assert (miss.state, built.state) == (JobRunState.dep_miss, JobRunState.succeeded)
    assert {w.instance_id for w in built.writes} == {
        live["daily_summary/2024-01-07"],
        live["top_spenders/2024-01-07"],
    }

    # Seven daily_users wants triggered by the rollup's dep-miss, each with one raw_events want below.
    assert [view.index.wants[e.want_id].ref for e in root.derivatives] == [f"daily_users/{d}" for d in DAYS]
    for edge in root.derivatives:
        child = nodes[edge.want_id]
        ref = view.index.wants[child.want_id].ref
        assert edge.triggered_by == miss.job_run_id
        assert child.instance_id == live[ref]
        [group] = child.job_runs
        states = [view.index.job_runs[link.job_run_id].state for link in group.runs]
        assert states == [JobRunState.dep_miss, JobRunState.succeeded]
        [raw_edge] = child.derivatives
        raw = nodes[raw_edge.want_id]
        raw_ref = view.index.wants[raw.want_id].ref
        assert raw_ref == ref.replace("daily_users", "raw_events")
        assert raw_edge.triggered_by == group.runs[0].job_run_id and raw.instance_id == live[raw_ref]
        assert [view.index.job_runs[link.job_run_id].state for g in raw.job_runs for link in g.runs] == [
            JobRunState.succeeded
        ]
        assert raw.derivatives == []

    # Exactly the 15 wants, 23 job runs and 16 instances of the demo; the index holds each once.
    wants, runs, instances = referenced(view)
    assert len(wants) == 15 and len(runs) == 23 and len(instances) == 15
    assert set(view.index.wants) == wants == set(nodes)
    executed = {r.job_run_id for r in bel.job_runs.query(limit=1000) if r.state is not JobRunState.skipped}
    assert set(view.index.job_runs) == runs == executed  # (other tests' wants add skipped runs)
    assert set(view.index.instances) == set(live.values())  # every instance read or written, once


def test_lineage_of_daily_users_links_its_raw_input_and_the_summary_job(demo_run: DemoRun) -> None:
    bel = demo_run.stack.bel
    view = partition_view(bel, "daily_users/2024-01-03")
    data, index = view.data, view.index
    builder = index.job_runs[data.built_by or ""]
    assert builder.job_label == "daily_users" and builder.state is JobRunState.succeeded
    assert [index.instances[i].ref for i in data.upstream] == ["raw_events/2024-01-03"]
    assert data.upstream == [bel.partitions.get("raw_events/2024-01-03").instance_id]
    [edge] = data.downstream
    assert index.job_runs[edge.job_run_id].job_label == "weekly_rollup"
    assert {index.instances[i].ref for i in edge.instance_ids} == {
        "daily_summary/2024-01-07",
        "top_spenders/2024-01-07",
    }
    assert data.downstream_more == 0 and data.history == [data.instance_id]

    # Navigable by UUID: the upstream instance's own lineage leads back here.
    upstream = instance_view(bel, data.upstream[0])
    assert upstream.data.ref == "raw_events/2024-01-03"
    assert [upstream.index.instances[i].ref for e in upstream.data.downstream for i in e.instance_ids] == [
        "daily_users/2024-01-03"
    ]

    # High fan-out is truncated: daily_users/2024-01-03 has 2 downstream instances; show 1.
    truncated = partition_view(bel, "daily_users/2024-01-03", fan_out=1)
    assert sum(len(e.instance_ids) for e in truncated.data.downstream) == 1
    assert truncated.data.downstream_more == 1


async def test_cli_shows_the_three_views(demo_run: DemoRun) -> None:
    stack, want = demo_run.stack, demo_run.want
    instance = stack.bel.partitions.get("raw_events/2024-01-03").instance_id or ""
    run_id = stack.bel.partitions.get("daily_users/2024-01-03").built_by or ""
    # Each command in a process of its own, forked from one that imported the CLI once.
    tree, as_json, lineage, by_uuid, detail, listed, bad = await cli_batch(
        stack,
        ["wants", "show", want.want_id],
        ["wants", "show", want.want_id, "--json"],
        ["partitions", "show", "daily_users/2024-01-03"],
        ["partitions", "show", "--instance", instance, "--json"],
        ["job-runs", "show", run_id],
        ["partitions", "list", "--pattern", "daily_users/*", "--json"],
        ["partitions", "list", "--pattern", "daily_users/<x>"],
    )
    assert tree.returncode == 0, tree.stderr
    assert "weekly_rollup" in tree.stdout and "2 runs: dep_miss → succeeded" in tree.stdout
    assert tree.stdout.count("triggered by dep-miss") == 14
    assert WantView.model_validate(json.loads(as_json.stdout)) == want_view(stack.bel, want.want_id)

    assert "raw_events/2024-01-03" in lineage.stdout and "daily_summary/2024-01-07" in lineage.stdout
    assert PartitionView.model_validate(json.loads(by_uuid.stdout)).data.ref == "raw_events/2024-01-03"

    assert "status history" in detail.stdout and "raw_events/2024-01-03" in detail.stdout

    assert sorted(p["ref"] for p in json.loads(listed.stdout)["data"]) == [f"daily_users/{d}" for d in DAYS]
    assert bad.returncode == 2 and "characters refs cannot contain" in bad.stderr


def test_api_responses_match_their_models_and_index_each_entity_once(
    demo_run: DemoRun, api: TestClient
) -> None:
    bel, want = demo_run.stack.bel, demo_run.want

    got = api.get(f"/api/wants/{want.want_id}")
    assert got.status_code == 200
    view = WantView.model_validate(got.json())
    wants, runs, _ = referenced(view)
    assert set(view.index.wants) == wants and set(view.index.job_runs) == runs
    raw = got.json()["index"]
    assert set(raw) == set(RelatedEntities.model_fields)

    lineage = PartitionView.model_validate(api.get("/api/partitions/daily_users/2024-01-03").json())
    assert lineage.data.built_by in lineage.index.job_runs
    assert all(i in lineage.index.instances for i in lineage.data.upstream)
    by_uuid = PartitionView.model_validate(api.get(f"/api/instances/{lineage.data.upstream[0]}").json())
    assert by_uuid.data.ref == "raw_events/2024-01-03"

    dep_missed = ListView[dict].model_validate(api.get("/api/job-runs", params={"state": "dep_miss"}).json())  # type: ignore[type-arg]
    assert len(dep_missed.data) == 8
    rollup_miss = next(r for r in dep_missed.data if r["job_label"] == "weekly_rollup")
    detail = JobRunView.model_validate(api.get(f"/api/job-runs/{rollup_miss['job_run_id']}").json())
    history = [c.state for c in detail.data.status_history]
    assert history == [JobRunState.queued, JobRunState.running, JobRunState.dep_miss]
    assert sorted(d.ref for d in detail.data.derivatives) == [f"daily_users/{d}" for d in DAYS]
    assert all(d.derivative_want_id in detail.index.wants for d in detail.data.derivatives)
    assert detail.data.wanted_by[0].want_id == want.want_id

    # Lists: filters, paging with a next offset, and the index.
    page = api.get("/api/partitions", params={"pattern": "**", "limit": 10}).json()
    assert len(page["data"]) == 10 and page["page"]["next_offset"] == 10
    rest = api.get("/api/partitions", params={"pattern": "**", "limit": 10, "offset": 10}).json()
    assert len(rest["data"]) == 6 and rest["page"]["next_offset"] is None
    assert {p["ref"] for p in page["data"]} | {p["ref"] for p in rest["data"]} == {
        p.ref for p in bel.partitions.query(limit=100)
    }
    listed = api.get("/api/wants", params={"state": "successful", "prefix": "raw_events/"}).json()
    raw_refs = {f"raw_events/{d}" for d in DAYS}  # (other tests may add wants for these refs)
    assert {w["ref"] for w in listed["data"]} == set(listed["index"]["partitions"]) == raw_refs

    # Errors name the problem.
    assert api.get("/api/wants/w-nope").status_code == 404
    bad = api.get("/api/partitions", params={"pattern": "a/%'; drop table events; --"})
    assert bad.status_code == 400 and "characters refs cannot contain" in bad.json()["error"]
    assert api.get("/api/job-runs", params={"state": "exploded"}).status_code == 400
    assert api.get("/api/stats").json()["jobs"]


def test_api_registers_wants_and_previews_taints(demo_run: DemoRun, api: TestClient) -> None:
    bel = demo_run.stack.bel
    before = bel.events.last_idx()
    for body, message in [
        ({"ref": "raw_events/../x"}, "'..' segment"),
        ({"ref": "nope/1"}, "no job in graph"),
        ({"ref": "raw_events/2024-01-06", "sla": "-1h"}, "negative"),
        ({"ref": "raw_events/2024-01-06", "extra": 1}, "extra"),
    ]:
        bad = api.post("/api/wants", json=body)
        assert bad.status_code in (400, 422) and message in bad.text, (body, bad.text)
    assert bel.events.last_idx() == before  # rejected requests record nothing

    made = api.post("/api/wants", json={"ref": "raw_events/2024-01-06", "sla": "9h"})
    assert made.status_code == 201, made.text
    view = WantView.model_validate(made.json())
    want = view.index.wants[view.data.want_id]
    assert want.ref == "raw_events/2024-01-06" and want.source.value == "api"
    again = WantView.model_validate(api.post("/api/wants", json={"ref": "raw_events/2024-01-06"}).json())
    assert again.data.want_id == want.want_id  # idempotent

    preview = api.post("/api/partitions/raw_events/2024-01-06/taint", json={"dry_run": True})
    assert preview.status_code == 200 and preview.json()["tainted"] == []
    assert {d["ref"] for d in preview.json()["impact"]["downstream"]} >= {"daily_users/2024-01-06"}
    assert bel.partitions.get("raw_events/2024-01-06").status is PartitionStatus.live
    missing = api.post("/api/partitions/never/built/taint", json={"dry_run": True})
    assert missing.status_code == 404
    moved = api.post("/api/partitions/raw_events/2024-01-06/taint", json={"instance_id": "not-the-live-one"})
    assert moved.status_code == 409 and "look at the impact again" in moved.json()["error"]
    assert bel.partitions.get("raw_events/2024-01-06").status is PartitionStatus.live


def copy_of_the_demo(demo: Settings, home: Path) -> dict[str, str]:
    """Copies the demo's BEL and lake under ``home``; returns the settings of a stack over the copy: the
    demo's state as built, which nothing done there changes for the tests on the demo itself."""
    home.mkdir()
    bel_file = home / "bel.sqlite"
    source = sqlite3.connect(make_url(demo.database_url.get_secret_value()).database or "")
    copy = sqlite3.connect(bel_file)
    try:
        source.backup(copy)  # a consistent snapshot while the demo's worker runs on
    finally:
        copy.close()
        source.close()
    shutil.copytree(lake(demo), home / "data")
    return {"database_url": f"sqlite:///{bel_file}", "storage_root": str(home / "data")}


async def test_taint_then_want_again_rebuilds_and_keeps_both_lineages(
    demo_run: DemoRun, make_stack: Callable[..., Awaitable[Stack]], tmp_path: Path
) -> None:
    # A stack of its own (worker, task queue) over a copy of what the demo built.
    copy = await asyncio.to_thread(copy_of_the_demo, demo_run.stack.settings, tmp_path / "demo-copy")
    stack = await make_stack(**copy)
    bel, ref = stack.bel, "daily_users/2024-01-03"
    old = bel.partitions.get(ref)
    old_view = partition_view(bel, ref)
    summary = bel.partitions.get("daily_summary/2024-01-07").instance_id

    before = await stack.db.wait(await stack.db.want(ref))  # live: fulfilled at once, nothing built
    assert before.state is WantState.successful and before.instance_id == old.instance_id

    preview = await cli(stack, "taint", ref, "--dry-run", "--json")
    impact = json.loads(preview.stdout)["impact"]
    assert {d["ref"] for d in impact["downstream"]} == {"daily_summary/2024-01-07", "top_spenders/2024-01-07"}
    assert bel.partitions.get(ref).status is PartitionStatus.live  # a dry run records nothing
    refused = await cli(stack, "taint", ref, "--reason", "late")  # not a terminal, no --yes: the README's
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert "daily_summary/2024-01-07" in refused.stdout  # the impact is shown all the same
    assert bel.partitions.get(ref).status is PartitionStatus.live
    done = await cli(stack, "taint", ref, "--yes", "--reason", "late-arriving events", "--json")
    assert done.returncode == 0, done.stderr
    assert bel.partitions.get(ref).status is PartitionStatus.tainted
    assert bel.partitions.instance(summary or "").stale_cause == old.instance_id  # downstream shows as stale

    spec = await stack.db.want(ref)  # the same request again is a new want after a taint
    assert spec.generation == 1 and spec.want_id != before.want_id
    rebuilt = await stack.db.wait(spec)
    assert rebuilt.state is WantState.successful, rebuilt.reason
    new = bel.partitions.get(ref)
    assert new.status is PartitionStatus.live and new.instance_id != old.instance_id
    assert bel.partitions.instance(old.instance_id or "").status is InstanceStatus.tainted
    assert rebuilt.instance_id == new.instance_id

    # Each instance keeps its own lineage: the old one still feeds the summary, the new one nothing yet.
    old_again = instance_view(bel, old.instance_id or "")
    assert old_again.data.built_by == old_view.data.built_by
    assert old_again.data.downstream == old_view.data.downstream
    fresh = partition_view(bel, ref)
    assert fresh.data.instance_id == new.instance_id and fresh.data.built_by != old_view.data.built_by
    assert fresh.data.upstream == old_view.data.upstream  # the same raw input instance
    assert fresh.data.downstream == [] and fresh.data.history == [new.instance_id, old.instance_id]
    assert bel.partitions.get("daily_summary/2024-01-07").instance_id == summary  # stale, not rebuilt
    shown = await cli(stack, "partitions", "show", "daily_summary/2024-01-07")
    assert "stale" in shown.stdout
