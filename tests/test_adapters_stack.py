"""The CLI as an adapter over the SDK on the real stack: `databuild want --wait` follows a want's tree to
its fulfillment (the adapters' rules without a server: tests/test_adapters.py)."""

from tests.conftest import cli


async def test_want_wait_shows_the_progress_of_the_tree_then_its_fulfillment(make_stack) -> None:  # type: ignore[no-untyped-def]
    """`databuild want --wait` without a terminal prints the last progress view, then the tree."""
    stack = await make_stack(graph="tests.graphs:chain")
    done = await cli(stack, "want", "derived/7", "--wait")
    assert done.returncode == 0, done.stderr
    out = " ".join(done.stdout.split())
    assert "want derived/7 [successful]" in out
    assert "derivative wants: 1 successful" in out and "job runs: 1 dep_miss, 2 succeeded" in out
    assert "want base/7 [successful]" in out  # the fulfillment tree
