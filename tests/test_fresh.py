"""Fresh wants in the BEL (``bel.decisions.decide`` with ``views.staleness.freshness``, as the worker's decide
activity calls them) and through the CLI, without Temporal: a fresh want rebuilds a stale partition after
its stale inputs, once; two build it once; an unchanged version rebuilds nothing; plans and
``backfill --stale-only`` see the same. (The rules alone: tests/test_domain_freshness.py; on the real
stack: tests/test_fresh_stack.py.)"""

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from databuild.backfill import BackfillProgress
from databuild.bel import BuildEventLog
from databuild.cli.render import want_label
from databuild.config import Settings
from databuild.domain.decisions import Delegate, Execute, Live, NeedsInputs, Verdict
from databuild.domain.plans import Action, Plan, Root
from databuild.graph import Graph
from databuild.models import InstanceRef, WantSource, WantSpec, WantState
from databuild.testing import projection_rows
from databuild.views.plans import plan_wants
from databuild.views.staleness import freshness
from databuild.web import create_app, web_context
from tests.conftest import forked_cli
from tests.test_staleness import GRAPHS, after, before, build, layers

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
AT = datetime(2024, 1, 1, tzinfo=UTC)
DAYS = ["2024-01-01", "2024-01-02"]


def fresh_want(bel: BuildEventLog, ref: str, source: WantSource = WantSource.cli) -> WantSpec:
    spec = WantSpec(ref=ref, data_timestamp=AT, source=source, fresh=True, fresh_of=f"{source.value}-ask")
    bel.wants.register(spec)
    return spec


def decide(bel: BuildEventLog, spec: WantSpec, seq: int, graph: Graph) -> Verdict:
    """A decision step as the worker's decide activity takes it: staleness judged with ``graph``."""
    return bel.decisions.decide(
        spec.want_id, seq, graph.resolve(spec.ref), fresh=freshness(bel, graph, bel.wants.get(spec.want_id))
    )


def rebuild(bel: BuildEventLog, verdict: Verdict, reads: list[InstanceRef], graph: Graph) -> InstanceRef:
    assert isinstance(verdict, Execute), verdict
    bel.job_runs.start(verdict.job_run_id, 1, "w")
    (ref,) = verdict.outputs
    written = InstanceRef(ref=ref, instance_id=f"{ref}@{len(bel.partitions.instances(ref)) + 1}")
    bel.job_runs.succeed(
        verdict.job_run_id, reads, [written], job_version=graph.job_by_label(ref[:-2]).version
    )
    return written


def test_a_fresh_want_rebuilds_its_stale_inputs_first_then_itself_once(bel: BuildEventLog) -> None:
    built = layers(bel, 1)
    down = fresh_want(bel, "down/1")
    # down/1 read mid/1, stale by its own version: mid/1 is wanted fresh first, through a derivative.
    assert decide(bel, down, 1, after) == NeedsInputs(missing=["mid/1"])
    status, derivatives, _ = bel.wants.await_dependencies(down.want_id, None, ["mid/1"])
    assert status.live == []  # live, but stale: waited for until its fresh derivative ends
    (start,) = derivatives
    mid = start.spec
    assert start.opening == 0 and mid.fresh and mid.source is WantSource.derivative and mid.ref == "mid/1"
    new_mid = rebuild(bel, decide(bel, mid, 1, after), [built["up"]], after)
    bel.wants.finish(mid.want_id, WantState.successful, instance_id=new_mid.instance_id)
    status, _, _ = bel.wants.await_dependencies(down.want_id, None, ["mid/1"])
    assert status.live == ["mid/1"]
    # Now down/1 read a superseded instance: it is built, once. Its run read the old mid/1 all the same
    # (as if mid/1 changed again meanwhile): its new instance is stale, and the want accepts it.
    run = decide(bel, down, 2, after)
    new_down = rebuild(bel, run, [built["mid"]], after)
    again = decide(bel, down, 3, after)
    assert isinstance(again, Live) and again.instance_id == new_down.instance_id
    recorded = bel.wants.get(down.want_id)
    assert recorded.state is WantState.successful and recorded.fresh
    assert recorded.reason is not None and "rebuilds once" in recorded.reason
    shown = want_label(recorded).plain  # as `wants show` heads its tree
    assert "fresh" in shown and "rebuilds once" in shown
    # side/1 and up/1 were not stale, and keep their instances.
    assert bel.partitions.get("up/1").instance_id == built["up"].instance_id
    assert bel.partitions.get("side/1").instance_id == built["side"].instance_id


def test_two_fresh_wants_build_a_stale_partition_once(bel: BuildEventLog) -> None:
    layers(bel, 1)
    first, second = fresh_want(bel, "mid/1"), fresh_want(bel, "mid/1", WantSource.api)
    assert first.want_id != second.want_id
    run = decide(bel, first, 1, after)
    assert isinstance(run, Execute)
    joined = decide(bel, second, 1, after)
    assert isinstance(joined, Delegate) and joined.job_run_id == run.job_run_id


def test_an_unchanged_version_rebuilds_nothing(bel: BuildEventLog) -> None:
    built = layers(bel, 1)
    down = fresh_want(bel, "down/1")
    last = bel.events.last_idx()
    verdict = decide(bel, down, 1, before)
    assert isinstance(verdict, Live) and verdict.instance_id == built["down"].instance_id
    types = [e.type for e in bel.events.query(since_idx=last, limit=100)]
    assert "JobRunQueued" not in types and bel.wants.get(down.want_id).reason is None


def test_a_fresh_want_for_a_missing_partition_is_a_usual_want(bel: BuildEventLog) -> None:
    layers(bel, 1)
    want = fresh_want(bel, "mid/2")
    assert freshness(bel, after, bel.wants.get(want.want_id)) is None
    assert isinstance(decide(bel, want, 1, after), (Execute, NeedsInputs))


