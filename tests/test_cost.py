"""Cost read from the BEL (views.cost) and shown by the CLI (without Temporal), the API, the job run's view
and /metrics: a run's recorded attempts, builds avoided by active and historical delegation, unknown
never shown as zero; reports summed by the database (bel.cost_sums) on both backends. (A run's own
rules: tests/test_domain_cost.py; Spark's figures: the stack test.)"""

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

import pytest
from fastapi.testclient import TestClient

from databuild.bel import BuildEventLog, projector
from databuild.bel.reads.measures import read_counts
from databuild.config import Settings
from databuild.domain import events as ev
from databuild.domain.cost import CostReport, CostRow, SparkCost, run_cost, total
from databuild.errors import InvalidPatternError, StaleAttemptError
from databuild.models import InstanceRef, WantSource, WantSpec
from databuild.testing import POSTGRES_ADMIN_URL, postgres_database
from databuild.views.cost import cost_report
from databuild.views.lineage import job_run_view
from databuild.web import create_app, web_context
from tests.conftest import forked_cli, require_postgres
from tests.graphs import priced_graph
from tests.test_domain_cost import ATTEMPTS, DAY1, DAY2, RUNS, spark

DelegationKind = Literal["active", "historical"]
ROOT = Path(__file__).resolve().parents[1]
AT = datetime(2024, 1, 1, tzinfo=UTC)

# left/{n} + right/{n} (one job), far/{n}; in tests/graphs.py, where the CLI's commands load it without
# this module's heavier imports.
priced = priced_graph


# SQLite is the unit tier's; PostgreSQL in a throwaway database of its own (a server).
@pytest.fixture(params=[pytest.param("sqlite", marks=pytest.mark.unit), "postgresql"])
def bel(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BuildEventLog]:
    if request.param == "sqlite":
        log = BuildEventLog.create(f"sqlite:///{tmp_path / 'bel.sqlite'}")
        yield log
        log.dispose()
        return
    require_postgres()
    with postgres_database(POSTGRES_ADMIN_URL, "cost", durable=False) as url:
        log = BuildEventLog.create(url)
        yield log
        log.dispose()


def want(bel: BuildEventLog, ref: str, day: int = 0) -> tuple[str, str]:
    """Register and decide a want; (its verdict's kind, the run)."""
    spec = WantSpec(ref=ref, data_timestamp=AT + timedelta(days=day), source=WantSource.cli)
    bel.wants.register(spec)
    verdict = bel.decisions.decide(spec.want_id, 1, priced.resolve(ref))
    return verdict.kind, verdict.job_run_id or ""


def costed(run: str, attempt: int, label: str, seconds: float | None) -> ev.JobRunCostRecorded:
    cost = None if seconds is None else SparkCost(task_seconds=seconds, cpu_seconds=seconds / 2, tasks=4)
    executor = "session" if seconds is not None else "connect"
    reason = None if seconds is not None else "Spark Connect does not give its clients Spark's accounting"
    return ev.JobRunCostRecorded(
        job_run_id=run, attempt=attempt, job_label=label, executor=executor, cost=cost, unknown_reason=reason
    )


def history(bel: BuildEventLog) -> str:
    """pair: built in one attempt of 8 task-seconds, one want joined it while it ran (active), one came
    after (historical); remote: built on Connect (unknown), one want after it (avoided, unvalued)."""
    kind, run = want(bel, "left/1")
    assert kind == "execute"
    assert want(bel, "right/1", day=1) == ("delegate", run)
    bel.job_runs.start(run, 1, "w")
    assert bel.costs.record(costed(run, 1, "pair", 8.0))
    assert not bel.costs.record(costed(run, 1, "pair", 99.0))  # once per attempt
    writes = [InstanceRef(ref=r, instance_id=f"{r}@1") for r in ("left/1", "right/1")]
    bel.job_runs.succeed(run, [], writes)
    assert want(bel, "left/1", day=2)[0] == "live"
    _kind, far = want(bel, "far/1")
    bel.job_runs.start(far, 1, "w")
    # As a worker records it: in the commit of the attempt's outcome.
    far_writes = [InstanceRef(ref="far/1", instance_id="far/1@1")]
    bel.job_runs.succeed(far, [], far_writes, attempt=1, cost=costed(far, 1, "remote", None))
    assert want(bel, "far/1", day=2)[0] == "live"
    return run


