"""SQLite WAL checkpoints in a thread of their own, off the writers' path.

A SQLite commit appends the pages it changed to the write-ahead log; a checkpoint copies them into the
database file and syncs both. Left to SQLite, the commit that fills the log past ``wal_autocheckpoint``
pages runs the checkpoint itself, holding the write lock: with the BEL's many small commits that was
about half of what a decision's commit cost (a tenth of a second every few hundred decisions, mostly the
syncs). Here a thread of the writing process checkpoints passively after every ``BATCH`` commits (SQLite
lets writers append meanwhile, and the driver lets go of the GIL while it works), so the commit that
reaches the limit finds the log already copied and synced but for its tail. That commit's own checkpoint
still runs, and is what lets the next writer start the log from its beginning again: a passive checkpoint
racing writers never copies the last frames in time to do that.

The thread ends when no batch has come for ``IDLE`` seconds (the next batch starts another), and when the
process exits, after the checkpoint it may be running."""

import atexit
import logging
import sqlite3
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)


class Checkpointer:
    """Checkpoints one database file after its writers' commits (``committed``)."""

    # Commits between checkpoints: a few thousand pages copied and synced at a time (a commit writes about
    # 35), and none of a process that commits a little now and then (the tests: a sync costs about 1 ms).
    BATCH = 64
    IDLE = 5.0  # seconds without a batch of commits before the thread ends
    # Seconds between checkpoints: enough commits to copy each time, and few enough wakes that the thread
    # rarely takes the GIL from the writers (woken by every commit, it slowed them by a third).
    PAUSE = 0.02

    def __init__(self, path: Path) -> None:
        self._path = path
        self._commits = 0  # since the last batch (counted loosely: an increment lost to a race is harmless)
        self._wake = threading.Event()  # set by a batch of commits the thread has not checkpointed yet
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()  # over starting and ending the thread
        self._failed = False  # after an error: the commits' own checkpoints bound the log
        self._stopped = False  # the process is exiting

    @property
    def running(self) -> bool:
        return self._thread is not None

    def committed(self) -> None:
        self._commits += 1
        if self._commits < self.BATCH:
            return
        self._commits = 0
        self._wake.set()
        # Read without the guard: a thread that is ending takes the guard, then sees the wake.
        if self._thread is None and not self._failed:
            with self._guard:
                if self._thread is None and not self._failed and not self._stopped:
                    self._thread = threading.Thread(target=self._run, name="bel-checkpoints", daemon=True)
                    self._thread.start()

    def _run(self) -> None:
        try:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False, timeout=20)
        except sqlite3.Error as error:
            self._end(error)
            return
        try:
            while self._waited():
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                time.sleep(self.PAUSE)
        except sqlite3.Error as error:
            self._end(error)
        finally:
            conn.close()

    def _waited(self) -> bool:
        """Wait for a batch of commits: True when one came, False (and the thread is over) after ``IDLE``
        seconds without."""
        while not self._wake.wait(self.IDLE):
            with self._guard:
                if not self._wake.is_set():
                    self._thread = None
                    return False
        self._wake.clear()
        return not self._stopped

    def stop(self) -> None:
        """End the thread after the checkpoint it may be running (the process exits)."""
        with self._guard:
            self._stopped, thread = True, self._thread
        self._wake.set()
        if thread is not None:
            thread.join(timeout=10)
            with self._guard:
                self._thread = None

    def _end(self, error: sqlite3.Error) -> None:
        log.warning(
            "checkpointing %s in the background stopped (commits checkpoint it): %s", self._path, error
        )
        with self._guard:
            self._thread, self._failed = None, True


_CHECKPOINTERS: dict[Path, Checkpointer] = {}
_GUARD = threading.Lock()


@atexit.register
def _stop_all() -> None:
    with _GUARD:
        running = list(_CHECKPOINTERS.values())
    for each in running:
        each.stop()


def checkpointer(path: Path) -> Checkpointer:
    """The process's checkpointer of the database file at ``path``."""
    key = path.resolve()
    with _GUARD:
        return _CHECKPOINTERS.setdefault(key, Checkpointer(key))