def test_fresh_plans_and_stale_only_backfills_through_the_cli(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'bel.sqlite'}"
    bel = BuildEventLog.create(url)
    for day in DAYS:
        layers(bel, day)  # type: ignore[arg-type]
    recorded = (bel.events.last_idx(), projection_rows(bel))
    bel.dispose()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATABUILD_")}
    env |= {"PYTHONPATH": str(ROOT), "COLUMNS": "200", "DATABUILD_TEMPORAL_ADDRESS": "127.0.0.1:9"}
    env |= {"DATABUILD_DATABASE_URL": url}
    down = ["want", f"down/{DAYS[0]}", "--plan"]
    backfill = ["backfill", "mid/{n}", "--from", DAYS[0], "--to", DAYS[1], "--stale-only"]
    commands = [
        ("after", [*down, "--json"]),
        ("after", [*down, "--fresh", "--json"]),
        ("after", [*down, "--fresh"]),
        ("after", [*backfill, "--plan", "--json"]),
        ("after", [*backfill, "--plan"]),
        ("before", [*backfill, "--plan", "--json"]),
        ("before", backfill),
        ("before", [*backfill, "--json"]),
        ("after", [*down, "--fresh", "--help"]),
    ]
    ran = forked_cli([(c[1], {"DATABUILD_GRAPH": GRAPHS[c[0]]}) for c in commands], env, tmp_path)
    for done in ran:
        assert done.returncode == 0, (done.args, done.stdout, done.stderr)
    usual, fresh, shown, stale_plan, stale_shown, nothing_plan, nothing, nothing_json, helped = ran
    by_action = {p.ref: (p.action, bool(p.stale)) for p in Plan.model_validate_json(usual.stdout).partitions}
    assert by_action == {f"down/{DAYS[0]}": (Action.live, True)}  # live (stale): used as it is
    planned = Plan.model_validate_json(fresh.stdout)
    assert [(p.ref, p.action) for p in planned.partitions if p.action is Action.build] == [
        (f"mid/{DAYS[0]}", Action.build),
        (f"down/{DAYS[0]}", Action.build),
    ]
    assert [r.job_label for r in planned.runs] == ["mid", "down"]
    assert "build (stale: job version changed 1 -> 2)" in shown.stdout, shown.stdout
    assert f"build (stale: read mid/{DAYS[0]}" in shown.stdout
    stale_only = Plan.model_validate_json(stale_plan.stdout)
    assert stale_only.wanted == 2 and [r.job_label for r in stale_only.runs] == ["mid", "mid"]
    assert "(stale only)" in stale_shown.stdout
    # With nothing stale, a stale-only backfill plans nothing and registers nothing (no Temporal needed).
    assert Plan.model_validate_json(nothing_plan.stdout).wanted == 0
    assert "nothing stale among the 2 partitions of the range: nothing was registered" in nothing.stdout
    assert BackfillProgress.model_validate_json(nothing_json.stdout).partitions == 0
    assert "--fresh" in helped.stdout and "stale" in helped.stdout
    bel = BuildEventLog.create(url)
    app = create_app(web_context(Settings(home=tmp_path, graph=GRAPHS["after"]), bel))
    api = TestClient(app, base_url="http://127.0.0.1:8000", client=("127.0.0.1", 50000))
    body = {"ref": f"down/{DAYS[0]}", "fresh": True}
    answer = api.post("/api/wants/plan", json=body)
    assert answer.status_code == 200, answer.text
    assert Plan.model_validate(answer.json()).count(Action.build) == 2
    ranged = {"pattern": "mid/{n}", "start": DAYS[0], "end": DAYS[1], "stale_only": True}
    answer = api.post("/api/backfills/plan", json=ranged)
    assert answer.status_code == 200 and Plan.model_validate(answer.json()).wanted == 2, answer.text
    assert (
        bel.events.last_idx(),
        projection_rows(bel),
    ) == recorded  # plans and an empty backfill record nothing
    bel.dispose()


def declared(up_version: str) -> Graph:
    """up/{n} -> mid/{n} -> top/{n}, each declaring what it reads."""
    g = Graph("declared")
    g.job("up/{n}", label="up", version=up_version, inputs=lambda n: [])(lambda ctx, n: None)
    g.job("mid/{n}", label="mid", version="1", inputs=lambda n: [f"up/{n}"])(lambda ctx, n: None)
    g.job("top/{n}", label="top", version="1", inputs=lambda n: [f"mid/{n}"])(lambda ctx, n: None)
    return g


def test_a_fresh_plan_rebuilds_as_the_want_would_and_no_further(bel: BuildEventLog) -> None:
    old, new = declared("1"), declared("2")
    up = build(bel, "up/1", graph=old)
    build(bel, "mid/1", up, graph=old)
    build(bel, "up/2", graph=old)

    def actions(ref: str) -> dict[str, Action]:
        found = plan_wants(bel, new, [Root(ref=ref)], datetime.now(UTC), fresh=True)
        return {p.ref: p.action for p in found.partitions}

    # mid/1 is live and stale through up/1 (a new version of up): both are rebuilt.
    assert actions("mid/1") == {"up/1": Action.build, "mid/1": Action.build}
    # top/1 is missing: a fresh want for it is a usual want, its live inputs used as they are, stale or not.
    assert actions("top/1") == {"mid/1": Action.live, "top/1": Action.build}
    # mid/2 is missing too; its declared input up/2 is live and stale, and is read as it is.
    assert actions("mid/2") == {"up/2": Action.live, "mid/2": Action.build}