def test_an_outcome_records_its_attempts_cost_in_its_commit_and_a_refused_one_records_none(
    bel: BuildEventLog,
) -> None:
    _kind, run = want(bel, "far/2")
    bel.job_runs.start(run, 1, "w")
    bel.job_runs.start(run, 2, "w")  # attempt 1 lost its heartbeat and was retried
    written = [InstanceRef(ref="far/2", instance_id="far/2@1")]
    with pytest.raises(StaleAttemptError):
        bel.job_runs.succeed(run, [], written, attempt=1, cost=costed(run, 1, "remote", 2.0))
    assert bel.costs.attempts_of([run]) == []  # refused whole: the worker records it alone then
    missed = bel.job_runs.dep_miss(run, ["far/0"], [], attempt=2, cost=costed(run, 2, "remote", 3.0))
    assert missed.run.state.value == "dep_miss"
    assert [(a.attempt, a.cost and a.cost.task_seconds) for a in bel.costs.attempts_of([run])] == [(2, 3.0)]
    recorded = bel.events.query(types=["JobRunCostRecorded", "JobRunDepMiss"])
    assert [e.type for e in recorded] == ["JobRunCostRecorded", "JobRunDepMiss"]  # the cost first
    assert recorded[0].at == recorded[1].at and recorded[1].idx == recorded[0].idx + 1  # one commit


def logged(bel: BuildEventLog, delegations: list[tuple[str, str, str, DelegationKind, datetime]]) -> None:
    """The runs of ``RUNS`` and their ``ATTEMPTS`` (r1's second with an odd task count, as integer shares
    round down), and delegations (want, ref, run, kind, at), projected at their times."""
    attempts = [
        a.model_copy(update={"cost": spark(10.0, tasks=5)}) if a.attempt == 2 else a for a in ATTEMPTS
    ]
    with bel.writer.begin() as conn:
        for run, (label, outputs) in RUNS.items():
            queued = ev.JobRunQueued(
                job_run_id=run,
                job_label=label,
                outputs=outputs,
                params={},
                want_id=f"w-{run}",
                workflow_id=run,
            )
            projector.apply_all(conn, [queued], DAY1)
        for a in attempts:
            recorded = ev.JobRunCostRecorded(
                job_run_id=a.job_run_id,
                attempt=a.attempt,
                job_label=a.job_label,
                executor=a.executor,
                cost=a.cost,
                unknown_reason=a.unknown_reason,
            )
            projector.apply_all(conn, [recorded], a.at)
        for want_id, ref, run, kind, at in delegations:
            made = ev.Delegation(want_id=want_id, ref=ref, delegated_to=run, kind=kind, message="")
            projector.apply_all(conn, [made], at)


