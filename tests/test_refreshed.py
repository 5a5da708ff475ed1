"""databuild.refreshed: a costly figure computed in the background, never holding up its readers."""

import threading
import time

import pytest

from databuild.errors import NotFoundError
from databuild.refreshed import DUTY, Refreshed

pytestmark = pytest.mark.unit


def test_a_slow_computation_runs_at_most_a_tenth_of_the_time_and_only_its_starter_waits() -> None:
    calls: list[float] = []
    release = threading.Event()

    def compute() -> int:
        calls.append(time.monotonic())
        release.wait(10)
        time.sleep(0.05)
        return len(calls)

    figure = Refreshed(compute, name="test", every=0, patience=0.05)
    started = time.monotonic()
    assert figure.get() is None  # the starter waited its patience, the computation runs on
    assert figure.get() is None  # another reader neither waits nor starts a second one
    assert time.monotonic() - started < 1 and len(calls) == 1
    release.set()
    deadline = time.monotonic() + 10
    while (found := figure.get()) is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert found.value == 1 and len(calls) == 1
    # It took 50 ms at least: no new computation for DUTY (10) times that, however often it is read.
    for _ in range(int(DUTY * 0.05 / 0.01) // 2):
        assert figure.get() == found
        time.sleep(0.01)
    assert len(calls) == 1


def test_a_failed_computation_serves_nothing_rather_than_a_stale_or_wrong_figure() -> None:
    outcomes: list[int | Exception] = [7, NotFoundError("the BEL is gone")]

    def compute() -> int:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    figure = Refreshed(compute, name="test", every=0, patience=5)
    first = figure.get()
    assert first is not None and first.value == 7
    # The next computation is due DUTY times the first's duration later: a loaded machine's is longer.
    deadline = time.monotonic() + 10
    while outcomes:  # until a read starts the next computation (and waits for it: it fails at once)
        assert time.monotonic() < deadline
        served = figure.get()
        time.sleep(0.01)
    assert served is None and figure.get() is None
