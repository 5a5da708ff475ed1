"""A plan read from the BEL (``views.plans``), and through the CLI: what it finds, and that it records
nothing. (The rule itself: tests/test_domain_plans.py; a plan against the build that follows it:
tests/test_plans_stack.py.)"""

import json
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from databuild.bel import BuildEventLog
from databuild.domain.plans import Action, Plan, Root
from databuild.graph import Graph
from databuild.models import InstanceRef, PartitionStatus, WantSource, WantSpec
from databuild.testing import projection_rows
from databuild.views.plans import plan_wants
from tests.conftest import forked_cli

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
AT = datetime(2024, 1, 1, tzinfo=UTC)

graph = Graph("planned")
graph.job("up/{n}", label="up", inputs=lambda n: [])(lambda ctx, n: None)
graph.job("mid/{n}", label="mid", inputs=lambda n: [f"up/{n}"])(lambda ctx, n: None)
graph.job("down/{n}", "down_top/{n}", label="down", inputs=lambda n: [f"mid/{n}", "ext/feed"])(
    lambda ctx, n: None
)
graph.external("ext/{name}")


def start(bel: BuildEventLog, ref: str) -> str:
    """A want for ``ref`` whose run has started; its job run id."""
    spec = WantSpec(ref=ref, data_timestamp=AT, source=WantSource.cli)
    bel.wants.register(spec)
    verdict = bel.decisions.decide(spec.want_id, 1, graph.resolve(ref))
    assert verdict.kind == "execute"
    bel.job_runs.start(verdict.job_run_id, 1, "w")
    return verdict.job_run_id


def everything(bel: BuildEventLog) -> tuple[int, dict[str, list[tuple[str, ...]]]]:
    """The log's last index and every row of every projection."""
    return bel.events.last_idx(), projection_rows(bel)


def test_a_plan_reads_the_partitions_it_reaches_and_records_nothing(bel: BuildEventLog) -> None:
    now = datetime.now(UTC)
    fresh = plan_wants(bel, graph, [Root(ref="down/1", deadline=now - timedelta(hours=1))], now)
    assert [(p.ref, p.action) for p in fresh.partitions] == [
        ("ext/feed", Action.awaited),  # a job's declared inputs come sorted
        ("up/1", Action.build),
        ("mid/1", Action.build),
        ("down/1", Action.build),
    ]
    assert [(r.job_label, r.outputs) for r in fresh.runs] == [
        ("up", ["up/1"]),
        ("mid", ["mid/1"]),
        ("down", ["down/1", "down_top/1"]),
    ]
    assert fresh.untimed == ["down", "mid", "up"] and fresh.blocked == ["ext/feed"]
    assert [m.ref for m in fresh.sla_misses] == ["down/1"]  # its deadline has passed

    # up built (and so timed), mid building, the feed announced.
    bel.job_runs.succeed(start(bel, "up/1"), [], [InstanceRef(ref="up/1", instance_id="up-1")])
    building = start(bel, "mid/1")
    bel.partitions.publish_external("ext/feed")
    before = everything(bel)
    found = plan_wants(bel, graph, [Root(ref="down/1")], datetime.now(UTC))
    assert [(p.ref, p.status, p.action) for p in found.partitions] == [
        ("ext/feed", PartitionStatus.live, Action.available),
        ("mid/1", PartitionStatus.building, Action.building),
        ("down/1", PartitionStatus.missing, Action.build),
    ]
    assert [r.job_label for r in found.runs] == ["down"] and not found.blocked
    assert bel.job_runs.get(building).started_at is not None
    assert everything(bel) == before  # not an event, not a row


def test_the_cli_plans_without_temporal_and_records_nothing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATABUILD_")}
    env |= {"PYTHONPATH": str(ROOT), "COLUMNS": "200", "DATABUILD_TEMPORAL_ADDRESS": "127.0.0.1:9"}

    range_ = ["--from", "2024-01-01", "--to", "2024-01-31"]
    want, shown, bad, stale = forked_cli(
        [
            ["want", "daily_summary/2024-01-07", "--sla", "9h", "--plan", "--json"],
            ["backfill", "daily_users/{date}", *range_, "--plan"],
            ["want", "nowhere/x", "--plan"],
            ["backfill", "daily_users/{date}", *range_, "--plan", "--stale-only"],
        ],
        env,
        tmp_path,
    )
    # On a fresh home, not even the BEL's file is made: a plan reads the empty log it would be.
    assert not (tmp_path / ".databuild").exists() or not list((tmp_path / ".databuild").rglob("bel.sqlite*"))
    assert stale.returncode == 0, stale.stderr
    assert "nothing stale among the 31 partitions of the range, so it would want none" in stale.stdout
    (events,) = forked_cli([["events", "--json"]], env, tmp_path)  # a plan records nothing
    assert want.returncode == 0, want.stderr
    found = Plan.model_validate_json(want.stdout)
    assert found.count(Action.build) == 15 and len(found.runs) == 15  # the rollup's two outputs: one run
    assert [m.ref for m in found.sla_misses] == ["daily_summary/2024-01-07"]  # due in 2024

    assert shown.returncode == 0, shown.stderr
    assert "plan for daily_users/{date} from 2024-01-01 to 2024-01-31: nothing was recorded" in shown.stdout
    assert "62 job runs" in shown.stdout and re.search(r"raw_events +31 ", shown.stdout), shown.stdout

    assert bad.returncode == 2 and "no job in graph 'demo' produces 'nowhere/x'" in bad.stderr, bad.stderr
    assert events.returncode == 0 and json.loads(events.stdout)["events"] == [], events.stdout