def test_spent_per_job_day_and_partition_counts_each_build_once_per_row(bel: BuildEventLog) -> None:
    logged(bel, [])
    by_job = {r.key: r for r in bel.costs.rows_by("job")}
    assert by_job["pair"].builds_run == 1 and by_job["pair"].task_seconds == 12.0
    assert by_job["pair"].tasks == 8 and by_job["pair"].output_bytes == 2000  # 5 tasks: 2 a partition
    assert by_job["pair"].cpu_seconds == 6.0
    assert by_job["remote"].builds_run == 1 and by_job["remote"].task_seconds == 0.0
    assert by_job["remote"].unknown_attempts == 1  # unknown, not zero: said so
    by_day = {r.key: r for r in bel.costs.rows_by("day")}
    assert by_day["2024-01-01"].task_seconds == 5.0 and by_day["2024-01-02"].task_seconds == 10.0
    assert by_day["2024-01-01"].builds_run == 3 and by_day["2024-01-02"].builds_run == 1
    by_ref = {r.key: r for r in bel.costs.rows_by("partition")}
    assert by_ref["left/1"].task_seconds == 6.0 and by_ref["right/1"].task_seconds == 6.0
    assert by_ref["left/1"].builds_run == 1 and by_ref["far/1"].unknown_attempts == 1
    assert total(by_ref.values()).task_seconds == 15.0
    # Each partition's row is its share of the run, as the run's own view splits it.
    split = run_cost(bel.costs.attempts_of(["r1"]), RUNS["r1"][1]).per_partition
    assert {(ref, c.task_seconds, c.tasks) for ref, c in split.items()} == {
        (ref, by_ref[ref].task_seconds, by_ref[ref].tasks) for ref in ("left/1", "right/1")
    }
    assert [r.key for r in bel.costs.rows_by("job", since=DAY2)] == ["pair"]


def test_a_want_delegating_to_a_run_avoided_one_build_worth_its_share_of_what_it_delegated(
    bel: BuildEventLog,
) -> None:
    logged(
        bel,
        [
            # one want, both outputs of the pair: one build avoided, worth the whole run
            ("w1", "left/1", "r1", "historical", DAY2),
            ("w1", "right/1", "r1", "historical", DAY2),
            ("w2", "one/1", "r2", "active", DAY1),
            ("w2", "one/1", "r2", "historical", DAY2),  # the same want again, once it was built: one build
            ("w3", "far/1", "r3", "historical", DAY2),  # a run of unknown cost: avoided, unvalued
            ("w4", "one/1", "r-gone", "historical", DAY2),  # a run no longer known: left out
        ],
    )
    by_job = {r.key: r for r in bel.costs.rows_by("job")}
    assert (by_job["pair"].builds_avoided, by_job["pair"].task_seconds_saved) == (1, 12.0)
    assert (by_job["single"].builds_avoided, by_job["single"].avoided_active) == (1, 1)
    assert by_job["single"].avoided_historical == 0 and by_job["single"].task_seconds_saved == 6.0
    assert (by_job["remote"].builds_avoided, by_job["remote"].unvalued_avoided) == (1, 1)
    assert by_job["remote"].task_seconds_saved == 0.0
    by_day = {r.key: r for r in bel.costs.rows_by("day")}
    assert by_day["2024-01-02"].builds_avoided == 3 and by_day["2024-01-01"].builds_avoided == 1
    # per partition: the pair's want avoided a build of each of its outputs, each worth its half
    by_ref = {r.key: r for r in bel.costs.rows_by("partition")}
    assert by_ref["left/1"].task_seconds_saved == 6.0 and by_ref["left/1"].builds_avoided == 1
    # a pattern keeps only its partitions' shares
    only_left = bel.costs.rows_by("job", "left/*")
    assert [(r.key, r.task_seconds, r.task_seconds_saved) for r in only_left] == [("pair", 6.0, 6.0)]
    # the plot's rows: each job by day; from the same statement, the rows by job and by day, each build
    # counted once per job (r1's attempts and w2's delegations fall on two days)
    days = bel.costs.days()
    assert [r.key for r in days.by_job_day["pair"]] == ["2024-01-01", "2024-01-02"]
    assert days.by_job_day["pair"][1].task_seconds == 10.0 and days.by_job_day["pair"][1].builds_avoided == 1
    assert (days.by_job, days.by_day) == (bel.costs.rows_by("job"), bel.costs.rows_by("day"))
    assert bel.costs.days(since=DAY2).by_job == bel.costs.rows_by("job", since=DAY2)


