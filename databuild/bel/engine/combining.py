"""Group commit: concurrent commands of one kind in this process share one write transaction.

A command's client cost on PostgreSQL is mostly per transaction (checkout and ping, BEGIN, key locks,
reserving indexes, COMMIT: round trips the client's one Python process pays for under the GIL). A caller
queues its request; when no group runs, one of the callers whose requests wait takes its own and the
others queued so far (up to ``most`` in all) and runs them in one transaction, and the callers whose requests it ran
return when it ends. Nobody waits for a group to fill: a request that arrives while nothing runs goes at
once, alone. The group's effect is that of its requests run one after another in one transaction (each reads
what the ones before it wrote), committed together.
"""

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

Request = TypeVar("Request")
Result = TypeVar("Result")


@dataclass
class _Slot(Generic[Request, Result]):
    request: Request
    done: bool = False
    result: Result | None = None
    error: BaseException | None = None

    def settle(self, result: Result | None = None, error: BaseException | None = None) -> None:
        self.result, self.error, self.done = result, error, True


class Combiner(Generic[Request, Result]):
    """Runs requests in groups through ``run`` (one transaction for all, results in order). A group that
    fails is run again one request at a time, so a request that fails fails alone and the others still
    commit."""

    def __init__(self, run: Callable[[list[Request]], list[Result]], most: int) -> None:
        self._run_requests, self._most = run, most
        self._pending: list[_Slot[Request, Result]] = []
        self._running = False  # a group runs (outside the condition's lock)
        self._changed = threading.Condition()  # guards the two above; notified when a group ends

    def submit(self, request: Request) -> Result:
        slot: _Slot[Request, Result] = _Slot(request)
        with self._changed:
            self._pending.append(slot)
            # A caller whose request a group ran returns as soon as that group ends (not after the next).
            self._changed.wait_for(lambda: slot.done or not self._running)
            lead = not slot.done
            if lead:  # its own request and the longest waiting others
                self._running = True
                others = [waiting for waiting in self._pending if waiting is not slot]
                group, self._pending = [slot, *others[: self._most - 1]], others[self._most - 1 :]
        if lead:
            try:
                self._run(group)
            finally:
                with self._changed:
                    self._running = False
                    self._changed.notify_all()
        if slot.error is not None:
            raise slot.error
        return slot.result  # type: ignore[return-value]  # done without an error: its result

    def _run(self, group: list[_Slot[Request, Result]]) -> None:
        if len(group) > 1:
            try:
                results = self._run_requests([slot.request for slot in group])
            except Exception:  # each alone below: only the failing one raises
                pass
            else:
                for slot, result in zip(group, results, strict=True):
                    slot.settle(result)
                return
        for slot in group:
            try:
                slot.settle(self._run_requests([slot.request])[0])
            except BaseException as error:  # re-raised in the thread that submitted it
                slot.settle(error=error)
