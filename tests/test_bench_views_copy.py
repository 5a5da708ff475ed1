"""bench_views copies its generated history into PostgreSQL with COPY, as SQLite holds the values: the copy must
hold exactly what the same history holds when inserted row by row into SQLite through SQLAlchemy's types
(datetimes, booleans, JSON), and equal a replay of its events."""

from pathlib import Path

from sqlalchemy import select

from bench import bench_views as bv
from databuild.bel import BuildEventLog
from databuild.bel import schema as s
from databuild.testing import POSTGRES_ADMIN_URL, postgres_database
from tests.conftest import require_postgres


def test_the_postgres_copy_of_a_history_holds_what_sqlite_holds_and_what_its_events_say(
    tmp_path: Path,
) -> None:
    require_postgres()
    shape = bv.Shape(events=3000, days=2, per_day=20, hub_readers=10, joiners=10, hourly=200)
    scratch = bv.scratch_log(tmp_path / "history.sqlite")
    bv.generate(scratch, shape, seed=3)
    sqlite = BuildEventLog.create(f"sqlite:///{tmp_path / 'copy.sqlite'}")
    try:
        with postgres_database(POSTGRES_ADMIN_URL, "views_copy", durable=False) as url:
            postgres = BuildEventLog.create(url)
            try:
                bv.copy_log(scratch, sqlite)
                bv.copy_log(scratch, postgres)
                assert bv.row_counts(postgres) == bv.row_counts(sqlite)
                assert events(postgres) == events(sqlite)
                assert bv.snapshot(postgres) == bv.snapshot(sqlite)
                bv.verify(postgres)
            finally:
                postgres.dispose()
    finally:
        sqlite.dispose()
        scratch.dispose()


def events(bel: BuildEventLog) -> list[tuple[object, ...]]:
    with bel.reader.connect() as conn:
        return [tuple(row) for row in conn.execute(select(s.events).order_by(s.events.c.idx))]