def test_a_run_whose_cost_is_not_recorded_yet_leaves_its_avoided_builds_unvalued(bel: BuildEventLog) -> None:
    with bel.writer.begin() as conn:
        queued = ev.JobRunQueued(
            job_run_id="r9", job_label="single", outputs=["one/1"], params={}, want_id="w", workflow_id="r9"
        )
        made = ev.Delegation(want_id="w1", ref="one/1", delegated_to="r9", kind="active", message="")
        projector.apply_all(conn, [queued, made], DAY1)
    (row,) = bel.costs.rows_by("job")
    assert (row.builds_avoided, row.unvalued_avoided, row.task_seconds_saved, row.builds_run) == (
        1,
        1,
        0.0,
        0,
    )


def test_a_page_of_the_costliest_rows_keeps_the_total_of_them_all(bel: BuildEventLog) -> None:
    logged(bel, [("w1", "left/1", "r1", "historical", DAY2), ("w3", "far/1", "r3", "historical", DAY2)])
    every = bel.costs.rows_by("partition")
    assert len(every) > 2
    shown, summed, count = bel.costs.costliest_rows(2, "partition")
    assert count == len(every) and summed == total(every)
    costliest = sorted(every, key=lambda r: (-r.task_seconds, r.key))[:2]
    assert shown == costliest and shown[0].task_seconds >= shown[1].task_seconds
    # No more rows than a page: all of them, by key, as the report has them.
    assert bel.costs.costliest_rows(len(every), "partition") == (every, total(every), len(every))
    assert bel.costs.costliest_rows(2, "partition", "nothing/*") == ([], total([]), 0)


def test_the_report_by_partition_is_kept_as_costs_delegations_and_batch_members_are_recorded(
    bel: BuildEventLog,
) -> None:
    """Rows by partition of all time are read from ``partition_costs``, which the projector keeps; they
    stay what the statement sums (asked for here with a ``since`` before everything)."""
    every = AT - timedelta(days=365)
    logged(
        bel,
        [
            ("w1", "left/1", "r1", "historical", DAY2),
            ("w2", "one/1", "r2", "active", DAY1),
            ("w2", "one/1", "r2", "historical", DAY2),  # the same pair again: saves again, avoids no more
            ("w5", "one/1", "r2", "historical", DAY1),
            ("w5", "one/1", "r2", "active", DAY2),  # recorded out of order: the pair is an active one
            ("w3", "far/1", "r3", "historical", DAY2),  # unknown cost: unvalued
            ("w4", "one/1", "r-gone", "historical", DAY2),  # a run no longer known: left out
        ],
    )
    by_ref = {r.key: r for r in bel.costs.rows_by("partition")}
    assert (by_ref["one/1"].builds_avoided, by_ref["one/1"].avoided_active) == (2, 2)
    assert by_ref["far/1"].unvalued_avoided == 1
    assert list(by_ref.values()) == bel.costs.rows_by("partition", since=every)
    with bel.writer.begin() as conn:
        queued = ev.JobRunQueued(
            job_run_id="r8", job_label="pair", outputs=["left/8"], params={}, want_id="w8", workflow_id="r8"
        )
        active = ev.Delegation(want_id="w9", ref="left/8", delegated_to="r8", kind="active", message="")
        projector.apply_all(conn, [queued.model_copy(update={"batch": 4}), active], DAY1)
    (unvalued,) = [r for r in bel.costs.rows_by("partition") if r.key == "left/8"]
    assert (unvalued.builds_avoided, unvalued.unvalued_avoided, unvalued.builds_run) == (1, 1, 0)
    with bel.writer.begin() as conn:
        started = ev.JobRunStarted(job_run_id="r8", attempt=1, worker="w")
        projector.apply_all(conn, [started, costed("r8", 1, "pair", 8.0)], DAY2)
        # A partition joins the costed run (a batch after a dep-miss): every share of it is now a half.
        joined = ev.JobRunJoined(job_run_id="r8", want_id="w10", params={"n": "9"}, outputs=["left/9"])
        projector.apply_all(conn, [joined], DAY2)
    kept = {r.key: r for r in bel.costs.rows_by("partition")}
    assert kept["left/8"].task_seconds == kept["left/9"].task_seconds == 4.0
    assert (kept["left/8"].task_seconds_saved, kept["left/8"].unvalued_avoided) == (4.0, 0)
    assert list(kept.values()) == bel.costs.rows_by("partition", since=every)
    shown, summed, count = bel.costs.costliest_rows(3, "partition")
    assert count == len(kept) and summed == total(kept.values())
    assert shown == sorted(kept.values(), key=lambda r: (-r.task_seconds, r.key))[:3]


