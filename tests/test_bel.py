"""The BEL contract: one suite, run against every backend (SQLite and PostgreSQL), in the style of the
`eventsourcing` library's persistence tests: appends, projections, claims and delegation decisions,
concurrent writers released together, readers tailing the log, and rebuilding state from events."""

import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import pytest
from sqlalchemy import create_engine, inspect, select, text
from sqlalchemy import event as sql_event

from databuild.backfill import BackfillRequest
from databuild.bel import BuildEventLog
from databuild.bel import schema as s
from databuild.bel.aggregates.decisions import DEFAULT_LEASE, Step
from databuild.domain import events as ev
from databuild.domain.cost import SparkCost
from databuild.domain.decisions import Replaced, Verdict
from databuild.domain.endings import Finished
from databuild.domain.freshness import Freshness
from databuild.domain.staleness import StaleKind, StaleReason, staleness
from databuild.domain.wants import WantStart
from databuild.errors import (
    InvalidInputError,
    InvalidPatternError,
    InvalidTransitionError,
    NotFoundError,
    WantReplacedError,
)
from databuild.globs import compile_glob
from databuild.graph import Graph
from databuild.models import (
    CheckResult,
    CheckSeverity,
    Column,
    EventFilter,
    Instance,
    InstanceFacts,
    InstanceRef,
    InstanceStatus,
    JobRunCause,
    JobRunState,
    PartitionStatus,
    WantSource,
    WantSpec,
    WantState,
)
from databuild.testing import POSTGRES_URL, projection_rows
from tests.conftest import require_postgres

T = TypeVar("T")

graph = Graph("bel")
graph.external("ext/{n}")
graph.job("a/{n}", "b/{n}", "c/{n}")(lambda ctx, n: None)
layers = Graph("layers")  # up/{n} -> mid/{n} -> down/{n}; the BEL only sees the reads it is told
for layer in ("up", "mid", "down"):
    layers.job(f"{layer}/{{n}}", label=layer)(lambda ctx, n: None)


def reset_postgres(url: str) -> None:
    """An empty database, as a fresh installation would see it."""
    engine = create_engine(url)
    with engine.begin() as conn:
        s.metadata.drop_all(conn)
        conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
    engine.dispose()


