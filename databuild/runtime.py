"""Process-level tuning for the long-running servers (worker, web)."""

import gc


def settle_heap() -> None:
    """Move what start-up allocated (modules, graph, pydantic schemas) out of the garbage collector's
    way, so a full collection walks only what requests allocate: without this, one request in ~20
    paid a 50-60 ms pause in bench/bench_views.py."""
    gc.collect()
    gc.freeze()