def test_the_report_by_job_and_day_is_kept_in_parts_as_costs_delegations_and_batch_members_are_recorded(
    bel: BuildEventLog,
) -> None:
    """Rows by job and by day of all time (the dashboard's cost page) are summed from the parts the
    projector keeps (``run_day_costs``); they stay what the statement sums (asked with a ``since`` before
    everything), through delegations before a run's cost, out of order, on two days, to a run gone."""
    every = AT - timedelta(days=365)

    def kept_is_summed() -> dict[str, CostRow]:
        kept, summed = bel.costs.days(), bel.costs.days(since=every)
        assert (kept.by_job_day, kept.by_job, kept.by_day) == (
            summed.by_job_day,
            summed.by_job,
            summed.by_day,
        )
        # And they are the reports by job and by day (``databuild cost``, the API).
        assert (kept.by_job, kept.by_day) == (bel.costs.rows_by("job"), bel.costs.rows_by("day"))
        return {r.key: r for r in kept.by_job}

    with bel.writer.begin() as conn:  # a want delegates to a batch run before it has a cost: unvalued
        queued = ev.JobRunQueued(
            job_run_id="r8", job_label="pair", outputs=["left/8"], params={}, want_id="w8", workflow_id="r8"
        )
        active = ev.Delegation(want_id="w9", ref="left/8", delegated_to="r8", kind="active", message="")
        projector.apply_all(conn, [queued.model_copy(update={"batch": 4}), active], DAY1)
    logged(
        bel,
        [
            ("w1", "left/1", "r1", "historical", DAY2),
            ("w2", "one/1", "r2", "active", DAY1),
            ("w2", "one/1", "r2", "historical", DAY2),  # the same pair on another day
            ("w5", "one/1", "r2", "historical", DAY2),
            ("w5", "one/1", "r2", "active", DAY1),  # recorded out of order
            ("w6", "one/1", "r2", "historical", DAY1),
            ("w6", "one/1", "r2", "active", DAY2),  # an active pair, in its job's row
            ("w3", "far/1", "r3", "historical", DAY2),  # unknown cost: unvalued
            ("w4", "one/1", "r-gone", "historical", DAY2),  # a run no longer known: left out
        ],
    )
    by_job = kept_is_summed()
    assert (by_job["single"].builds_avoided, by_job["single"].avoided_active) == (3, 3)
    assert by_job["pair"].unvalued_avoided == 1 and by_job["remote"].unvalued_avoided == 1
    with bel.writer.begin() as conn:
        started = ev.JobRunStarted(job_run_id="r8", attempt=1, worker="w")
        projector.apply_all(conn, [started, costed("r8", 1, "pair", 8.0)], DAY2)
        # A partition joins the costed run (a batch after a dep-miss): every share of it is now a half.
        joined = ev.JobRunJoined(job_run_id="r8", want_id="w10", params={"n": "9"}, outputs=["left/9"])
        again = ev.Delegation(want_id="w9", ref="left/9", delegated_to="r8", kind="historical", message="")
        projector.apply_all(conn, [joined, again], DAY2)
    by_job = kept_is_summed()
    assert by_job["pair"].unvalued_avoided == 0 and by_job["pair"].builds_run == 2
    assert bel.costs.days().by_day[1].task_seconds_saved > 0


