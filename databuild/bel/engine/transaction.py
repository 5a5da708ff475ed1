"""Engines and write transactions of the build event log.

Every command runs in one write transaction that (1) takes per-key locks on the wants, job runs and
partitions it decides about, (2) reads current state, (3) appends events, each projected at once in the
same transaction, and (4) writes the events when it closes, just before COMMIT.

How each backend keeps the index global, gap-free and in commit order is its engine module's
(``bel.engine.sqlite``, ``bel.engine.postgres``); every write transaction holds the writers' lock shared,
and taint and rebuilding projections hold it alone (``alone=True``): no other command is between its reads
and its commit.

Keys are always locked in sorted order, after the writers' lock, so transactions cannot deadlock.
"""

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import Any

from prometheus_client import Histogram
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import ArgumentError

from databuild.bel import projector
from databuild.bel.engine import backend_for, backend_of
from databuild.domain import events as ev
from databuild.errors import ConfigurationError

# Unregistered: each metrics registry (the web app's, a worker's endpoint) registers it, so several apps
# in one process share the one process-local series. Up to the PostgreSQL lock timeout (20 s).
WRITE_SECONDS = Histogram(
    "databuild_bel_write_seconds",
    "BEL write transactions of this process, from asking for the writers' lock to the events placed",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20),
    registry=None,
)


def now() -> datetime:
    return datetime.now(UTC)


def make_engines(url: str) -> tuple[Engine, Engine]:
    """(writer, reader) engines of the log at ``url`` (see each backend's ``engines``). Raises
    ``ConfigurationError`` for a URL SQLAlchemy cannot use (naming no part of it: it may hold a password)."""
    try:
        return backend_for(url).engines(url)
    except (ArgumentError, ImportError, OSError, ValueError) as error:
        # A ValueError quotes the part it could not read, which may be a password.
        why = "its port is not a number" if type(error) is ValueError else str(error)
        raise ConfigurationError(
            f"DATABUILD_DATABASE_URL is not a database URL DataBuild can use ({why}); write it like "
            "sqlite:////abs/path/bel.sqlite or postgresql+psycopg://user@host/db"
        ) from None


def write_lock(url: str) -> AbstractContextManager[object]:
    """What a write transaction of this process holds around BEGIN ... COMMIT."""
    return backend_for(url).write_lock(url)


class WriteTx:
    """One write transaction: key locks first, then events, projected as they are appended and written
    when the transaction closes (so its own statements do not see its events in ``events``)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.at = now()
        self.events: list[ev.Event] = []
        self.backend = backend_of(conn)
        self.provisional: int | None = None  # the first provisional index of its events, if it has them
        self.pools: list[str] = []  # of a write about a run: the pools it locked (``lock_run``)
        self.admitted = False  # whether the runs waiting in those pools were admitted

    def lock(self, *keys: str, alone: bool = False) -> None:
        """Serialise commands about the same wants, job runs or partitions (call once, first). ``alone``:
        wait for every other write transaction to end, and keep new ones out until this one ends."""
        assert not self.events, "lock keys before appending"
        self.backend.lock(self.conn, keys, alone)

    def lock_run(self, job_run_id: str) -> list[str]:
        """Lock a job run and what a write about it decides: its outputs, and the pools it holds a slot of
        with the pools of the runs waiting in them (call once, first). Returns those pools."""
        assert not self.events, "lock keys before appending"
        return self.backend.lock_run(self.conn, job_run_id)

    def append(self, event: ev.Event) -> None:
        projector.apply(self.conn, event, self.at)
        self.events.append(event)

    def extend(self, events: Sequence[ev.Event]) -> None:
        projector.apply_all(self.conn, events, self.at)
        self.events.extend(events)

    def extend_each(self, commands: Sequence[Sequence[ev.Event]]) -> None:
        """Append the events of commands that touch no row in common: to the log command after command,
        to the projections together (``projector.merged``)."""
        projector.apply_all(self.conn, projector.merged(commands), self.at)
        for events in commands:
            self.events.extend(events)

    def close(self) -> None:
        """Write the events (the transaction's last statements before COMMIT)."""
        if not self.events:
            return
        rows: list[dict[str, Any]] = []
        for position, appended in enumerate(self.events):
            want_id, job_run_id, ref = ev.event_keys(appended)
            rows.append(
                {
                    "pos": position,
                    "type": appended.type,
                    "want_id": want_id,
                    "job_run_id": job_run_id,
                    "ref": ref,
                    # One encoding on both backends: the JSON text pydantic writes.
                    "data": appended.model_dump_json(),
                }
            )
        self.provisional = self.backend.write_events(self.conn, rows, self.at)

    def place(self) -> None:
        """After COMMIT: return once the events have their place in the log (when ``close`` could only
        give them provisional indexes)."""
        if self.provisional is not None:
            self.backend.place(self.conn, self.provisional)


@contextmanager
def write(
    engine: Engine,
    lock: AbstractContextManager[object],
    *keys: str,
    alone: bool = False,
    run: str | None = None,
) -> Iterator[WriteTx]:
    """A write transaction holding ``keys`` (see ``WriteTx.lock``), or with ``run`` the locks of a write
    about that job run (``WriteTx.lock_run``; its pools in ``tx.pools``), committed when the block ends
    and then placed in the log. Its duration, lock waits included, is this process's BEL write latency."""
    with WRITE_SECONDS.time(), lock, engine.connect() as conn:
        with conn.begin():
            tx = WriteTx(conn)
            if run is None:
                tx.lock(*keys, alone=alone)
            else:
                tx.pools = tx.lock_run(run)
            yield tx
            tx.close()
        tx.place()


def place_pending(engine: Engine) -> None:
    """Place events that a writer committed but did not live to place."""
    backend_of(engine).place_pending(engine)
