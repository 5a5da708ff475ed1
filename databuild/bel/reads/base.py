"""What every read of the build event log's projections shares: an indexed lookup on this thread's
snapshot (or a write transaction's connection, for a command's result), and the threads BEL calls run
on for async code."""

import asyncio
import functools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

from sqlalchemy import Connection, Engine, Select

from databuild.bel.engine import backend_of

P = ParamSpec("P")
R = TypeVar("R")


class ReadBase:
    """Reads of the projections, each an indexed lookup (on this thread's snapshot, if one is open)."""

    # Threads that run BEL calls for async code (workers, the SDK, the web server), apart from asyncio's
    # default executor, so BEL steps of workflow tasks never queue behind unrelated blocking work. Few:
    # each call is short, and runnable threads contend with the event loop for the GIL (with 16, loop
    # callbacks stretched past 100 ms under a burst of wants; the registration rate was the same).
    THREADS = 4

    def __init__(self, reader: Engine) -> None:
        self.reader = reader
        self._pinned = threading.local()  # this thread's snapshot connection, if any
        self._backend = backend_of(reader)
        self._threads = ThreadPoolExecutor(self.THREADS, thread_name_prefix="databuild-bel")

    async def call(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """``fn(*args, **kwargs)`` (a BEL call) on the log's threads, off the event loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, functools.partial(fn, *args, **kwargs))

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Run the enclosed reads on one connection in one read transaction: a view assembled from
        several lookups then sees one state of the log, and costs one connection checkout."""
        if getattr(self._pinned, "conn", None) is not None:
            yield
            return
        with self.snapshot_connection() as conn, self.reading_on(conn):
            yield

    @contextmanager
    def snapshot_connection(self) -> Iterator[Connection]:
        """A connection in a read transaction that sees one state of the log."""
        with self.reader.connect() as conn:
            self._backend.begin_snapshot(conn)
            with conn.begin():
                yield conn

    @contextmanager
    def reading_on(self, conn: Connection) -> Iterator[None]:
        """Run this thread's reads on ``conn`` (a write transaction's: a command's result read inside it)."""
        before = getattr(self._pinned, "conn", None)
        self._pinned.conn = conn
        try:
            yield
        finally:
            self._pinned.conn = before

    def _all(self, query: Select[Any], params: dict[str, Any] | None = None) -> list[Any]:
        """The rows of ``query`` (with ``params`` bound: a statement built once takes its values so)."""
        # all(): one fetch of every row from the driver (iterating a result fetches them one at a time: 51 ms
        # of a page of 50 batch runs' 75,000 rows at a million instances on PostgreSQL).
        pinned: Connection | None = getattr(self._pinned, "conn", None)
        if pinned is not None:
            return list(pinned.execute(query, params).mappings().all())
        with self._read_alone() as conn:
            return list(conn.execute(query, params).mappings().all())

    def _count(self, query: Select[Any]) -> int:
        pinned: Connection | None = getattr(self._pinned, "conn", None)
        if pinned is not None:
            return int(pinned.execute(query).scalar_one())
        with self._read_alone() as conn:
            return int(conn.execute(query).scalar_one())

    @contextmanager
    def _read_alone(self) -> Iterator[Connection]:
        """A connection for one statement (outside a transaction, where the backend can)."""
        with self.reader.connect() as conn:
            self._backend.read_alone(conn)
            yield conn
