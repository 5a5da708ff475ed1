"""The recorder: one log's engines and what every aggregate's service of that log shares.

Its reads run on this thread's snapshot when one is open (a view assembled from several lookups sees one
state of the log), or on a write transaction's connection (a command's result read inside it); its writes
go through the one write path (``transaction.write``); async code runs BEL calls on its own threads."""

import asyncio
import functools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

from sqlalchemy import Connection, Select

from databuild.bel.engine import backend_of
from databuild.bel.engine.transaction import WriteTx, make_engines, write, write_lock

P = ParamSpec("P")
R = TypeVar("R")


class Recorder:
    # Threads that run BEL calls for async code (workers, the SDK, the web server), apart from asyncio's
    # default executor, so BEL steps of workflow tasks never queue behind unrelated blocking work. Few:
    # each call is short, and runnable threads contend with the event loop for the GIL (with 16, loop
    # callbacks stretched past 100 ms under a burst of wants; the registration rate was the same).
    THREADS = 4

    def __init__(self, url: str) -> None:
        self.url = url
        self.writer, self.reader = make_engines(url)
        self.write_lock = write_lock(url)
        self.backend = backend_of(self.reader)
        self._pinned = threading.local()  # this thread's snapshot connection, if any
        self._threads = ThreadPoolExecutor(self.THREADS, thread_name_prefix="databuild-bel")

    def dispose(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
        self.writer.dispose()
        self.reader.dispose()

    async def call(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """``fn(*args, **kwargs)`` (a BEL call) on the log's threads, off the event loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, functools.partial(fn, *args, **kwargs))

    @contextmanager
    def write(self, *keys: str, run: str | None = None, alone: bool = False) -> Iterator[WriteTx]:
        """A write transaction holding ``keys`` (and, with ``run``, that job run's own locks)."""
        with write(self.writer, self.write_lock, *keys, run=run, alone=alone) as tx:
            yield tx

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
            self.backend.begin_snapshot(conn)
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

    def all(self, query: Select[Any], params: dict[str, Any] | None = None) -> list[Any]:
        """The rows of ``query`` (with ``params`` bound: a statement built once takes its values so)."""
        # all(): one fetch of every row from the driver (iterating a result fetches them one at a time: 51 ms
        # of a page of 50 batch runs' 75,000 rows at a million instances on PostgreSQL).
        pinned: Connection | None = getattr(self._pinned, "conn", None)
        if pinned is not None:
            return list(pinned.execute(query, params).mappings().all())
        with self._read_alone() as conn:
            return list(conn.execute(query, params).mappings().all())

    def count(self, query: Select[Any]) -> int:
        pinned: Connection | None = getattr(self._pinned, "conn", None)
        if pinned is not None:
            return int(pinned.execute(query).scalar_one())
        with self._read_alone() as conn:
            return int(conn.execute(query).scalar_one())

    @contextmanager
    def _read_alone(self) -> Iterator[Connection]:
        """A connection for one statement (outside a transaction, where the backend can)."""
        with self.reader.connect() as conn:
            self.backend.read_alone(conn)
            yield conn