def test_spent_and_saved_per_job_and_partition_and_a_run_shows_its_cost(bel: BuildEventLog) -> None:
    run = history(bel)
    by_job = {r.key: r for r in cost_report(bel).rows}
    pair = by_job["pair"]
    assert (pair.builds_run, pair.builds_avoided, pair.avoided_active, pair.avoided_historical) == (
        1,
        2,
        1,
        1,
    )
    # Each want delegated both outputs (a job of two outputs is one build): each avoided the whole run.
    assert (pair.task_seconds, pair.task_seconds_saved) == (8.0, 16.0)
    remote = by_job["remote"]
    assert (remote.builds_run, remote.unknown_attempts, remote.task_seconds) == (1, 1, 0.0)
    assert (remote.builds_avoided, remote.unvalued_avoided, remote.task_seconds_saved) == (1, 1, 0.0)
    by_ref = {r.key: r for r in cost_report(bel, "partition", "left/*").rows}
    assert list(by_ref) == ["left/1"] and by_ref["left/1"].task_seconds == 4.0
    assert by_ref["left/1"].task_seconds_saved == 8.0  # left/1's half, avoided by each of the two wants
    assert cost_report(bel, since=datetime.now(UTC) + timedelta(hours=1)).rows == []
    with pytest.raises(InvalidPatternError):
        cost_report(bel, pattern="a/***")
    shown = job_run_view(bel, run).data.cost
    assert shown is not None and shown.total is not None and shown.total.task_seconds == 8.0
    assert {r: c.task_seconds for r, c in shown.per_partition.items()} == {"left/1": 4.0, "right/1": 4.0}
    # A log rebuilt from its events alone holds the same costs.
    before = bel.costs.attempts()
    bel.events.rebuild_projections()
    assert bel.costs.attempts() == before
    # What /metrics reads, summed in SQL.
    with bel.reader.connect() as conn:
        counts = read_counts(conn, recent=10, upper_bounds=[1.0])
    assert [(t.job_label, t.task_seconds) for t in counts.task_seconds] == [("pair", 8.0), ("remote", 0.0)]
    assert [(a.job_label, a.kind, a.builds) for a in counts.avoided] == [
        ("pair", "active", 1),
        ("pair", "historical", 1),
        ("remote", "historical", 1),
    ]


