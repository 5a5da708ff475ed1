"""Group commit (``bel.engine.combining``): requests that queue while a group runs go together in the next one,
each caller gets its own result, and a request that fails fails alone."""

import threading
import time
from collections.abc import Callable

import pytest

from databuild.bel.engine.combining import Combiner

pytestmark = pytest.mark.unit


class Recorder:
    """What a combiner runs, recording the groups that succeeded; every run waits for ``release``."""

    def __init__(self) -> None:
        self.groups: list[list[int]] = []
        self.release = threading.Event()

    def run(self, requests: list[int]) -> list[int]:
        assert self.release.wait(10)
        if negative := [r for r in requests if r < 0]:
            raise ValueError(f"negative: {negative[0]}")
        self.groups.append(requests)
        return [r * 10 for r in requests]


def submitted(
    combiner: Combiner[int, int], requests: list[int]
) -> tuple[dict[int, object], Callable[[], None]]:
    """Submit ``requests`` from a thread each, the first alone before the others; returns what each got
    (result or error) and a join."""
    got: dict[int, object] = {}

    def submit(request: int) -> None:
        try:
            got[request] = combiner.submit(request)
        except ValueError as error:
            got[request] = error

    threads = [threading.Thread(target=submit, args=(r,)) for r in requests]
    threads[0].start()
    deadline = time.monotonic() + 10
    while not combiner._running:  # the first runs, waiting for the release
        assert time.monotonic() < deadline
        time.sleep(0.01)
    for thread in threads[1:]:
        thread.start()
    while len(combiner._pending) < len(requests) - 1:  # the others queued behind it
        assert time.monotonic() < deadline
        time.sleep(0.01)

    def join() -> None:
        for thread in threads:
            thread.join(10)

    return got, join


def test_requests_queued_behind_a_running_one_go_together_and_each_gets_its_own_result() -> None:
    recorder = Recorder()
    combiner = Combiner(recorder.run, most=3)
    got, join = submitted(combiner, [1, 2, 3, 4, 5, 6])
    recorder.release.set()
    join()
    assert got == {r: r * 10 for r in range(1, 7)}
    # The first alone (nothing ran when it came), then the others in queue order, at most 3 a group.
    assert recorder.groups[0] == [1]
    assert sorted(r for group in recorder.groups[1:] for r in group) == [2, 3, 4, 5, 6]
    assert [len(group) for group in recorder.groups[1:]] == [3, 2]


def test_a_failing_request_fails_alone_and_the_rest_of_its_group_still_runs() -> None:
    recorder = Recorder()
    combiner = Combiner(recorder.run, most=16)
    got, join = submitted(combiner, [1, 2, -3, 4])
    recorder.release.set()
    join()
    assert got[1] == 10 and got[2] == 20 and got[4] == 40
    assert isinstance(got[-3], ValueError) and str(got[-3]) == "negative: -3"
    # The group of 2, -3 and 4 failed as a whole and ran again one by one.
    assert recorder.groups[0] == [1] and sorted(recorder.groups[1:]) == [[2], [4]]


def test_a_caller_that_runs_a_group_runs_its_own_request_in_it_however_many_wait() -> None:
    recorder = Recorder()
    combiner = Combiner(recorder.run, most=2)
    got, join = submitted(combiner, [1, 2, 3, 4, 5, 6, 7])
    recorder.release.set()
    join()
    assert got == {r: r * 10 for r in range(1, 8)}  # none returned before its request ran
    assert all(len(group) <= 2 for group in recorder.groups)