# SQLite is the unit tier's (tests/unit_tier.py); PostgreSQL is a server.
@pytest.fixture(params=[pytest.param("sqlite", marks=pytest.mark.unit), "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty database of each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'bel.sqlite'}"
    reset_postgres(require_postgres())
    return POSTGRES_URL


@pytest.fixture
def bel(empty_url: str) -> Iterator[BuildEventLog]:
    log = BuildEventLog.create(empty_url)
    yield log
    log.dispose()


def test_rows_written_in_bulk_read_back_as_written(bel: BuildEventLog) -> None:
    """bel.engine (bulk rows): one statement per table whatever the rows (a JSON recordset on PostgreSQL). Columns left
    out get their defaults, times are kept to the microsecond in UTC (naive ones taken as UTC), JSON
    columns keep their documents, a row already there is skipped or has the named columns set."""
    from databuild.bel.engine import insert_rows, update_rows, upsert_rows

    at = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    runs = [
        {
            "job_run_id": f"r{n}",
            "job_label": "j",
            "state": "queued",
            "outputs": [f"a/{n}"],
            "params": {"n": str(n), "nested": {"k": [1, None]}},
            "missing": [],
            "workflow_id": f"w{n}",
            "created_at": at if n else at.replace(tzinfo=None),
            "updated_at": at,
        }
        for n in range(3)
    ]
    parts = [{"ref": f"a/{n}", "status": "missing", "updated_at": at} for n in range(2)]
    with bel.writer.begin() as conn:
        insert_rows(conn, s.job_runs, runs)
        insert_rows(conn, s.partitions, parts)
        insert_rows(conn, s.partitions, [{**parts[0], "status": "live"}], skip_existing=True)
        moved = at + timedelta(hours=1)
        changed = [{**row, "building_job_run_id": "r1", "updated_at": moved} for row in parts[1:]]
        upsert_rows(
            conn,
            s.partitions,
            [*changed, {**changed[0], "ref": "a/9", "building_job_run_id": None}],
            setting=("building_job_run_id",),
        )
        update_rows(conn, s.job_runs, [{"job_run_id": "r2", "state": "running", "attempts": 2}])
    with bel.reader.connect() as conn:
        written = conn.execute(select(s.job_runs).order_by(s.job_runs.c.job_run_id)).mappings().all()
    assert [(r["state"], r["attempts"], r["lost"], r["created_at"], r["params"]) for r in written] == [
        ("queued", 0, False, at, runs[0]["params"]),
        ("queued", 0, False, at, runs[1]["params"]),
        ("running", 2, False, at, runs[2]["params"]),
    ]
    with bel.reader.connect() as conn:
        rows = conn.execute(select(s.partitions).order_by(s.partitions.c.ref)).mappings().all()
    assert [
        (r["ref"], r["status"], r["building_job_run_id"], r["updated_at"], r["external"]) for r in rows
    ] == [
        ("a/0", "missing", None, at, False),
        ("a/1", "missing", "r1", at, False),  # only the named column was set
        ("a/9", "missing", None, moved, False),  # inserted
    ]


def test_migrations_from_empty_match_the_schema_even_when_started_together(empty_url: str) -> None:
    from alembic import command

    from databuild.bel.migrate import alembic_config

    logs = released_together(4, lambda _i: BuildEventLog.create(empty_url))
    with logs[0].writer.connect() as conn:
        command.check(alembic_config(conn))  # raises if the models and the migrated schema differ
    assert logs[0].events.last_idx() == 0
    for log in logs:
        log.dispose()


def test_upgrading_from_0_1_0_keeps_the_history_and_continues_it(empty_url: str) -> None:
    """A log of release 0.1.0 upgraded to head: its history kept, its projections what replaying it
    gives, the schema the models', and new events continue its index. Every revision after 0.1.0 makes
    this log hold what it changes (written here, then downgraded to 0.1.0 as below, or written row by
    row in the 0.1.0 shape) and asserts what the upgrade derives from it."""
    from alembic import command
    from alembic.migration import MigrationContext
    from alembic.script import ScriptDirectory

    from databuild.bel.migrate import BASELINE, HEAD, alembic_config

    bel = BuildEventLog.create(empty_url)
    execute_then_active_then_historical_delegation(bel)
    dep_miss_releases_and_failure_fail_locks(bel)
    legacy = backfill_of_0_1_0(bel)
    # 0013 counts the rewinds of a log written since 0002: the legacy backfill retried, its window rewound
    # and moved past its wants again.
    with bel._log.write() as tx:
        tx.extend(
            [
                ev.BackfillRetried(backfill_id=legacy.backfill_id, rewind=True),
                ev.BackfillAdvanced(backfill_id=legacy.backfill_id, started=2),
            ]
        )
    # 0014 counts the retries that reopened each want: one want failed and retried once, another twice.
    once, twice = spec("a/retried-1"), spec("a/retried-2")
    for want, retries in ((once, 1), (twice, 2)):
        bel.wants.register(want)
        for _ in range(retries):
            bel.wants.finish(want.want_id, WantState.failed, "boom")
            bel.wants.reopen([want.want_id])
    assert (bel.wants.get(once.want_id).opening, bel.wants.get(twice.want_id).opening) == (1, 2)
    history = [(e.idx, e.type, e.ref) for e in bel.events.query(limit=1000)]
    with bel.writer.begin() as conn:
        command.downgrade(alembic_config(conn), BASELINE)
        assert MigrationContext.configure(conn).get_current_revision() == BASELINE
    bel.dispose()

    upgraded = BuildEventLog.create(empty_url)
    with upgraded.writer.connect() as conn:
        config = alembic_config(conn)
        head = ScriptDirectory.from_config(config).get_current_head()
        assert head == HEAD  # a log at HEAD is taken as current without asking Alembic
        assert MigrationContext.configure(conn).get_current_revision() == head
        command.check(config)  # raises if the models and the upgraded schema differ
    assert [(e.idx, e.type, e.ref) for e in upgraded.events.query(limit=1000)] == history
    openings = {w.want_id: w.opening for w in upgraded.wants.query(limit=1000)}  # as migrated (0014, below)
    migrated = projection_rows(upgraded)
    upgraded.events.rebuild_projections()
    assert projection_rows(upgraded) == migrated
    # 0002: a backfill of 0.1.0 had its wants started as they were registered: its window is past them.
    assert upgraded.backfills.progress(legacy.backfill_id).started == 2
    step = upgraded.backfills.advance(legacy.backfill_id, window=10)
    assert step.done and step.to_start == [] and upgraded.backfills.unstarted(legacy.backfill_id) == set()
    upgraded.partitions.publish_external("ext/after")
    assert [e.idx for e in upgraded.events.query(limit=1000)] == list(range(1, len(history) + 2))
    assert upgraded.events.last_idx() == len(history) + 1
    # 0003: a log from before checks has no results; checks recorded from now on are kept and replayed.
    live = [str(e.data["instance_id"]) for e in upgraded.events.query(types=["PartitionLive"], limit=1000)]
    assert live and upgraded.partitions.checks_of(live) == {}
    checks_kept_published_and_rechecked(upgraded)
    # 0004: instances of 0.1.0 have no recorded job version (unknown: never stale by code); a run recorded
    # from now on keeps the version that built it, and a rebuild of the projections derives it again.
    assert {i.job_version for i in upgraded.partitions.instances_by_id(live)} == {None}
    versioned = decide(upgraded, spec("a/21"))
    upgraded.job_runs.start(versioned.job_run_id, 1, "w")
    upgraded.job_runs.succeed(
        versioned.job_run_id,
        [],
        [InstanceRef(ref=o, instance_id=f"{o}-v2") for o in versioned.outputs],
        job_version="2",
    )
    assert upgraded.partitions.instance("a/21-v2").job_version == "2"
    # 0005: runs of 0.1.0 recorded no cost (their delegations count as builds avoided, unvalued); a cost
    # recorded from now on is kept, and a rebuild of the projections derives it again.
    assert upgraded.costs.attempts() == []
    assert upgraded.costs.record(
        ev.JobRunCostRecorded(
            job_run_id=versioned.job_run_id,
            attempt=1,
            job_label="abc",
            executor="session",
            cost=SparkCost(task_seconds=1.5, cpu_seconds=1.0, tasks=3),
        )
    )
    (recorded,) = upgraded.costs.attempts()
    assert recorded.cost is not None and recorded.cost.task_seconds == 1.5
    # The history's delegations, to value once their runs are priced.
    assert sum(row.unvalued_avoided for row in upgraded.costs.rows_by("job")) > 0
    # 0006: every want of 0.1.0 is a usual one (not fresh), its id unchanged; a fresh want recorded from
    # now on keeps what makes it fresh, also through a rebuild of the projections (below).
    assert {(w.fresh, w.fresh_of) for w in upgraded.wants.query(limit=1000)} == {(False, None)}
    assert all(w.spec.want_id == w.want_id for w in upgraded.wants.query(limit=1000))
    fresh = WantSpec(ref="a/22", data_timestamp=datetime(2024, 1, 1, tzinfo=UTC), fresh=True, fresh_of="i:x")
    upgraded.wants.register(fresh)
    assert upgraded.wants.get(fresh.want_id).spec == fresh
    # 0007: no want of 0.1.0 has a cause (someone asked for each); a late-data rebuild keeps its own.
    assert {w.cause for w in upgraded.wants.query(limit=1000) if w.want_id != fresh.want_id} == {None}
    late = fresh.model_copy(update={"ref": "a/23", "source": WantSource.rebuild, "cause": "late data: a/1"})
    upgraded.wants.register(late)
    assert upgraded.wants.get(late.want_id).cause == "late data: a/1"
    # 0008: wants' states by id, for a backfill's progress.
    with upgraded.reader.connect() as conn:
        assert {"want_id", "state"} == {
            c
            for ix in inspect(conn).get_indexes("wants")
            if ix["name"] == "ix_wants_state_of"
            for c in ix["column_names"]
        }
    # 0009: the report by partition is kept: the migration summed the history's rows, and the cost and
    # the delegations recorded since are in them, as the statement sums them (asked with a ``since``).
    by_partition = upgraded.costs.rows_by("partition")
    assert any(row.unvalued_avoided for row in by_partition) and any(row.task_seconds for row in by_partition)
    assert by_partition == upgraded.costs.rows_by("partition", since=datetime(2000, 1, 1, tzinfo=UTC))
    # 0010: the indexes that wider ones cover are gone; a lookup by job run still answers (by the wider one).
    with upgraded.reader.connect() as conn:
        names = {ix["name"] for table in ("events", "job_runs") for ix in inspect(conn).get_indexes(table)}
    assert {"ix_events_job_run_type", "ix_job_runs_batch"} <= names
    assert not names & {"ix_events_job_run_id", "ix_job_runs_job_label"}
    assert upgraded.events.query(job_run_id=versioned.job_run_id, limit=1000)
    # 0011: the report by job and day is kept in parts: the migration summed them from the history, and
    # the cost and delegations recorded since are in them, as the statement sums them.
    days = upgraded.costs.days()
    assert any(row.unvalued_avoided for row in days.by_job) and any(row.task_seconds for row in days.by_day)
    assert days == upgraded.costs.days(since=datetime(2000, 1, 1, tzinfo=UTC))
    # 0012 (PostgreSQL): the functions placing events plan with the index alone (the downgrade reset them).
    if upgraded.writer.dialect.name == "postgresql":
        with upgraded.writer.connect() as conn:
            settings = conn.execute(
                text("SELECT proconfig FROM pg_proc WHERE proname IN ('bel_place_pending', 'bel_sequence')")
            ).scalars()
            assert [("enable_seqscan=off" in config) for config in settings] == [True, True]
    # 0013: the rewind is counted, as a replay of the log counts it (below).
    assert upgraded.backfills.plan_window_step(legacy.backfill_id, window=10).rewinds == 1
    # 0014: each want's opening is its count of retries, as a replay of the log counts it (above, and
    # below with the wants recorded since, all at their first).
    assert (openings.pop(once.want_id), openings.pop(twice.want_id)) == (1, 2)
    assert openings and set(openings.values()) == {0}
    # 0016: no commit of the history was to a table; one recorded now is the instance's, and replays.
    assert upgraded.partitions.instance(live[0]).table is None
    held = upgraded.partitions.instance(live[0])
    upgraded.tables.record(
        ev.TableCommitted(
            table="default.a",
            format="iceberg",
            snapshot_id=2**62,
            committed_at=datetime(2024, 1, 2, tzinfo=UTC),
            instances=[InstanceRef(ref=held.ref, instance_id=held.instance_id)],
        )
    )
    commit = upgraded.partitions.instance(live[0]).table
    assert commit is not None and (commit.table, commit.snapshot_id, commit.removed_at) == (
        "default.a",
        2**62,
        None,
    )
    kept = projection_rows(upgraded)
    upgraded.events.rebuild_projections()
    assert projection_rows(upgraded) == kept
    assert (upgraded.wants.get(once.want_id).opening, upgraded.wants.get(twice.want_id).opening) == (1, 2)
    assert {w.opening for w in upgraded.wants.query(limit=1000)} == {0, 1, 2}
    upgraded.dispose()


def backfill_of_0_1_0(bel: BuildEventLog) -> BackfillRequest:
    """A backfill as release 0.1.0 recorded it: not windowed, its wants without places."""
    request, specs = backfill_of(["a/legacy-1", "a/legacy-2"])
    with bel._log.write() as tx:
        tx.extend(
            [
                ev.BackfillRegistered(backfill_id=request.backfill_id, request=request, partitions=2),
                *(ev.WantCreated(want_id=w.want_id, spec=w, workflow_id=w.workflow_id) for w in specs),
                ev.BackfillWantsAdded(backfill_id=request.backfill_id, want_ids=[w.want_id for w in specs]),
            ]
        )
    return request


def spec(ref: str, source: str = "cli") -> WantSpec:
    return WantSpec(ref=ref, data_timestamp=datetime(2024, 1, 1, tzinfo=UTC), source=source)  # type: ignore[arg-type]


def decide(bel: BuildEventLog, w: WantSpec, seq: int = 1):  # type: ignore[no-untyped-def]
    bel.wants.register(w)
    return bel.decisions.decide(w.want_id, seq, graph.resolve(w.ref))


def build(bel: BuildEventLog, w: WantSpec, version: str) -> Verdict:
    """Claim the want's job and record it built, each output as instance ``<ref>-<version>``."""
    run = decide(bel, w)
    bel.job_runs.start(run.job_run_id, 1, "w")
    bel.job_runs.succeed(
        run.job_run_id, [], [InstanceRef(ref=o, instance_id=f"{o}-{version}") for o in run.outputs]
    )
    return run


def statuses(bel: BuildEventLog, n: int) -> set[PartitionStatus]:
    return {bel.partitions.get(f"{x}/{n}").status for x in "abc"}


@pytest.mark.unit
def test_sqlite_writes_ahead_and_checkpoints_every_10000_pages(tmp_path: Path) -> None:
    """Checkpointing a tenth as often as SQLite's default copies a page back once for many commits."""
    bel = BuildEventLog.create(f"sqlite:///{tmp_path / 'bel.sqlite'}")
    try:
        with bel.writer.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 10_000
    finally:
        bel.dispose()


def test_concurrent_appends_get_a_gap_free_index(bel: BuildEventLog) -> None:
    barrier = threading.Barrier(8)

    def writer(t: int) -> None:
        barrier.wait()
        for i in range(15):
            bel.wants.register(spec(f"ext/{t}-{i}"))

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    idx = [e.idx for e in bel.events.query(limit=1000)]
    assert idx == list(range(1, 121))
    assert bel.events.last_idx() == 120


def test_placing_events_reads_only_the_pending_ones_on_a_log_never_analysed() -> None:
    """PostgreSQL: placing provisional events holds the sequencer's lock, so it must not read the whole
    log, even before autovacuum first analyses it (the planner then guesses a third of it pending)."""
    url = require_postgres()
    reset_postgres(url)
    BuildEventLog.create(url).dispose()
    engine = create_engine(url)
    provisional = 1 << 62
    try:
        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE events SET (autovacuum_enabled = off)"))
            conn.execute(
                text(
                    "INSERT INTO events (idx, type, at, data) "
                    "SELECT g, 'X', now(), '{}' FROM generate_series(1, 20000) AS g"
                )
            )
            conn.execute(text("UPDATE bel_head SET last_idx = 20000"))
        with engine.connect() as conn, conn.begin():
            conn.execute(
                text(
                    "INSERT INTO events (idx, type, at, data) "
                    "SELECT :provisional + g, 'X', now(), '{}' FROM generate_series(0, 2) AS g"
                ),
                {"provisional": provisional},
            )
            assert conn.execute(text("SELECT bel_sequence(NULL)")).scalar_one() == 20003
            scans = conn.execute(
                text("SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'events'")
            ).scalar_one()
            assert scans == 0
            placed = conn.execute(text("SELECT idx FROM events WHERE idx > 20000 ORDER BY idx")).scalars()
            assert list(placed) == [20001, 20002, 20003]
    finally:
        engine.dispose()


def test_registration_is_idempotent(bel: BuildEventLog) -> None:
    w = spec("ext/1")
    first, created = bel.wants.register(w)
    again, created_again = bel.wants.register(w)
    assert (created, created_again) == (True, False)
    assert first == again
    assert len(bel.events.query(types=["WantCreated"])) == 1


def test_execute_then_active_then_historical_delegation(bel: BuildEventLog) -> None:
    execute_then_active_then_historical_delegation(bel)


def execute_then_active_then_historical_delegation(bel: BuildEventLog) -> None:
    """The scenario, checked step by step (other tests start from the history it leaves): a want
    executes the job of a/1, b/1 and c/1, a second joins the build (active delegation), a third finds
    the outputs live (historical delegation)."""
    first = decide(bel, spec("b/1"))
    assert first.kind == "execute" and first.outputs == ["a/1", "b/1", "c/1"]
    assert {p.status for p in bel.partitions.query()} == {PartitionStatus.building}

    second = decide(bel, spec("c/1", source="api"))
    assert second.kind == "delegate" and second.job_run_id == first.job_run_id
    delegations = bel.events.query(types=["Delegation"])
    assert [(d.ref, d.data["kind"], d.data["delegated_to"]) for d in delegations] == [
        (ref, "active", first.job_run_id) for ref in ("a/1", "b/1", "c/1")
    ]

    # A retried decide activity returns the answer already given, and records nothing new.
    before = bel.events.last_idx()
    assert decide(bel, spec("c/1", source="api")).job_run_id == first.job_run_id
    assert bel.events.last_idx() == before

    bel.job_runs.start(first.job_run_id, 1, "w")
    writes = [InstanceRef(ref=r, instance_id=f"{r}-uuid") for r in first.outputs]
    bel.job_runs.succeed(first.job_run_id, [], writes)
    assert {p.status for p in bel.partitions.query()} == {PartitionStatus.live}

    third = decide(bel, spec("a/1", source="dashboard"))
    assert third.kind == "live" and third.instance_id == "a/1-uuid"
    skipped = bel.job_runs.query(state=JobRunState.skipped)
    assert len(skipped) == 1
    historical = [d for d in bel.events.query(types=["Delegation"]) if d.data["kind"] == "historical"]
    assert {(d.ref, d.data["delegated_to"]) for d in historical} == {
        (r, first.job_run_id) for r in first.outputs
    }


def test_own_output_live_with_a_sibling_not_live_skips_nothing(bel: BuildEventLog) -> None:
    """A want for a/7 when a/7 is live but its sibling b/7 was tainted: fulfilled by a/7's build alone.
    No job run is skipped (recording "all target partitions already available" would be false)."""
    run = build(bel, spec("a/7"), "v1")
    bel.partitions.taint("b/7", reason="bad rows")
    done = decide(bel, spec("a/7", source="api"))
    assert done.kind == "live" and done.instance_id == "a/7-v1"
    assert bel.job_runs.query(state=JobRunState.skipped) == []
    historical = [(d.ref, d.data["delegated_to"]) for d in bel.events.query(types=["Delegation"])]
    assert historical == [("a/7", run.job_run_id)]
    assert bel.partitions.get("b/7").status is PartitionStatus.tainted  # left for whoever wants it


def test_mixed_availability_executes_and_rebuilds_all_outputs(bel: BuildEventLog) -> None:
    build(bel, spec("a/2"), "old")
    # c/2 is lost: its row is set back to missing, as a rebuild request would see it.
    with bel.writer.begin() as conn:
        conn.execute(s.partitions.update().where(s.partitions.c.ref == "c/2").values(status="missing"))
    again = decide(bel, spec("c/2", source="api"))
    assert again.kind == "execute" and again.outputs == ["a/2", "b/2", "c/2"]
    # While the rebuild runs, and after it fails, the live outputs stay live and readable.
    assert bel.partitions.get("a/2").status is PartitionStatus.live
    assert bel.partitions.get("a/2").building_job_run_id == again.job_run_id
    assert bel.partitions.get("c/2").status is PartitionStatus.building
    bel.job_runs.start(again.job_run_id, 1, "w")
    bel.job_runs.fail(again.job_run_id, "boom")
    assert (
        bel.partitions.get("a/2").status is PartitionStatus.live
        and bel.partitions.get("a/2").instance_id == "a/2-old"
    )
    assert bel.partitions.get("c/2").status is PartitionStatus.failed


def test_a_superseded_attempt_cannot_record_an_outcome(bel: BuildEventLog) -> None:
    from databuild.errors import StaleAttemptError

    run = decide(bel, spec("a/4"))
    bel.job_runs.start(run.job_run_id, 1, "w1")
    bel.job_runs.start(run.job_run_id, 2, "w2")  # attempt 1 lost its heartbeat
    with pytest.raises(StaleAttemptError, match="superseded"):
        bel.job_runs.succeed(
            run.job_run_id, [], [InstanceRef(ref=r, instance_id=f"x-{r}") for r in run.outputs], 1
        )
    with pytest.raises(StaleAttemptError, match="superseded"):
        bel.job_runs.check_current_attempt(run.job_run_id, 1)  # so it must not publish either
    bel.job_runs.check_current_attempt(run.job_run_id, 2)
    bel.job_runs.succeed(
        run.job_run_id, [], [InstanceRef(ref=r, instance_id=f"y-{r}") for r in run.outputs], 2
    )
    assert bel.partitions.get("a/4").instance_id == "y-a/4"
    with pytest.raises(StaleAttemptError, match="has ended"):
        bel.job_runs.check_current_attempt(run.job_run_id, 2)  # e.g. a lost worker still running a failed run


def test_dep_miss_releases_and_failure_fail_locks(bel: BuildEventLog) -> None:
    dep_miss_releases_and_failure_fail_locks(bel)


def dep_miss_releases_and_failure_fail_locks(bel: BuildEventLog) -> None:
    """The scenario, checked step by step (other tests start from the history it leaves): a run for
    a/3 dep-misses and releases its outputs, its retry fails and fail-locks them."""
    run = decide(bel, spec("a/3"))
    bel.job_runs.start(run.job_run_id, 1, "w")
    bel.job_runs.dep_miss(run.job_run_id, ["ext/9", "ext/8"], [])
    assert bel.job_runs.get(run.job_run_id).missing == ["ext/8", "ext/9"]
    assert statuses(bel, 3) == {PartitionStatus.missing}

    retry = decide(bel, spec("a/3"), seq=2)
    bel.job_runs.start(retry.job_run_id, 1, "w")
    bel.job_runs.fail(retry.job_run_id, "boom")
    assert statuses(bel, 3) == {PartitionStatus.failed}
    bel.job_runs.fail(retry.job_run_id, "again")  # a finished run is never changed twice
    assert bel.job_runs.get(retry.job_run_id).reason == "boom"


def check(name: str, severity: str, passed: bool, ref: str = "a/20") -> CheckResult:
    return CheckResult(
        name=name,
        ref=ref,
        severity=CheckSeverity(severity),
        passed=passed,
        message=f"{name} {'ok' if passed else 'bad'}",
        metrics={"rows": 3},
    )


def test_check_results_are_kept_with_their_instance_live_or_not(bel: BuildEventLog) -> None:
    checks_kept_published_and_rechecked(bel)


def checks_kept_published_and_rechecked(bel: BuildEventLog) -> None:
    """The scenario, step by step: a blocking failure's results are kept with the instance it kept from
    going live (and the run fail-locks as any failure); after resolve, the rebuild publishes with its
    results; re-running a failing blocking check on it retires it and fail-locks the partition."""
    run = decide(bel, spec("a/20"))
    kept = [InstanceRef(ref=o, instance_id=f"{o}-bad") for o in run.outputs]
    bel.job_runs.start(run.job_run_id, 1, "w", kept)
    bad = {"a/20": [check("not_null(id)", "blocking", False), check("rows", "warning", True)]}
    assert bel.job_runs.record_checks(run.job_run_id, 1, kept, bad)
    bel.job_runs.fail(run.job_run_id, "CheckFailedError: check not_null(id) of a/20 failed")
    assert statuses(bel, 20) == {PartitionStatus.failed}
    assert bel.partitions.checks_of(["a/20-bad", "b/20-bad"]) == {
        "a/20-bad": sorted(bad["a/20"], key=lambda r: r.name)
    }
    assert not bel.job_runs.record_checks(run.job_run_id, 1, kept, bad)  # the run has ended: nothing recorded
    assert len(bel.events.query(types=["InstanceChecked"])) == 1

    bel.partitions.resolve("a/20")
    rebuild = decide(bel, spec("a/20"), seq=2)
    good = [InstanceRef(ref=o, instance_id=f"{o}-good") for o in rebuild.outputs]
    bel.job_runs.start(rebuild.job_run_id, 1, "w", good)
    passed = {"a/20": [check("not_null(id)", "blocking", True), check("rows", "warning", False)]}
    with pytest.raises(InvalidInputError, match="cannot publish: check not_null"):
        bel.job_runs.succeed(rebuild.job_run_id, [], good, 1, checks=bad)
    bel.job_runs.succeed(rebuild.job_run_id, [], good, 1, checks=passed)
    assert statuses(bel, 20) == {PartitionStatus.live}
    live = bel.partitions.instance("a/20-good")
    assert [(r.name, r.passed) for r in live.checks] == [("not_null(id)", True), ("rows", False)]
    assert bel.partitions.instance("b/20-good").checks == []

    with pytest.raises(InvalidTransitionError, match="not a/20-bad that was checked"):
        bel.partitions.recheck("a/20", "a/20-bad", bad["a/20"])
    recheck = [check("not_null(id)", "blocking", False)]
    assert bel.partitions.recorded_recheck("a/20", "check-run-1") is None
    partition = bel.partitions.recheck("a/20", "a/20-good", recheck, "check-run-1")
    assert partition.status is PartitionStatus.failed
    assert partition.reason == "check not_null(id) of a/20 failed: not_null(id) bad"
    retired = bel.partitions.instance("a/20-good")
    assert retired.status is InstanceStatus.tainted
    assert [(r.name, r.passed) for r in retired.checks] == [("not_null(id)", False), ("rows", False)]
    with pytest.raises(InvalidTransitionError, match="checks re-run on a live instance only"):
        bel.partitions.recheck("a/20", "a/20-good", recheck)
    # A retry of the request that recorded it (its answer lost) gets that answer; another request does not.
    again = bel.partitions.recorded_recheck("a/20", "check-run-1")
    assert again is not None and again.fail_locked and again.instance_id == "a/20-good"
    assert again.results == recheck and again.partition.status is PartitionStatus.failed
    assert bel.partitions.recorded_recheck("a/20", "check-run-2") is None
    assert [p.ref for p in bel.partitions.resolve("a/20")] == [
        "a/20"
    ]  # only a/20: no run fail-locked its siblings


def test_a_metric_that_is_not_a_number_is_stored_as_unknown_on_both_backends(bel: BuildEventLog) -> None:
    """NaN and the infinities have no JSON: one encoding on both backends stores them as null, and the
    build they were measured on publishes (PostgreSQL refused the whole event before)."""
    run = decide(bel, spec("a/21"))
    made = [InstanceRef(ref=o, instance_id=f"{o}-nan") for o in run.outputs]
    bel.job_runs.start(run.job_run_id, 1, "w", made)
    odd = {"share": float("nan"), "ratio": float("inf"), "low": float("-inf"), "rows": 3, "mean": 0.5}
    warned = CheckResult(
        name="odd", ref="a/21", severity=CheckSeverity.warning, passed=False, message="m", metrics=odd
    )
    bel.job_runs.succeed(run.job_run_id, [], made, 1, checks={"a/21": [warned]})
    assert statuses(bel, 21) == {PartitionStatus.live}
    (stored,) = bel.partitions.instance("a/21-nan").checks
    assert stored.metrics == {"share": None, "ratio": None, "low": None, "rows": 3, "mean": 0.5}
    written = " ".join(record.model_dump_json() for record in bel.events.query(job_run_id=run.job_run_id))
    assert '"share":null' in written and "NaN" not in written and "Infinity" not in written


def test_an_input_live_since_the_dep_miss_gets_no_derivative_want(bel: BuildEventLog) -> None:
    """Found by the chaos test: a derivative recorded for an input that went live meanwhile was never
    started (only derivatives of inputs not yet live are), so it stayed `new` with no workflow."""
    waiting = spec("a/61")
    run = decide(bel, waiting)
    bel.job_runs.start(run.job_run_id, 1, "w")
    bel.job_runs.dep_miss(run.job_run_id, ["ext/61", "ext/62"], [])
    bel.partitions.publish_external("ext/61")  # another want's build, or an upstream, made it live meanwhile
    status, derivatives, _ = bel.wants.await_dependencies(
        waiting.want_id, run.job_run_id, ["ext/61", "ext/62"]
    )
    assert status.live == ["ext/61"]
    assert [(d.spec.ref, d.opening) for d in derivatives] == [("ext/62", 0)]
    assert [WantStart.of(w) for w in bel.wants.query(parent_want_id=waiting.want_id)] == derivatives
    # Lineage links each missing input to its own derivative (none for the one that went live).
    links = [(ref, child) for _, _, ref, child in bel.wants.derivatives_of([waiting.want_id])]
    assert links == [("ext/61", None), ("ext/62", derivatives[0].spec.want_id)]


def test_a_derivative_recorded_before_its_input_went_live_is_started_again(bel: BuildEventLog) -> None:
    """Found by the chaos soak: an attempt recorded the derivative and failed to start its workflow
    (Temporal down); by the retry its input was live. The retry must still start it, or it stays
    `new` with no workflow."""
    waiting = spec("a/63")
    run = decide(bel, waiting)
    bel.job_runs.start(run.job_run_id, 1, "w")
    bel.job_runs.dep_miss(run.job_run_id, ["ext/63"], [])
    _, first, _ = bel.wants.await_dependencies(
        waiting.want_id, run.job_run_id, ["ext/63"]
    )  # its start failed
    bel.partitions.publish_external("ext/63")
    status, retried, _ = bel.wants.await_dependencies(waiting.want_id, run.job_run_id, ["ext/63"])
    assert status.live == ["ext/63"] and not status.failed
    assert [d.spec.want_id for d in retried] == [d.spec.want_id for d in first]
    assert retried == first == [WantStart(spec=first[0].spec)]


def test_an_abandoned_run_releases_its_outputs_and_counts_who_waits(bel: BuildEventLog) -> None:
    first, joined = spec("a/6"), spec("b/6", source="api")
    run = decide(bel, first)
    assert decide(bel, joined).job_run_id == run.job_run_id
    bel.job_runs.start(run.job_run_id, 1, "w")
    assert bel.wants.waiting_on(run.job_run_id) == 2
    bel.wants.finish(first.want_id, WantState.canceled, "canceled on request")
    assert bel.wants.waiting_on(run.job_run_id) == 1
    bel.wants.finish(joined.want_id, WantState.expired, "TTL passed")
    assert bel.wants.waiting_on(run.job_run_id) == 0

    bel.job_runs.fail(run.job_run_id, "abandoned", JobRunCause.abandoned)
    abandoned = bel.job_runs.get(run.job_run_id)
    assert abandoned.state is JobRunState.cancelled and abandoned.cause is JobRunCause.abandoned
    assert (
        bel.events.stats().jobs[0].cancelled == 1 and bel.events.stats().jobs[0].success_rate is None
    )  # not a failure
    assert statuses(bel, 6) == {PartitionStatus.missing}  # not fail-locked: the next want builds
    assert decide(bel, spec("a/6", source="dashboard")).kind == "execute"


def test_external_publish_and_its_errors(bel: BuildEventLog) -> None:
    partition, created = bel.partitions.publish_external("ext/5")
    assert created and partition.external and partition.status is PartitionStatus.live
    assert bel.partitions.publish_external("ext/5")[1] is False
    run = decide(bel, spec("a/5"))
    with pytest.raises(InvalidTransitionError, match="being built"):
        bel.partitions.publish_external("b/5")
    assert run.kind == "execute"
    with pytest.raises(NotFoundError):
        bel.wants.get("w-nope")
    with pytest.raises(NotFoundError):
        bel.job_runs.get("jr-nope")


def test_finish_and_sla_flag_are_idempotent(bel: BuildEventLog) -> None:
    w = spec("ext/6")
    bel.wants.register(w)
    bel.wants.mark_sla_missed(w.want_id, datetime(2024, 1, 1, 9, tzinfo=UTC))
    bel.wants.mark_sla_missed(w.want_id, datetime(2024, 1, 1, 9, tzinfo=UTC))
    bel.wants.finish(w.want_id, WantState.expired, "TTL")
    bel.wants.finish(w.want_id, WantState.successful)
    want = bel.wants.get(w.want_id)
    assert want.state is WantState.expired and want.sla_missed
    assert [e.type for e in bel.events.query(want_id=w.want_id)] == [
        "WantCreated",
        "WantSlaMissed",
        "WantExpired",
    ]
    with pytest.raises(InvalidTransitionError):
        bel.wants.finish(w.want_id, WantState.building)


def test_a_finish_from_a_run_older_than_a_retry_changes_nothing(bel: BuildEventLog) -> None:
    """A retry reopens a want as its next opening; a finish or a decision replayed by the run of the
    opening before (its last workflow task run after the reopen) is refused, in the same transaction.
    Only a reopen replaces a run: a decision it never heard of is still its own."""
    w = spec("a/8")
    bel.wants.register(w)
    assert bel.wants.get(w.want_id).opening == 0
    # The old run took three steps, and its workflow task timed out after the third committed: the run
    # never heard of it (its own step is 2), yet its finish is recorded, as no retry came since.
    run = bel.decisions.decide(w.want_id, 3, graph.resolve(w.ref), opening=0)
    assert run.kind == "execute" and bel.wants.decision_seq(w.want_id) == 3
    assert bel.wants.finish(w.want_id, WantState.failed, "input failed", opening=0)[1] is Finished.recorded
    assert bel.wants.finish(w.want_id, WantState.failed, "input failed", opening=0)[1] is Finished.already

    (reopened,) = bel.wants.reopen([w.want_id])
    assert reopened.state is WantState.new and bel.wants.decision_seq(w.want_id) == 4
    assert reopened.opening == bel.wants.get(w.want_id).opening == 1
    stale, finished = bel.wants.finish(w.want_id, WantState.failed, "input failed", opening=0)
    assert finished is Finished.stale and stale.state is WantState.new and stale.opening == 1
    assert bel.wants.get(w.want_id).state is WantState.new
    # Nor does the old run decide: told the want's opening now, with nothing recorded.
    last = bel.events.last_idx()
    assert bel.decisions.decide(w.want_id, 5, graph.resolve(w.ref), opening=0) == Replaced(opening=1)
    assert bel.events.last_idx() == last and bel.wants.decision_seq(w.want_id) == 4
    # The new run decides from the step after the reopen, and its own outcome is recorded.
    assert bel.decisions.decide(w.want_id, 5, graph.resolve(w.ref), opening=1).job_run_id == run.job_run_id
    assert (
        bel.wants.finish(w.want_id, WantState.canceled, "canceled on request", opening=1)[1]
        is Finished.recorded
    )
    # Ended again: still not the old run's to tell.
    assert bel.wants.finish(w.want_id, WantState.failed, "input failed", opening=0)[1] is Finished.stale
    types = [e.type for e in bel.events.query(want_id=w.want_id)]
    assert types.count("WantFailed") == 1 and types[-1] == "WantCanceled"
    assert bel.wants.get(w.want_id).state is WantState.canceled
    before = projection_rows(bel)
    bel.events.rebuild_projections()
    assert projection_rows(bel) == before
    assert bel.wants.get(w.want_id).opening == 1


def test_dependencies_awaited_by_a_run_older_than_a_retry_are_refused(bel: BuildEventLog) -> None:
    """A run of the opening a retry replaced records no wait and derives no want: WantReplacedError, which
    tells it the want's opening now. The new run's wait is recorded."""
    w = spec("a/9")
    bel.wants.register(w)
    run = bel.decisions.decide(w.want_id, 1, graph.resolve(w.ref), opening=0)
    bel.job_runs.start(run.job_run_id, 1, "w")
    bel.job_runs.dep_miss(run.job_run_id, ["ext/9"], [])
    bel.wants.finish(w.want_id, WantState.failed, "input failed", opening=0)
    bel.wants.reopen([w.want_id])
    last = bel.events.last_idx()
    with pytest.raises(WantReplacedError, match="serves opening 0, the want is at 1") as refused:
        bel.wants.await_dependencies(w.want_id, run.job_run_id, ["ext/9"], opening=0)
    assert refused.value.opening == 1
    assert bel.events.last_idx() == last and bel.wants.query(parent_want_id=w.want_id) == []
    assert bel.wants.get(w.want_id).state is WantState.new
    status, started, reopened = bel.wants.await_dependencies(w.want_id, None, ["ext/9"], opening=1)
    assert not status.live and not status.failed and reopened == []
    assert started == [WantStart.of(d) for d in bel.wants.query(parent_want_id=w.want_id)]
    assert [(d.spec.ref, d.opening) for d in started] == [("ext/9", 0)]
    assert bel.wants.get(w.want_id).state is WantState.upstream_building


def test_projections_rebuild_from_events_alone(bel: BuildEventLog) -> None:
    execute_then_active_then_historical_delegation(bel)
    dep_miss_releases_and_failure_fail_locks(bel)
    checks_kept_published_and_rechecked(bel)
    bel.partitions.publish_external("ext/7")
    before = projection_rows(bel)
    replayed = bel.events.rebuild_projections()
    assert replayed == bel.events.last_idx()
    assert projection_rows(bel) == before


def released_together(count: int, work: "Callable[[int], T]") -> list[T]:
    """Run ``work(i)`` on ``count`` threads that all start at the same instant."""
    barrier = threading.Barrier(count)
    results: list[T | None] = [None] * count
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = work(i)
        except BaseException as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return [r for r in results if r is not None]


def distinct_want(ref: str, i: int) -> WantSpec:
    return WantSpec(ref=ref, data_timestamp=datetime(2024, 1, 1, tzinfo=UTC) + timedelta(minutes=i))


def test_concurrent_claims_for_one_partition_execute_once(bel: BuildEventLog) -> None:
    decisions = released_together(16, lambda i: decide(bel, distinct_want("b/20", i)))
    executed = [d for d in decisions if d.kind == "execute"]
    assert len(executed) == 1
    assert {d.job_run_id for d in decisions} == {executed[0].job_run_id}
    assert len(bel.job_runs.query()) == 1
    assert len(bel.events.query(types=["Delegation"], limit=1000)) == 15 * 3


def test_overlapping_multi_output_claims_execute_once(bel: BuildEventLog) -> None:
    refs = ["a/21", "b/21", "c/21"] * 4
    decisions = released_together(len(refs), lambda i: decide(bel, distinct_want(refs[i], i)))
    assert sum(d.kind == "execute" for d in decisions) == 1
    assert len({d.job_run_id for d in decisions}) == 1


def test_decisions_of_one_group_see_each_other_and_commit_together(bel: BuildEventLog) -> None:
    """Group commit (bel.combining): steps decided in one transaction each read what the ones before
    them wrote, their events take consecutive indexes, and replaying the log rebuilds their projections.
    A step that fails takes its group's transaction with it; the combiner then runs each step alone."""
    wants = [distinct_want("b/40", 0), distinct_want("a/40", 1), distinct_want("c/41", 2)]
    for want in wants:
        bel.wants.register(want)
    steps = [Step(w.want_id, 1, graph.resolve(w.ref), DEFAULT_LEASE, None) for w in wants]
    before = bel.events.last_idx()
    verdicts = [v for _, v in bel.decisions._decide_group(steps)]
    assert [v.kind for v in verdicts] == ["execute", "delegate", "execute"]
    assert verdicts[1].job_run_id == verdicts[0].job_run_id != verdicts[2].job_run_id
    assert [e.idx for e in bel.events.query(since_idx=before, limit=100)] == list(
        range(before + 1, bel.events.last_idx() + 1)
    )
    assert not bel.pools.lease_expired(verdicts[0].job_run_id) and not bel.pools.lease_expired(
        verdicts[2].job_run_id
    )
    kept = projection_rows(bel)
    bel.events.rebuild_projections()
    assert projection_rows(bel) == kept

    good = distinct_want("a/43", 0)
    bel.wants.register(good)
    head = bel.events.last_idx()
    group = [
        Step(want_id, 1, graph.resolve("a/43"), DEFAULT_LEASE, None) for want_id in (good.want_id, "nope")
    ]
    with pytest.raises(NotFoundError):
        bel.decisions._decide_group(group)
    assert (
        bel.events.last_idx() == head and bel.wants.get(good.want_id).state is WantState.new
    )  # nothing of it stays


def test_independent_steps_of_a_group_are_read_and_projected_together(bel: BuildEventLog) -> None:
    """Steps of a group that touch no want or partition in common are read in a statement per table for
    all and projected in a few statements for all: a group of 12 sends the database no more than twice
    what one step alone does. Each gets what it would alone, and replaying the log rebuilds the state."""
    wants = [distinct_want(f"a/{200 + i}", i) for i in range(13)]
    for want in wants:
        bel.wants.register(want)
    steps = [Step(w.want_id, 1, graph.resolve(w.ref), DEFAULT_LEASE, None) for w in wants]
    statements: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        statements.append(statement)

    sql_event.listen(bel.writer, "before_cursor_execute", count)
    try:
        alone = bel.decisions._decide_group(steps[:1])
        one = len(statements)
        statements.clear()
        together = bel.decisions._decide_group(steps[1:])
    finally:
        sql_event.remove(bel.writer, "before_cursor_execute", count)
    assert len(statements) <= 2 * one, (one, statements)
    verdicts = [v for _, v in alone + together]
    assert [v.kind for v in verdicts] == ["execute"] * 13
    assert len({v.job_run_id for v in verdicts}) == 13
    for want, verdict in zip(wants, verdicts, strict=True):
        assert bel.wants.get(want.want_id).state is WantState.building
        assert bel.job_runs.get(verdict.job_run_id).outputs == [f"{p}/{want.ref[2:]}" for p in "abc"]
        assert bel.partitions.get(want.ref).building_job_run_id == verdict.job_run_id
        assert not bel.pools.lease_expired(verdict.job_run_id)
    kept = projection_rows(bel)
    bel.events.rebuild_projections()
    assert projection_rows(bel) == kept


def test_claims_on_different_partitions_do_not_block_each_other(bel: BuildEventLog) -> None:
    decisions = released_together(12, lambda i: decide(bel, distinct_want(f"a/{100 + i}", 0)))
    assert all(d.kind == "execute" for d in decisions)
    assert len({d.job_run_id for d in decisions}) == 12


def tail_until(bel: BuildEventLog, stop: threading.Event, seen: list[int]) -> None:
    """Tail the log as a reader does, from the start, until ``stop`` is set and the head is read."""
    cursor = 0
    while not stop.is_set() or cursor < bel.events.last_idx():
        for event in bel.events.query(since_idx=cursor, limit=50):
            seen.append(event.idx)
            cursor = event.idx


def test_a_reader_tailing_the_log_never_skips_a_late_commit(bel: BuildEventLog) -> None:
    stop = threading.Event()
    seen: list[int] = []

    def tail() -> None:
        tail_until(bel, stop, seen)

    reader = threading.Thread(target=tail)
    reader.start()
    released_together(8, lambda t: [bel.wants.register(spec(f"ext/tail-{t}-{i}")) for i in range(10)])
    stop.set()
    reader.join()
    assert seen == list(range(1, bel.events.last_idx() + 1))


def test_seed_scenario_mixed_availability(bel: BuildEventLog) -> None:
    """[A, B, C] with A and C live and B missing: execute the whole job."""
    build(bel, spec("a/30"), "v1")
    with bel.writer.begin() as conn:  # B is lost: as if it were never built
        conn.execute(s.partitions.update().where(s.partitions.c.ref == "b/30").values(status="missing"))
    before = bel.events.last_idx()
    decision = decide(bel, spec("b/30", source="api"))
    assert decision.kind == "execute"
    types = [e.type for e in bel.events.query(since_idx=before)]
    assert types == ["WantCreated", "JobRunQueued", *["PartitionBuilding"] * 3, "WantBuilding"]


def test_seed_scenario_all_available(bel: BuildEventLog) -> None:
    """[A, B, C] all live: a Delegation per partition to the run that built it, then JobRunSkipped."""
    run = build(bel, spec("a/31"), "v1")
    before = bel.events.last_idx()
    decision = decide(bel, spec("b/31", source="api"))
    assert decision.kind == "live"
    events = bel.events.query(since_idx=before)
    assert [e.type for e in events] == [
        "WantCreated",
        "Delegation",
        "Delegation",
        "Delegation",
        "JobRunSkipped",
        "WantSucceeded",
    ]
    assert [(e.ref, e.data["delegated_to"], e.data["kind"]) for e in events[1:4]] == [
        (o, run.job_run_id, "historical") for o in ("a/31", "b/31", "c/31")
    ]
    assert bel.job_runs.query(state=JobRunState.skipped)[0].outputs == ["a/31", "b/31", "c/31"]


def test_seed_scenario_active_build_conflict(bel: BuildEventLog) -> None:
    """[A, B, C] with B under an active build Y: delegate the whole job to Y, no job event."""
    active = decide(bel, spec("b/32"))
    before = bel.events.last_idx()
    decision = decide(bel, spec("a/32", source="api"))
    assert decision.kind == "delegate" and decision.job_run_id == active.job_run_id
    events = bel.events.query(since_idx=before)
    assert [e.type for e in events] == [
        "WantCreated",
        "Delegation",
        "Delegation",
        "Delegation",
        "WantBuilding",
    ]
    assert {(e.data["delegated_to"], e.data["kind"]) for e in events[1:4]} == {(active.job_run_id, "active")}
    assert len(bel.job_runs.query()) == 1


def test_consumer_index_follows_instances(bel: BuildEventLog) -> None:
    feed, _ = bel.partitions.publish_external("ext/40")
    run = decide(bel, spec("a/40"))
    bel.job_runs.start(run.job_run_id, 1, "w")
    reads = [InstanceRef(ref="ext/40", instance_id=feed.instance_id)]
    bel.job_runs.succeed(
        run.job_run_id, reads, [InstanceRef(ref=o, instance_id=f"{o}-v1") for o in run.outputs]
    )
    edges, total = bel.partitions.consumers_of(feed.instance_id or "", limit=2)
    assert total == 3 and len(edges) == 2
    assert {run_id for run_id, _ in edges} == {run.job_run_id}
    assert edges[0][1] == InstanceRef(ref="a/40", instance_id="a/40-v1")
    assert bel.partitions.consumers_of("a/40-v1")[1] == 0
    before = projection_rows(bel)
    bel.events.rebuild_projections()
    assert projection_rows(bel) == before


def test_a_lookup_by_a_list_of_ids_is_one_statement_whatever_its_length(bel: BuildEventLog) -> None:
    """A view's index looks entities up by the hundreds (a page of batch runs names 1,200 instances). The
    list goes as one parameter (an array on PostgreSQL, a JSON document on SQLite), so the statement's text
    (and the driver's parse of it) is the same for every length."""
    refs = [f"ext/{n}" for n in range(30)]
    instances = [bel.partitions.publish_external(ref, f"i-{ref}")[0].instance_id or "" for ref in refs]
    sent: list[str] = []
    sql_event.listen(bel.reader, "before_cursor_execute", lambda *args: sent.append(args[2]))
    for count in (1, 7, 30):
        assert sorted(p.ref for p in bel.partitions.by_ref([*refs[:count], "ext/none"])) == sorted(
            refs[:count]
        )
        assert sorted(i.instance_id for i in bel.partitions.instances_by_id(instances[:count])) == sorted(
            instances[:count]
        )
    assert bel.partitions.by_ref([]) == [] and bel.partitions.instances_by_id([]) == []
    partition_reads = {sql for sql in sent if sql.lstrip().startswith("SELECT partitions.")}
    (read,) = partition_reads
    assert ("ANY" if bel.reader.dialect.name == "postgresql" else "json_each") in read, read


def test_wants_that_took_part_in_a_failed_build_fail_and_newcomers_wait(bel: BuildEventLog) -> None:
    runner, joiner, newcomer = spec("a/50"), spec("b/50", source="api"), spec("c/50", source="dashboard")
    run = decide(bel, runner)
    assert decide(bel, joiner).kind == "delegate"
    bel.job_runs.start(run.job_run_id, 1, "w")
    bel.job_runs.fail(run.job_run_id, "boom")
    # The joiner missed the failure signal and decides again: it took part, so it fails all the same.
    late = bel.decisions.decide(joiner.want_id, 2, graph.resolve(joiner.ref))
    assert late.kind == "final" and late.final_state is WantState.failed and "boom" in (late.reason or "")
    blocked = decide(bel, newcomer)
    assert blocked.kind == "blocked" and blocked.blocked_refs == ["a/50", "b/50", "c/50"]
    assert "databuild resolve" in (blocked.reason or "")


def test_deciding_again_while_following_its_own_run_records_nothing(bel: BuildEventLog) -> None:
    want = spec("a/51")
    run = decide(bel, want)
    before = bel.events.last_idx()
    again = bel.decisions.decide(want.want_id, 2, graph.resolve(want.ref))
    assert again.job_run_id == run.job_run_id and bel.events.last_idx() == before


def test_a_retired_external_ref_fails_its_wants_and_cannot_be_published(bel: BuildEventLog) -> None:
    bel.partitions.skip("ext/52")
    decision = decide(bel, spec("ext/52"))
    assert decision.kind == "final" and "retired" in (decision.reason or "")
    with pytest.raises(InvalidTransitionError, match="retired"):
        bel.partitions.publish_external("ext/52")


def build_layer(bel: BuildEventLog, ref: str, reads: list[str], version: str, source: str = "cli") -> str:
    """Want ``ref``, run its job reading the live instances of ``reads``, publish ``<ref>-<version>``."""
    w = spec(ref, source)
    bel.wants.register(w)
    run = bel.decisions.decide(w.want_id, 1, layers.resolve(ref))
    assert run.kind == "execute", run
    bel.job_runs.start(run.job_run_id, 1, "w")
    inputs = [InstanceRef(ref=r, instance_id=bel.partitions.get(r).instance_id) for r in reads]
    bel.job_runs.succeed(run.job_run_id, inputs, [InstanceRef(ref=ref, instance_id=f"{ref}-{version}")])
    return f"{ref}-{version}"


def test_a_build_on_its_own_previous_instance_is_neither_late_nor_stale(bel: BuildEventLog) -> None:
    """An incremental job (``ctx.read_previous``) reads its own outputs' live instances, a batch's siblings
    among them: the rebuild that supersedes them is no late data for, and no staleness of, itself, while a
    reader of another job that read them is late (the control)."""
    run = build(bel, spec("a/31"), "v1")
    control = spec("down/31")
    bel.wants.register(control)
    other = bel.decisions.decide(control.want_id, 1, layers.resolve("down/31"))
    bel.job_runs.start(other.job_run_id, 1, "w")
    read = [InstanceRef(ref="a/31", instance_id="a/31-v1")]
    bel.job_runs.succeed(other.job_run_id, read, [InstanceRef(ref="down/31", instance_id="down/31-v1")])

    w = spec("a/31", "api")
    bel.wants.register(w)
    judged = Freshness(instance_id="a/31-v1", reasons=(StaleReason(kind=StaleKind.code_changed),))
    rebuild = bel.decisions.decide(w.want_id, 1, graph.resolve("a/31"), fresh=judged)
    assert rebuild.kind == "execute" and rebuild.job_run_id != run.job_run_id, rebuild
    bel.job_runs.start(rebuild.job_run_id, 1, "w")
    previous = [InstanceRef(ref=o, instance_id=f"{o}-v1") for o in rebuild.outputs]
    built = [InstanceRef(ref=o, instance_id=f"{o}-v2") for o in rebuild.outputs]
    bel.job_runs.succeed(rebuild.job_run_id, previous, built)

    assert [(r.ref, r.input_read) for r in bel.lineage.late_readers(list(rebuild.outputs))] == [
        ("down/31", "a/31-v1")
    ]
    reasons = staleness(bel.lineage.live_built("*/31"), {}, [b.instance_id for b in built] + ["down/31-v1"])
    assert list(reasons) == ["down/31-v1"], reasons


def test_taint_marks_the_downstream_stale_and_the_next_want_rebuilds(bel: BuildEventLog) -> None:
    up = build_layer(bel, "up/1", [], "v1")
    mid = build_layer(bel, "mid/1", ["up/1"], "v1")
    down = build_layer(bel, "down/1", ["mid/1"], "v1")
    side = build_layer(bel, "down/2", ["mid/1"], "v1")

    before = bel.events.last_idx()
    impact = bel.partitions.taint_impact("up/1")
    assert bel.events.last_idx() == before  # a preview records nothing
    assert [(d.ref, d.instance_id, d.depth, d.current) for d in impact.downstream] == [
        ("mid/1", mid, 1, True),
        ("down/1", down, 2, True),
        ("down/2", side, 2, True),
    ]
    with pytest.raises(InvalidTransitionError, match="now up/1-v1, not up/1-v0"):
        bel.partitions.taint("up/1", instance_id="up/1-v0")

    result = bel.partitions.taint("up/1", reason="bad clicks", instance_id=up)
    assert result.tainted == [InstanceRef(ref="up/1", instance_id=up)]
    tainted = bel.partitions.get("up/1")
    assert (tainted.status, tainted.generation, tainted.reason) == (PartitionStatus.tainted, 1, "bad clicks")
    assert bel.partitions.instance(up).status is InstanceStatus.tainted
    for instance in (mid, down, side):  # still live and readable, but stale
        assert (
            bel.partitions.instance(instance).status is InstanceStatus.live
            and bel.partitions.instance(instance).stale_cause == up
        )
    assert bel.partitions.get("mid/1").status is PartitionStatus.live
    with pytest.raises(InvalidTransitionError, match="only a live partition can be tainted"):
        bel.partitions.taint("up/1")
    with pytest.raises(NotFoundError):
        bel.partitions.taint("up/404")

    # The same want again is a new generation; it rebuilds, and the old instance keeps its lineage.
    again = WantSpec(ref="up/1", data_timestamp=datetime(2024, 1, 1, tzinfo=UTC), generation=1)
    assert again.want_id != spec("up/1").want_id
    up2 = build_layer(bel, "up/1", [], "v2", source="api")
    assert bel.partitions.get("up/1").instance_id == up2 and bel.partitions.get("up/1").reason is None
    assert (
        bel.partitions.instance(up).status is InstanceStatus.tainted
        and bel.partitions.instance(up2).stale_cause is None
    )
    assert [ir.instance_id for ir, _ in bel.partitions.downstream_closure(up)] == [mid, down, side]
    assert bel.partitions.downstream_closure(up2) == []

    before = projection_rows(bel)
    bel.events.rebuild_projections()
    assert projection_rows(bel) == before


def test_instances_keep_their_facts_and_a_changed_schema_is_flagged(bel: BuildEventLog) -> None:
    """Facts ride on PartitionLive; the flag compares with the instance before (tainted or superseded),
    and both rebuild from the events alone."""

    def publish(source: str, version: str, *columns: tuple[str, str]) -> Instance:
        w = spec("up/7", source)
        bel.wants.register(w)
        run = bel.decisions.decide(w.want_id, 1, layers.resolve("up/7"))
        bel.job_runs.start(run.job_run_id, 1, "w")
        shape = [Column(name=name, type=kind) for name, kind in columns]
        facts = {"up/7": InstanceFacts(rows=len(columns), bytes=10, files=1, columns=shape)}
        bel.job_runs.succeed(
            run.job_run_id, [], [InstanceRef(ref="up/7", instance_id=f"up/7-{version}")], facts=facts
        )
        bel.partitions.taint("up/7")  # so that the next want builds it again
        return bel.partitions.instance(f"up/7-{version}")

    first = publish("cli", "v1", ("id", "bigint"))
    same = publish("api", "v2", ("id", "bigint"))
    wider = publish("dashboard", "v3", ("id", "bigint"), ("name", "string"))
    announced, _ = bel.partitions.publish_external("up/7")  # no facts: nothing to compare
    assert (
        first.facts is not None and first.facts.rows == 1 and [c.name for c in first.facts.columns] == ["id"]
    )
    assert (first.schema_changed, same.schema_changed, wider.schema_changed) == (False, False, True)
    assert wider.facts is not None and wider.facts.columns[1] == Column(name="name", type="string")
    assert bel.partitions.instance(announced.instance_id or "").facts is None
    assert not bel.partitions.instance(announced.instance_id or "").schema_changed
    before = projection_rows(bel)
    bel.events.rebuild_projections()
    assert projection_rows(bel) == before


def test_a_build_that_read_an_instance_tainted_meanwhile_is_stale(bel: BuildEventLog) -> None:
    up = build_layer(bel, "up/2", [], "v1")
    w = spec("mid/2")
    bel.wants.register(w)
    run = bel.decisions.decide(w.want_id, 1, layers.resolve("mid/2"))
    bel.job_runs.start(run.job_run_id, 1, "w")
    bel.partitions.taint("up/2")  # while the job reads it
    bel.job_runs.succeed(
        run.job_run_id, [InstanceRef(ref="up/2", instance_id=up)], [InstanceRef(ref="mid/2", instance_id="m")]
    )
    assert bel.partitions.instance("m").stale_cause == up


def test_taint_cascade_taints_the_current_downstream(bel: BuildEventLog) -> None:
    build_layer(bel, "up/3", [], "v1")
    mid = build_layer(bel, "mid/3", ["up/3"], "v1")
    down = build_layer(bel, "down/3", ["mid/3"], "v1")
    result = bel.partitions.taint("up/3", cascade=True, reason="schema change")
    assert [t.ref for t in result.tainted] == ["up/3", "mid/3", "down/3"]
    for ref, instance in (("mid/3", mid), ("down/3", down)):
        assert bel.partitions.get(ref).status is PartitionStatus.tainted
        assert bel.partitions.instance(instance).status is InstanceStatus.tainted
        assert "built from tainted up/3: schema change" in (bel.partitions.get(ref).reason or "")
    # A cascaded partition that is wanted again rebuilds.
    again = spec("mid/3", "api")
    bel.wants.register(again)
    assert bel.decisions.decide(again.want_id, 1, layers.resolve("mid/3")).kind == "execute"
    before = projection_rows(bel)
    bel.events.rebuild_projections()
    assert projection_rows(bel) == before


GLOB_REFS = ["data/users/a", "data/users/b/c", "data/users_x/a", "data/usersAx/a", "other/x"]
GLOB_CASES = [
    ("data/users/*", {"data/users/a"}),
    ("data/users/**", {"data/users/a", "data/users/b/c"}),
    ("data/users_x/*", {"data/users_x/a"}),  # `_` is literal, not SQL's any-character
    ("data/*/a", {"data/users/a", "data/users_x/a", "data/usersAx/a"}),
    ("**/a", {"data/users/a", "data/users_x/a", "data/usersAx/a"}),
    ("data/user?/a", {"data/users/a"}),
    ("other/x", {"other/x"}),
    ("**", set(GLOB_REFS)),
]


def test_ref_globs_filter_in_sql(bel: BuildEventLog) -> None:
    for ref in GLOB_REFS:
        bel.partitions.publish_external(ref)
    for pattern, expected in GLOB_CASES:
        assert {p.ref for p in bel.partitions.query(ref_glob=pattern)} == expected, pattern
        assert {w for w in GLOB_REFS if compile_glob(pattern).matches(w)} == expected, pattern
    for bad in ["a/<b>", "a/%", "x" * 600, "a/***"]:
        with pytest.raises(InvalidPatternError):
            bel.partitions.query(ref_glob=bad)
    with pytest.raises(InvalidPatternError, match="empty"):
        compile_glob("")
    with pytest.raises(InvalidPatternError, match="33 wildcards; the limit is 32"):
        compile_glob("a/" + "?" * 33)


@pytest.mark.unit
def test_glob_matcher_agrees_with_the_regular_expression_of_its_pattern() -> None:
    """The linear matcher (SQLite, upstream subscriptions) and the regex (PostgreSQL) are one semantics."""
    rng = random.Random(11)
    for _ in range(20_000):
        ref = "".join(rng.choice("ab_/") for _ in range(rng.randint(0, 9)))
        pattern = "".join(
            rng.choice(["a", "b", "_", "/", "*", "**", "?", "**/"]) for _ in range(rng.randint(1, 6))
        )
        if "***" in pattern:
            continue
        glob = compile_glob(pattern)
        assert glob.matches(ref) == (re.fullmatch(glob.regex, ref) is not None), (pattern, ref)


def test_hostile_globs_cost_time_linear_in_the_refs(bel: BuildEventLog) -> None:
    """Patterns that make a backtracking regex take hours on one ref answer at once on 300 (the matcher
    used to run in a SQLite callback holding the GIL: one request froze the web server and worker)."""
    refs = [f"daily_users/2024-01-{n % 28 + 1:02d}/part-{n:05d}-of-the-day" for n in range(300)]
    for ref in refs:
        bel.partitions.publish_external(ref)
    for hostile in [
        "**?**?**?**?**?**?**?**?**?**Z",
        "*?*?*?*?*?*?*?*?*?*y",
        "**?**?**?**?**?**?**?**?**?**0-of-the-day",
    ]:
        elapsed = []
        for _ in range(3):
            started = time.perf_counter()
            found = {p.ref for p in bel.partitions.query(ref_glob=hostile, limit=1000)}
            elapsed.append(time.perf_counter() - started)
        assert found == {r for r in refs if compile_glob(hostile).matches(r)}, hostile
        assert min(elapsed) < 0.1, (hostile, elapsed)
    assert len(found) == 30  # the last pattern matches parts ending in 0


def test_event_cursor_pages_without_gaps_under_concurrent_appends(bel: BuildEventLog) -> None:
    """A follower paging with the cursor sees every matching event exactly once, in order, while
    writers append (refs that match and refs that do not)."""
    where = EventFilter(patterns=["data/users/*"], types=["PartitionLive"])
    stop = threading.Event()
    seen: list[int] = []

    def follow() -> None:
        cursor = 0
        while True:
            done = stop.is_set()
            page = bel.events.page(cursor, 7, where)
            seen.extend(e.idx for e in page.events)
            cursor = page.next_since_idx
            if done and not page.events:
                return

    follower = threading.Thread(target=follow)
    follower.start()
    released_together(
        6,
        lambda i: [
            bel.partitions.publish_external(f"{'data/users' if i % 2 else 'other'}/{i}-{n}")
            for n in range(15)
        ],
    )
    stop.set()
    follower.join(60)
    expected = [e.idx for e in bel.events.page(0, 10_000, where).events]
    assert len(expected) == 45 and seen == expected


def test_event_filters_combine_and_reject_hostile_patterns(bel: BuildEventLog) -> None:
    execute_then_active_then_historical_delegation(bel)
    everything = bel.events.page(0, 1000, EventFilter()).events
    run = next(e.job_run_id for e in everything if e.type == "JobRunQueued")
    by_run = bel.events.page(0, 1000, EventFilter(job_run_ids=[run or ""])).events
    assert by_run and {e.job_run_id for e in by_run} == {run}
    by_label = bel.events.page(0, 1000, EventFilter(job_labels=["<lambda>"], types=["JobRunQueued"])).events
    assert [e.job_run_id for e in by_label] == [e.job_run_id for e in everything if e.type == "JobRunQueued"]
    exact = bel.events.page(0, 1000, EventFilter(refs=["a/1"], types=["PartitionLive"])).events
    assert [e.ref for e in exact] == ["a/1"]
    for hostile in ["a/%", "' OR 1=1 --", "x" * 600, "a/***", "a/[bc]"]:
        with pytest.raises(InvalidPatternError):
            bel.events.page(0, 10, EventFilter(patterns=[hostile]))
    with pytest.raises(ValueError, match="illegal character"):
        EventFilter(refs=["a/<b>"])


# Commit order without one lock held to COMMIT (PostgreSQL) --------------------------------------------


@pytest.fixture
def postgres_bel() -> Iterator[BuildEventLog]:
    reset_postgres(require_postgres())
    log = BuildEventLog.create(POSTGRES_URL)
    yield log
    log.dispose()


def wait_for(condition: Callable[[], bool], seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_command_held_open_does_not_stop_others_committing_and_being_read(
    postgres_bel: BuildEventLog,
) -> None:
    """A transaction on one partition has appended and is held before COMMIT: commands on other
    partitions commit and are read meanwhile (the head is no longer locked from the first append to
    COMMIT), and the held one, committing last, comes after them, seen by a reader tailing the log."""
    from databuild.bel.store import ref_key
    from databuild.domain import events as ev

    bel = postgres_bel
    appended, release, stop = threading.Event(), threading.Event(), threading.Event()
    seen: list[int] = []

    def held() -> None:
        with bel._log.write(ref_key("ext/held")) as tx:
            tx.append(ev.PartitionLive(ref="ext/held", instance_id="i-held", job_run_id=None, external=True))
            appended.set()
            assert release.wait(30)

    def tail() -> None:
        tail_until(bel, stop, seen)

    holder, reader = threading.Thread(target=held), threading.Thread(target=tail)
    holder.start()
    reader.start()
    try:
        assert appended.wait(10)
        others = threading.Thread(
            target=lambda: released_together(4, lambda i: bel.partitions.publish_external(f"ext/free-{i}"))
        )
        others.start()
        others.join(10)
        assert not others.is_alive(), "commands on other partitions waited for the held transaction"
        assert sorted(e.ref or "" for e in bel.events.query()) == [f"ext/free-{i}" for i in range(4)]
        assert bel.events.last_idx() == 4 and bel.partitions.find("ext/held") is None
    finally:
        release.set()
        holder.join(10)
    stop.set()
    reader.join(30)
    assert [(e.idx, e.ref) for e in bel.events.query(since_idx=4)] == [(5, "ext/held")]
    assert seen == [1, 2, 3, 4, 5]


def test_events_committed_but_not_placed_are_unread_until_placed_in_commit_order(
    postgres_bel: BuildEventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While another transaction places events, a writer commits at provisional indexes and then waits
    for its place: its state is committed, but readers do not see its events (nor a later writer's) until
    they are placed, after the head they read and in commit order. Events of a writer that died before
    placing them are placed by the next writer, or when the log is opened."""
    from databuild.bel.engine.postgres import LOCK_SPACE
    from databuild.bel.engine.transaction import WriteTx

    bel = postgres_bel
    bel.partitions.publish_external("ext/first")
    placing = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT").connect()
    placing.execute(text("SELECT pg_advisory_lock(:space, 2)"), {"space": LOCK_SPACE})  # "placing"
    late = threading.Thread(target=bel.partitions.publish_external, args=("ext/late",))
    later = threading.Thread(target=bel.partitions.publish_external, args=("ext/later",))
    try:
        late.start()
        wait_for(lambda: bel.partitions.find("ext/late") is not None)  # committed
        later.start()
        wait_for(lambda: bel.partitions.find("ext/later") is not None)
        assert late.is_alive() and later.is_alive()  # each waits for its events' place
        assert bel.events.last_idx() == 1 and bel.events.query(since_idx=0) == bel.events.query(limit=1)
        assert [e.ref for e in bel.events.page(1, 10, EventFilter()).events] == []
    finally:
        placing.execute(text("SELECT pg_advisory_unlock(:space, 2)"), {"space": LOCK_SPACE})
        late.join(10)
        later.join(10)
    assert [(e.idx, e.ref) for e in bel.events.query()] == [
        (1, "ext/first"),
        (2, "ext/late"),
        (3, "ext/later"),
    ]

    # A writer that dies between its COMMIT and placing its events.
    monkeypatch.setattr(WriteTx, "place", lambda self: None)
    placing.execute(text("SELECT pg_advisory_lock(:space, 2)"), {"space": LOCK_SPACE})
    bel.partitions.publish_external("ext/orphan")
    placing.execute(text("SELECT pg_advisory_unlock(:space, 2)"), {"space": LOCK_SPACE})
    placing.close()
    monkeypatch.undo()
    assert bel.events.last_idx() == 3 and bel.partitions.find("ext/orphan") is not None
    BuildEventLog.create(POSTGRES_URL).dispose()  # opening the log places what is pending
    assert [(e.idx, e.ref) for e in bel.events.query(since_idx=3)] == [(4, "ext/orphan")]


batched = Graph("batched")
batched.job("bat/{n}", label="bat", batch=2)(lambda ctx, partitions: None)
batched.job("one/{n}", label="one", max_running=1)(lambda ctx, n: None)


def decide_in(g: Graph, bel: BuildEventLog, w: WantSpec) -> Verdict:
    bel.wants.register(w)
    return bel.decisions.decide(w.want_id, 1, g.resolve(w.ref))


def test_partitions_join_a_batch_until_it_is_full_or_admitted(bel: BuildEventLog) -> None:
    first, second, third = (decide_in(batched, bel, spec(f"bat/{n}")) for n in (1, 2, 3))
    assert first.kind == "execute" and third.kind == "execute" and third.job_run_id != first.job_run_id
    assert second.kind == "delegate" and second.job_run_id == first.job_run_id and second.batch_full
    run = bel.job_runs.get(first.job_run_id)
    assert run.outputs == ["bat/1", "bat/2"] and run.partitions == [{"n": "1"}, {"n": "2"}]
    assert bel.partitions.get("bat/2").building_job_run_id == first.job_run_id
    # Admitted, a batch takes no more: the next partition starts the next batch.
    assert bel.pools.request_admission(third.job_run_id, {})
    fourth = decide_in(batched, bel, spec("bat/4"))
    assert fourth.kind == "execute" and fourth.job_run_id not in (first.job_run_id, third.job_run_id)
    # Concurrent wants fill batches without overfilling one.
    verdicts = released_together(9, lambda i: decide_in(batched, bel, spec(f"bat/{10 + i}")))
    members = [len(bel.job_runs.get(v.job_run_id).partitions or []) for v in verdicts if v.kind == "execute"]
    # One joined bat/4's batch (it had room for one); the other eight made four full batches.
    assert members == [2, 2, 2, 2]
    assert len(bel.job_runs.get(fourth.job_run_id).partitions or []) == 2


def test_a_pool_admits_the_most_urgent_when_a_slot_frees(bel: BuildEventLog) -> None:
    pool = {"job:one": 1}
    going = decide_in(batched, bel, spec("one/1", "backfill"))
    older = decide_in(batched, bel, spec("one/2", "backfill"))
    urgent = decide_in(batched, bel, spec("one/3"))
    assert bel.pools.request_admission(going.job_run_id, pool)
    assert not bel.pools.request_admission(older.job_run_id, pool)
    assert not bel.pools.request_admission(urgent.job_run_id, pool)
    assert bel.job_runs.get(older.job_run_id).status == "queued (pool full: job:one)"
    assert not bel.pools.have_room(pool)
    assert bel.pools.admitted_not_started() == [
        bel.job_runs.get(going.job_run_id).workflow_id
    ]  # until it starts
    bel.job_runs.start(going.job_run_id, 1, "w", [InstanceRef(ref="one/1", instance_id="i-1")])
    bel.job_runs.succeed(going.job_run_id, [], [InstanceRef(ref="one/1", instance_id="i-1")], 1)
    # The commit that ended the run gave its slot to the interactive run, ahead of the older backfill's.
    assert bel.pools.admitted_not_started() == [bel.job_runs.get(urgent.job_run_id).workflow_id]
    assert bel.pools.request_admission(urgent.job_run_id, pool)
    assert bel.job_runs.get(older.job_run_id).waiting_for_pools == ["job:one"]
    bel.job_runs.fail(urgent.job_run_id, "boom")
    assert bel.pools.request_admission(older.job_run_id, pool)
    before = projection_rows(bel)
    bel.events.rebuild_projections()
    assert projection_rows(bel) == before


def test_concurrent_requests_never_overfill_a_pool(bel: BuildEventLog) -> None:
    runs = [decide_in(batched, bel, spec(f"one/{100 + i}")).job_run_id for i in range(8)]
    admitted = released_together(8, lambda i: bel.pools.request_admission(runs[i], {"shared": 3}))
    assert sum(admitted) == 3


def backfill_of(refs: list[str]) -> tuple[BackfillRequest, list[WantSpec]]:
    request = BackfillRequest(
        pattern="a/{n}", start=datetime(2024, 1, 1, tzinfo=UTC), end=datetime(2024, 1, 2, tzinfo=UTC)
    )
    return request, [spec(ref, "backfill") for ref in refs]


def dep_missed(bel: BuildEventLog, want: WantSpec, missing: str) -> WantSpec:
    """The want's run dep-missed on ``missing``: its derivative want (recorded, not started)."""
    run = decide(bel, want)
    bel.job_runs.start(run.job_run_id, 1, "w")
    bel.job_runs.dep_miss(run.job_run_id, [missing], [])
    _, (derivative,), _ = bel.wants.await_dependencies(want.want_id, run.job_run_id, [missing])
    assert derivative.opening == 0
    return derivative.spec


def test_a_cancel_during_registration_cancels_what_is_registered_after_it(bel: BuildEventLog) -> None:
    request, specs = backfill_of([f"a/{n}" for n in range(80, 84)])
    bel.backfills.record(request, 4, specs[:2])
    step = bel.backfills.advance(request.backfill_id, window=10)
    assert ([WantStart.of(w) for w in step.to_start], step.started) == (
        [WantStart(spec=w) for w in specs[:2]],
        2,
    )
    assert bel.backfills.cancel(request.backfill_id) and not bel.backfills.cancel(request.backfill_id)
    reached = bel.backfills.reach(request.backfill_id)
    assert {w.want_id for w in reached} == {w.want_id for w in specs[:2]}
    cancelled, runs = bel.wants.cancel([w.want_id for w in reached], "its backfill was cancelled")
    assert len(cancelled) == 2 and runs == []
    # The rest of the registration reads the cancel in its own transaction: recorded cancelled.
    bel.backfills.record(request, 4, specs[2:], 2)
    progress = bel.backfills.progress(request.backfill_id)
    assert progress.canceled and progress.finished and progress.by_state == {WantState.canceled: 4}
    assert bel.backfills.reach(request.backfill_id) == []
    assert bel.backfills.advance(request.backfill_id, window=10).to_start == []
    # A retry lifts the cancel, hands back the wants to reopen, and its window starts them again.
    assert {w.want_id for w in bel.backfills.retry(request.backfill_id)} == {w.want_id for w in specs}
    assert not bel.backfills.progress(request.backfill_id).canceled
    bel.wants.reopen([w.want_id for w in specs])
    # Each started for its next opening: a run of the one the cancel ended is replaced.
    assert [WantStart.of(w) for w in bel.backfills.advance(request.backfill_id, window=10).to_start] == [
        WantStart(spec=w, opening=1) for w in specs
    ]
    before = projection_rows(bel)
    bel.events.rebuild_projections()
    assert projection_rows(bel) == before


def test_a_cancel_reaches_the_derivatives_only_its_backfill_needs_and_their_unstarted_runs(
    bel: BuildEventLog,
) -> None:
    request, (mine, shared) = backfill_of(["a/85", "a/86"])
    bel.backfills.record(request, 2, [mine, shared])
    waiting = dep_missed(bel, mine, "ext/85")  # waits for an external publish
    needed = dep_missed(bel, shared, "ext/86")
    outside = spec("a/86", "api")  # an interactive want that needs ext/86 too: the same derivative want
    assert dep_missed(bel, outside, "ext/86").want_id == needed.want_id
    below = layers_below(bel, mine)  # a derivative with a queued run of its own
    assert {w.want_id for w in bel.backfills.reach(request.backfill_id)} == {
        mine.want_id,
        shared.want_id,
        waiting.want_id,
        below.want_id,
    }
    # Everything below the backfill, for a resume to wake, includes the shared derivative.
    assert needed.want_id in {
        w.want_id for w in bel.backfills.reach(request.backfill_id, everything_below=True)
    }

    bel.backfills.cancel(request.backfill_id)
    ids = [w.want_id for w in bel.backfills.reach(request.backfill_id)]
    cancelled, runs = bel.wants.cancel(ids, "its backfill was cancelled")
    assert len(cancelled) == 4 and len(runs) == 1
    (run,) = [r for r in bel.job_runs.query() if r.workflow_id == runs[0]]
    assert run.state is JobRunState.cancelled and run.cause is JobRunCause.abandoned  # before it started
    assert bel.wants.get(needed.want_id).state is WantState.new  # the interactive want still needs it
    # A cancelled want derives nothing more: its inputs are reported failed instead.
    status, derivatives, _ = bel.wants.await_dependencies(mine.want_id, None, ["ext/87"])
    assert derivatives == [] and list(status.failed) == ["ext/87"]
    assert sorted(w.ref for w in bel.wants.query(parent_want_id=mine.want_id, limit=10)) == ["a/88", "ext/85"]


def layers_below(bel: BuildEventLog, parent: WantSpec) -> WantSpec:
    """A derivative of ``parent`` for a/… of another day that has decided and queued its own run."""
    derived = parent.derive("a/88", parent.want_id)
    status, _, _ = bel.wants.await_dependencies(parent.want_id, None, ["a/88"])
    assert not status.failed
    assert decide(bel, derived).kind == "execute"
    return derived


def test_a_derivative_a_cancel_ended_is_reopened_by_a_need_for_its_next_opening(bel: BuildEventLog) -> None:
    """A want that needs a derivative its backfill's cancel ended opens it again, as a retry would: it is
    started for its next opening, the one its projection counts (a run of the one before is replaced)."""
    request, (member,) = backfill_of(["a/95"])
    bel.backfills.record(request, 1, [member])
    derivative = dep_missed(bel, member, "ext/95")
    bel.backfills.cancel(request.backfill_id)
    cancelled, _ = bel.wants.cancel(
        [w.want_id for w in bel.backfills.reach(request.backfill_id)], "its backfill was cancelled"
    )
    assert derivative.want_id in {w.want_id for w in cancelled}
    outside = spec("a/95", "api")
    run = decide(bel, outside)
    bel.job_runs.start(run.job_run_id, 1, "w")
    bel.job_runs.dep_miss(run.job_run_id, ["ext/95"], [])
    status, started, reopened = bel.wants.await_dependencies(outside.want_id, run.job_run_id, ["ext/95"])
    assert not status.failed and started == reopened
    assert [(d.spec.want_id, d.opening) for d in reopened] == [(derivative.want_id, 1)]
    assert bel.wants.get(derivative.want_id).opening == 1
    assert bel.wants.get(derivative.want_id).state is WantState.new
    before = projection_rows(bel)
    bel.events.rebuild_projections()
    assert projection_rows(bel) == before


def test_a_paused_backfill_pauses_the_derivatives_only_it_needs(bel: BuildEventLog) -> None:
    request, (member,) = backfill_of(["a/90"])
    bel.backfills.record(request, 1, [member])
    derivative = dep_missed(bel, member, "ext/90")
    assert decide(bel, derivative).kind == "wait_external"
    bel.backfills.pause(request.backfill_id, True)
    assert bel.backfills.any_paused()
    assert decide(bel, derivative, seq=2).kind == "paused"  # derived before the pause, or after
    assert decide(bel, spec("a/91", "backfill")).kind == "execute"  # not this backfill's
    # An interactive want needs the same input: the derivative goes on.
    outside = spec("a/90", "api")
    assert dep_missed(bel, outside, "ext/90").want_id == derivative.want_id
    assert decide(bel, derivative, seq=3).kind == "wait_external"
    bel.wants.finish(outside.want_id, WantState.canceled, "canceled on request")
    assert decide(bel, derivative, seq=4).kind == "paused"  # ... until it no longer needs it
    bel.backfills.pause(request.backfill_id, False)
    assert not bel.backfills.any_paused()
    assert decide(bel, derivative, seq=5).kind == "wait_external"


def test_a_worker_records_the_versions_it_runs(bel: BuildEventLog) -> None:
    bel.workers.record("host:1", "q", "demo", {"raw_events": "a1", "daily_users": "b1"})
    bel.workers.record("host:2", "q", "demo", {"raw_events": "a1", "daily_users": "b2"})
    bel.workers.record("host:1", "q", "demo", {"raw_events": "a2", "daily_users": "b1"})  # restarted
    found = {w.identity: w.versions for w in bel.workers.versions(["host:1", "host:2", "host:3"])}
    assert found == {
        "host:1": {"raw_events": "a2", "daily_users": "b1"},
        "host:2": {"raw_events": "a1", "daily_users": "b2"},
    }
    assert [e.type for e in bel.events.query(types=["WorkerStarted"])] == ["WorkerStarted"] * 3
    before = projection_rows(bel)
    bel.events.rebuild_projections()
    assert projection_rows(bel) == before


def test_a_table_behind_the_bel_is_found_from_its_recorded_commits(bel: BuildEventLog) -> None:
    """bel.aggregates.tables: what a table holds, as committed, against what the BEL says is live; a prefix
    with LIKE's wildcards (``_``) matches only itself."""
    from tests.bel_sqlite import build
    from tests.bel_sqlite import decide as bel_decide
    from tests.bel_sqlite import spec as bel_spec

    first, other = build(bel, "up/1"), build(bel, "up/2")
    build(bel, "mid/1")
    assert (
        bel.tables.behind("up/", "iceberg") == ["up/1", "up/2"]
        and bel.tables.count_behind("up/", "iceberg") == 2
    )

    def committed(
        snapshot: int, instances: list[InstanceRef], withdrawn: list[str] = (), minute: int = 0
    ) -> None:
        bel.tables.record(
            ev.TableCommitted(
                table="db.a",
                format="iceberg",
                snapshot_id=snapshot,
                committed_at=datetime(2024, 1, 1, 0, minute, tzinfo=UTC),
                instances=instances,
                withdrawn=list(withdrawn),
            )
        )

    committed(1, [first, other])
    assert bel.tables.behind("up/", "iceberg") == [] and bel.tables.held_count("up/", "iceberg") == 2
    assert bel.tables.behind("up/", "hive") == ["up/1", "up/2"]  # another format's table is its own
    assert bel.tables.behind("mid/", "iceberg") == ["mid/1"] and bel.tables.behind("m_d/", "iceberg") == []
    bel.partitions.taint("up/1", reason="late data")
    assert bel.tables.behind("up/", "iceberg") == ["up/1"]  # held, but no longer live
    verdict = bel_decide(bel, bel_spec("up/1", WantSource.api))
    bel.job_runs.start(verdict.job_run_id, 1, "w")
    rebuilt = InstanceRef(ref="up/1", instance_id="up/1@2")
    bel.job_runs.succeed(verdict.job_run_id, [], [rebuilt])
    assert bel.tables.behind("up/", "iceberg") == ["up/1"]  # live, but not held
    committed(2, [rebuilt], minute=1)
    bel.partitions.taint("up/2", reason="bad")
    assert bel.tables.behind("up/", "iceberg") == ["up/2"]
    committed(3, [], withdrawn=["up/2"], minute=2)
    assert bel.tables.behind("up/", "iceberg") == [] and bel.tables.held("db.a", ["up/1", "up/2"]) == {
        "up/1": rebuilt.instance_id
    }
    held = {(h.instance_id, h.snapshot_id, h.removed_at is None) for h in bel.tables.holdings("iceberg")}
    assert held == {
        (first.instance_id, 1, False),
        (other.instance_id, 1, False),
        (rebuilt.instance_id, 2, True),
    }
    replaced = bel.partitions.instance(first.instance_id or "").table
    assert replaced is not None and replaced.removed_at == datetime(2024, 1, 1, 0, 1, tzinfo=UTC)
    bel.tables.record(
        ev.TableCommitFailed(table="db.a", format="iceberg", refs=["up/1"], reason="catalog down")
    )
    (stats,) = bel.tables.stats()
    assert (stats.commits, stats.failures, stats.last_failure) == (3, 1, "catalog down")
