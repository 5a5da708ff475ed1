"""Dashboard pages and ``/metrics`` timed as a browser waits for them: the real app served by uvicorn on
loopback over a BEL, each page asked for by one of its paths at random (``bench_views``)."""

import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from databuild.bel import BuildEventLog
from databuild.client import DataBuild
from databuild.config import Settings
from databuild.graph import Graph
from databuild.testing import free_port
from databuild.web.app import create_app, serving
from databuild.web.context import web_context

PAGE_TARGET_MS = 1_000.0  # every dashboard page, and /metrics


@dataclass
class PageResult:
    page: str
    p50: float
    p95: float
    first: float  # the first call, not counted in p50/p95 (it fills the page's caches, if it has any)
    status: int

    @property
    def verdict(self) -> str:
        return "PASS" if self.status == 200 and self.p95 < PAGE_TARGET_MS else "FAIL"


async def _time_pages(
    url: str, pages: dict[str, Sequence[str]], samples: int, rng: random.Random
) -> list[PageResult]:
    results = []
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        for page, paths in pages.items():
            took: list[float] = []
            status = 200
            for _ in range(samples + 1):
                started = time.perf_counter()
                response = await http.get(rng.choice(paths))
                took.append(time.perf_counter() - started)
                if response.status_code != 200:
                    status = response.status_code
            first, ordered = took[0], sorted(took[1:])
            p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
            found = PageResult(page, statistics.median(ordered) * 1000, p95 * 1000, first * 1000, status)
            results.append(found)
            print(
                f"  page {page}: p50 {found.p50:.0f} ms, p95 {found.p95:.0f} ms, first {found.first:.0f} ms"
                + ("" if status == 200 else f", HTTP {status}"),
                flush=True,
            )
    return results


def time_pages(
    bel: BuildEventLog,
    url: str,
    graph: Graph,
    pages: dict[str, Sequence[str]],
    samples: int,
    rng: random.Random,
) -> list[PageResult]:
    """Serve the dashboard over ``bel`` (whose database is ``url``) and time each page."""

    async def run() -> list[PageResult]:
        with tempfile.TemporaryDirectory() as home:
            settings = Settings(home=Path(home), database_url=url)
            app = create_app(web_context(settings, bel, client=DataBuild(None, bel, graph, settings)))
            async with serving(app, "127.0.0.1", free_port()) as base:
                return await _time_pages(base, pages, samples, rng)

    return asyncio.run(run())
