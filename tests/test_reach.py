"""Which derivative wants a backfill's cancel or pause reaches (databuild.domain.reach), without servers:
table-driven cases, and a property against the rule's definition checked by brute force."""

from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from databuild.domain.reach import descendants, reached

pytestmark = pytest.mark.unit

M = frozenset({"m1", "m2"})  # the backfill's wants


@pytest.mark.parametrize(
    ("parents", "open_wants", "expected"),
    [
        # m1 -> d1 -> d2, nobody else: both go with the backfill.
        ({"d1": ["m1"], "d2": ["d1"]}, {"m1", "d1", "d2"}, {"d1", "d2"}),
        # An interactive want x needs d1 too: d1 goes on, and so does what d1 needs.
        ({"d1": ["m1", "x"], "d2": ["d1"]}, {"m1", "x", "d1", "d2"}, set()),
        # ... unless x has ended: an ended want needs nothing.
        ({"d1": ["m1", "x"], "d2": ["d1"]}, {"m1", "d1", "d2"}, {"d1", "d2"}),
        # Two of the backfill's wants share a derivative.
        ({"d1": ["m1", "m2"]}, {"m1", "m2", "d1"}, {"d1"}),
        # The backfill's own wants count whether they are open (a pause) or ended (a cancel).
        ({"d1": ["m1", "m2"]}, {"d1"}, {"d1"}),
        # d3 is needed through d1 (reached) and d2 (needed by x): d2 keeps d3 going.
        (
            {"d1": ["m1"], "d2": ["m1", "x"], "d3": ["d1", "d2"]},
            {"m1", "x", "d1", "d2", "d3"},
            {"d1"},
        ),
        # A parent the backfill reaches counts as the backfill's, however deep.
        (
            {"d1": ["m1"], "d2": ["d1", "m2"], "d3": ["d2", "d1"]},
            {"m1", "m2", "d1", "d2", "d3"},
            {"d1", "d2", "d3"},
        ),
        # A derivative below an outside want only, or nobody's, is not the backfill's to reach.
        ({"d1": ["x"], "d2": ["y"]}, {"x", "d1", "d2"}, set()),
        # Derivatives that need each other (no graph should, but the rule must end): reached together.
        ({"d1": ["m1", "d2"], "d2": ["d1"]}, {"m1", "d1", "d2"}, {"d1", "d2"}),
    ],
)
def test_a_derivative_is_reached_when_only_the_backfill_needs_it(
    parents: dict[str, list[str]], open_wants: set[str], expected: set[str]
) -> None:
    assert reached(M, parents, open_wants) == expected


def test_descendants_are_everything_derived_below_the_roots() -> None:
    parents = {"d1": ["m1"], "d2": ["d1", "x"], "d3": ["x"]}
    assert descendants({"m1"}, parents) == {"d1", "d2"}
    assert descendants(set(), parents) == set()


def qualifies(chosen: set[str], parents: dict[str, set[str]], open_wants: set[str]) -> bool:
    """The rule's definition: each chosen derivative is needed by no open want outside the backfill and
    the chosen set."""
    return all(p not in open_wants or p in M or p in chosen for d in chosen for p in parents.get(d, ()))


NAMES = ["d1", "d2", "d3", "d4", "d5"]


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(NAMES),
        st.sets(st.sampled_from([*NAMES, "m1", "m2", "x", "y"]), min_size=1, max_size=3),
        max_size=5,
    ),
    st.sets(st.sampled_from([*NAMES, "m1", "m2", "x", "y"])),
)
def test_the_reached_set_is_the_largest_that_qualifies(
    parents: dict[str, set[str]], open_wants: set[str]
) -> None:
    below = descendants(M, parents)
    # Sets that qualify are closed under union, so the largest is the union of them all.
    largest: set[str] = set()
    for size in range(len(below) + 1):
        for chosen in combinations(sorted(below), size):
            if qualifies(set(chosen), parents, open_wants):
                largest |= set(chosen)
    assert reached(M, parents, open_wants) == largest
