"""The web side of ``bench_views``: every dashboard page and ``/metrics``, served by the real app (uvicorn
on loopback) over the bench's log, timed as a browser waits for them.

The graph declares the jobs of the bench's synthetic history, so pages judge staleness as they would
for a user's graph: ``clean``, ``agg`` and ``report`` of the detailed history, and the batched
``hourly`` job of the estate with the version its instances were built at."""

import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx

from databuild.bel import BuildEventLog
from databuild.client import DataBuild
from databuild.config import Settings
from databuild.graph import Graph, JobContext
from databuild.testing import free_port
from databuild.web.app import create_app, serving
from databuild.web.context import web_context

PAGE_TARGET_MS = 1_000.0  # every dashboard page, and /metrics


def never_run(ctx: JobContext, **params: str) -> None:
    raise RuntimeError("the views bench only reads the log its history wrote; it runs no job")


def never_run_batch(ctx: JobContext, partitions: list[dict[str, str]]) -> None:
    raise RuntimeError("the views bench only reads the log its history wrote; it runs no job")


def bench_graph(hourly_version: str, hourly_batch: int) -> Graph:
    graph = Graph("views")
    graph.external("raw/{day}/{part}", "dim/calendar")
    graph.job("clean/{day}/{part}", label="clean")(never_run)
    graph.job("agg/{day}/{part}", label="agg")(never_run)
    graph.job("report/{day}", label="report")(never_run)
    graph.job("hourly/{sensor}/{hour}", label="hourly", batch=hourly_batch, version=hourly_version)(
        never_run_batch
    )
    return graph


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


@dataclass
class Pages:
    """Paths to ask for, by page: one is picked at random per sample."""

    by_page: dict[str, Sequence[str]]


def pages_of(
    *,
    wants: Sequence[str],
    refs: Sequence[str],
    instances: Sequence[str],
    job_runs: Sequence[str],
    backfills: Sequence[str],
) -> Pages:
    def each(prefix: str, keys: Sequence[str], safe: str = "") -> list[str]:
        return [f"{prefix}{quote(key, safe=safe)}" for key in keys[:200]]

    found: dict[str, Sequence[str]] = {
        "/wants": ["/wants", "/wants?offset=500", "/wants?state=successful"],
        "/wants/{id}": each("/wants/", wants),
        "/partitions": ["/partitions", "/partitions?offset=500", "/partitions?status=live"],
        "/partitions/{ref}": each("/partitions/", refs, safe="/"),
        "/instances/{id}": each("/instances/", instances),
        "/job-runs": ["/job-runs", "/job-runs?offset=500", "/job-runs?state=succeeded"],
        "/job-runs/{id}": each("/job-runs/", job_runs),
        "/backfills/{id}": each("/backfills/", backfills),
        "/cost": ["/cost", "/cost?by=day", "/cost?by=partition"],
        "/graph": ["/graph"],
        "/metrics": ["/metrics"],
    }
    return Pages({page: paths for page, paths in found.items() if paths})


async def _time_pages(url: str, pages: Pages, samples: int, rng: random.Random) -> list[PageResult]:
    results = []
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        for page, paths in pages.by_page.items():
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
    bel: BuildEventLog, url: str, graph: Graph, pages: Pages, samples: int, rng: random.Random
) -> list[PageResult]:
    """Serve the dashboard over ``bel`` (whose database is ``url``) and time each page."""

    async def run() -> list[PageResult]:
        with tempfile.TemporaryDirectory() as home:
            settings = Settings(home=Path(home), database_url=url)
            app = create_app(web_context(settings, bel, client=DataBuild(None, bel, graph, settings)))
            async with serving(app, "127.0.0.1", free_port()) as base:
                return await _time_pages(base, pages, samples, rng)

    return asyncio.run(run())
