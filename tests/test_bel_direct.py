"""The SQLite path past SQLAlchemy's execution (bel.engine.direct) and the background checkpoints
(bel.engine.checkpoints): the same values and errors as SQLAlchemy's own path, and a write-ahead log kept
short off the writers' path."""

import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Engine, event, insert, select
from sqlalchemy.exc import IntegrityError

from databuild.bel import BuildEventLog
from databuild.bel import schema as s
from databuild.bel.engine import direct
from databuild.bel.engine.checkpoints import Checkpointer, checkpointer
from databuild.bel.reads.rows import PARTITIONS_AT, WANTS_AND_LINKS
from tests.bel_sqlite import decide, spec

pytestmark = pytest.mark.unit

AT = datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
ROW = {
    "job_run_id": "r1",
    "job_label": "a",
    "state": "queued",
    "outputs": ["a/1", "b/1"],
    "params": {"n": "1"},
    "want_id": None,
    "missing": [],
    "workflow_id": "wf-r1",
    "created_at": AT,
    "updated_at": AT,
}


def statements_sent(engine: Engine) -> list[str]:
    sent: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda _c, _cur, statement, *_: sent.append(statement))
    return sent


def test_rows_written_and_read_directly_are_those_of_sqlalchemy(bel: BuildEventLog) -> None:
    with bel.writer.begin() as conn:
        direct.execute(conn, insert(s.job_runs), ROW)  # defaults left out (attempts, lost) are filled in
        direct.execute(conn, insert(s.job_runs), [{**ROW, "job_run_id": "r2"}, {**ROW, "job_run_id": "r3"}])
        read = direct.rows(conn, select(s.job_runs).where(s.job_runs.c.job_run_id == "r1"), {})
        expected = conn.execute(select(s.job_runs).where(s.job_runs.c.job_run_id == "r1")).mappings().one()
        assert read == [dict(expected)]
        assert read[0]["created_at"] == AT and read[0]["created_at"].tzinfo is UTC  # aware, as SQLAlchemy's
        assert read[0]["outputs"] == ["a/1", "b/1"] and read[0]["lost"] is False and read[0]["attempts"] == 0
        assert (
            direct.scalar(conn, select(s.job_runs.c.job_run_id).where(s.job_runs.c.state == "x"), {}) is None
        )
        count = conn.execute(select(s.job_runs.c.job_run_id)).scalars().all()
        assert sorted(count) == ["r1", "r2", "r3"]


def test_the_decision_reads_see_the_same_rows_on_both_paths(bel: BuildEventLog) -> None:
    want = spec("a/3")
    assert decide(bel, want).kind == "execute"
    reads = (
        (WANTS_AND_LINKS, {"want_ids": [want.want_id]}),
        (PARTITIONS_AT, {"refs": ["a/3", "b/3", "a/4"]}),
    )
    with bel.writer.begin() as conn:
        fast = [direct.rows(conn, statement, parameters) for statement, parameters in reads]
        sent = statements_sent(bel.writer)  # listening: SQLAlchemy's path, so counts see every statement
        slow = [direct.rows(conn, statement, parameters) for statement, parameters in reads]
    assert len(sent) == 2
    assert [[dict(row) for row in rows] for rows in slow] == fast
    assert len(fast[0]) == 1 and fast[0][0]["linked"] == "executed" and len(fast[1]) == 2


def test_a_constraint_broken_directly_is_sqlalchemys_error_and_the_transaction_rolls_back(
    bel: BuildEventLog,
) -> None:
    broken = pytest.raises(IntegrityError, match=r"UNIQUE constraint failed: job_runs\.job_run_id")
    with broken, bel.writer.begin() as conn:
        direct.execute(conn, insert(s.job_runs), {**ROW, "job_run_id": "r9"})
        direct.execute(conn, insert(s.job_runs), {**ROW, "job_run_id": "r9"})
    with bel.reader.connect() as conn:
        assert conn.execute(select(s.job_runs.c.job_run_id)).all() == []


def test_outside_a_transaction_statements_take_sqlalchemys_path(bel: BuildEventLog) -> None:
    sent = statements_sent(bel.writer)
    with bel.writer.connect() as conn:
        assert not conn.in_transaction()
        assert direct.rows(conn, select(s.head.c.last_idx), {}) == [{"last_idx": 0}]
        conn.rollback()
    assert len(sent) == 1


def wants_in_the_database_file(path: Path) -> int:
    """Wants in the database file itself, ignoring its write-ahead log: the commits checkpointed so far."""
    with sqlite3.connect(f"file:{path}?immutable=1", uri=True) as conn:
        return int(conn.execute("SELECT count(*) FROM wants").fetchone()[0])


def test_commits_are_checkpointed_in_the_background_and_the_thread_ends_when_idle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Checkpointer, "IDLE", 0.5)
    monkeypatch.setattr(Checkpointer, "BATCH", 1)  # batches: test_a_checkpoint_waits_for_a_batch_of_commits
    path = tmp_path / "bel.sqlite"
    bel = BuildEventLog.create(f"sqlite:///{path}")
    background = checkpointer(path)
    try:
        for n in range(20):  # far fewer pages than make a commit checkpoint itself
            bel.wants.register(spec(f"a/{n}"))
        deadline = time.monotonic() + 10
        while background.running and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not background.running, "no commit for IDLE seconds: the thread ends"
        assert wants_in_the_database_file(path) == 20
        bel.wants.register(spec("a/20"))  # a commit after the thread ended starts another
        assert background.running
        deadline = time.monotonic() + 10
        while wants_in_the_database_file(path) < 21 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert wants_in_the_database_file(path) == 21
    finally:
        bel.dispose()


def test_a_checkpoint_waits_for_a_batch_of_commits(tmp_path: Path) -> None:
    own = Checkpointer(tmp_path / "bel.sqlite")
    for _ in range(own.BATCH - 1):
        own.committed()
    assert not own.running, "fewer commits than a batch: nothing worth a sync yet"
    own.committed()
    assert own.running
    own.stop()


def test_an_exiting_process_stops_the_checkpoints_after_the_one_running(tmp_path: Path) -> None:
    path = tmp_path / "bel.sqlite"
    bel = BuildEventLog.create(f"sqlite:///{path}")
    try:
        own = Checkpointer(path)  # not the process's: its stop is the one the exit makes
        bel.wants.register(spec("a/1"))
        for _ in range(own.BATCH):
            own.committed()
        assert own.running
        thread = own._thread  # its own (other checkpointers' threads of this process come and go)
        assert thread is not None
        own.stop()
        for _ in range(own.BATCH):  # commits while the process exits start nothing
            own.committed()
        assert not own.running
        assert not thread.is_alive(), "its thread ended"
    finally:
        bel.dispose()