@pytest.mark.unit
def test_cost_through_the_cli_without_temporal_the_api_and_metrics(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'bel.sqlite'}"
    bel = BuildEventLog.create(url)
    run = history(bel)
    bel.dispose()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATABUILD_")}
    env |= {"PYTHONPATH": str(ROOT), "COLUMNS": "200", "DATABUILD_TEMPORAL_ADDRESS": "127.0.0.1:9"}
    env |= {"DATABUILD_DATABASE_URL": url, "DATABUILD_GRAPH": "tests.graphs:priced_graph"}
    ran = forked_cli(
        [
            ["cost"],
            ["cost", "--json", "--by", "partition"],
            ["cost", "left/*", "--by", "day", "--since", "7d"],
            ["cost", "--by", "week"],
            ["cost", "--since", "yesterday"],
            ["job-runs", "show", run],
            ["partitions", "show", "right/1"],
        ],
        env,
        tmp_path,
    )
    table, as_json, daily, bad_by, bad_since, shown, partition_shown = ran
    assert table.returncode == 0, table.stderr
    assert "pair" in table.stdout and "2 (1/1)" in table.stdout and "16.0" in table.stdout, table.stdout
    assert "1 (+1 unvalued)" not in table.stdout and "0.0 (+1 unknown)" in table.stdout
    report = CostReport.model_validate(json.loads(as_json.stdout))
    assert [r.key for r in report.rows] == ["far/1", "left/1", "right/1"]
    assert daily.returncode == 0 and datetime.now(UTC).strftime("%Y-%m-%d") in daily.stdout, daily.stderr
    assert bad_by.returncode != 0 and "--by 'week': use job, day or partition" in bad_by.stderr
    assert bad_since.returncode != 0 and "cannot read timestamp 'yesterday'" in bad_since.stderr
    assert shown.returncode == 0 and "attempt 1 (session): 8.0 task-s" in shown.stdout, shown.stderr
    assert "each of its 2 outputs: 4.0 task-s" in shown.stdout
    assert partition_shown.returncode == 0, partition_shown.stderr
    assert "cost: 4.0 task-s, 2.0 CPU s, 2 tasks in 0 Spark jobs" in partition_shown.stdout
    assert f"(its share of run {run})" in partition_shown.stdout

    # In an 80-column terminal: what was spent and saved, readable (ten columns cut every header to two
    # letters), and where the rest is.
    (narrow,) = forked_cli([["cost", "--by", "partition"]], env | {"COLUMNS": "80"}, tmp_path)
    assert narrow.returncode == 0, narrow.stderr
    assert all(len(line) <= 80 for line in narrow.stdout.splitlines()), narrow.stdout
    for word in ("partition", "builds", "avoided", "task-s", "spent", "saved", "right/1"):
        assert word in narrow.stdout, narrow.stdout
    assert "CPU s" not in narrow.stdout and "in a terminal of 120 columns or more" in narrow.stdout

    bel = BuildEventLog.create(url)
    app = create_app(web_context(Settings(home=tmp_path, graph="tests.graphs:priced_graph"), bel))
    client = TestClient(app, base_url="http://127.0.0.1:8000", client=("127.0.0.1", 50000))
    api = client.get("/api/cost", params={"by": "partition", "pattern": "right/*"})
    assert api.status_code == 200, api.text
    assert [(r["key"], r["task_seconds"]) for r in api.json()["rows"]] == [("right/1", 4.0)]
    assert client.get("/api/cost", params={"by": "week"}).status_code == 400
    # `since` in Unix seconds however large (-62135596800 is 0001-01-01: everything), or as the CLI writes it.
    everything = client.get("/api/cost", params={"by": "partition", "since": "-62135596800"})
    every = client.get("/api/cost", params={"by": "partition"}).json()["rows"]
    assert everything.status_code == 200 and everything.json()["rows"] == every and len(every) == 3
    nothing = client.get("/api/cost", params={"since": "9999-01-01T00"}).json()
    assert nothing["rows"] == [], nothing
    assert client.get(f"/api/job-runs/{run}").json()["data"]["cost"]["total"]["task_seconds"] == 8.0
    page = client.get("/cost")
    assert page.status_code == 200 and 'id="cost-plots"' in page.text, page.text[-2000:]
    assert page.text.count('class="cost-plot"') == 2 and 'class="bar saved"' in page.text  # pair, remote
    assert "+1 unknown" in page.text and "+1 unvalued" in page.text
    by_ref = client.get("/cost", params={"by": "partition", "pattern": "left/*"})
    assert by_ref.status_code == 200 and 'href="/partitions/left/1"' in by_ref.text
    assert client.get("/cost", params={"by": "week"}).status_code == 400
    partition = client.get("/api/partitions/left/1").json()
    assert partition["cost"]["task_seconds"] == 4.0  # its half of the run
    assert client.get("/api/partitions/far/1").json()["cost"] is None  # unknown: not a zero
    assert 'id="cost"' in client.get("/partitions/left/1").text
    run_page = client.get(f"/job-runs/{run}").text
    assert 'id="cost"' in run_page and "each of its 2 outputs: 4.00 task-s" in run_page
    metrics = client.get("/metrics").text
    assert 'databuild_task_seconds_total{job_label="pair"} 8.0' in metrics
    assert 'databuild_task_seconds_total{job_label="remote"} 0.0' in metrics
    assert 'databuild_builds_avoided_total{job_label="pair",kind="active"} 1.0' in metrics
    assert 'databuild_builds_avoided_total{job_label="pair",kind="historical"} 1.0' in metrics
    assert 'databuild_builds_avoided_total{job_label="remote",kind="historical"} 1.0' in metrics
    bel.dispose()
