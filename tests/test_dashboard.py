"""The dashboard in a real headless Chromium (Debian's package, driven by Playwright), over the demo."""

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from playwright.async_api import Browser, Locator, Page, async_playwright
from pydantic import SecretStr

from databuild.models import PartitionStatus, WantState
from databuild.testing import free_port
from databuild.views.lineage import want_view
from databuild.web import create_app, serving, web_context
from tests.conftest import DemoRun, Stack
from tests.helpers import lake, until
from tests.test_dashboard_pages import HOSTILE, UI, by_status

pytestmark = pytest.mark.slow

ARTIFACTS = Path(os.environ.get("DATABUILD_TEST_ARTIFACTS", Path(__file__).parent.parent / "test-artifacts"))


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("Debian's chromium is missing; `make install` installs it (apt-get install chromium)")
    return found


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as p:
        launched = await p.chromium.launch(
            executable_path=chromium(),
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-background-networking",
            ],
        )
        yield launched
        await launched.close()


async def text(page: Page | Locator, selector: str) -> str:
    return " ".join((await page.locator(selector).inner_text()).split())


async def test_browse_from_the_demo_want_to_a_partition_and_its_builder(
    demo_run: DemoRun, browser: Browser
) -> None:
    stack, want = demo_run.stack, demo_run.want
    await asyncio.to_thread(ARTIFACTS.mkdir, parents=True, exist_ok=True)
    app = create_app(web_context(stack.settings, stack.bel, UI))
    async with serving(app, "127.0.0.1", free_port()) as base:
        page = await browser.new_page(viewport={"width": 1400, "height": 1800})
        await page.goto(f"{base}/wants/{want.want_id}")
        assert "daily_summary/2024-01-07" in await page.title()
        tree = await text(page, "ul.tree")
        assert tree.count("triggered by dep-miss") == 14 and "2 runs: dep_miss → succeeded" in tree
        temporal = page.locator("a.temporal").first
        assert await temporal.get_attribute(
            "href"
        ) == f"{UI}/namespaces/{stack.settings.namespace}/workflows/" + quote(want.workflow_id, safe="")
        await page.screenshot(path=str(ARTIFACTS / "dashboard-want.png"), full_page=True)

        # Follow the link to a partition, then to the job run that built it.
        await page.locator("a.partition:visible", has_text="daily_users/2024-01-05").first.click()
        await page.wait_for_url("**/partitions/daily_users/2024-01-05")
        assert "raw_events/2024-01-05" in await text(page, "#upstream")
        assert "daily_summary/2024-01-07" in await text(page, "#downstream")
        live = stack.bel.partitions.get("daily_users/2024-01-05")
        assert (live.instance_id or "")[:8] in await text(page, "#focus")
        await page.screenshot(path=str(ARTIFACTS / "dashboard-partition.png"), full_page=True)

        await page.locator("#built-by a.job-run").click()
        await page.wait_for_url(f"**/job-runs/{live.built_by}")
        assert await text(page, "#job-label") == "daily_users"
        raw = stack.bel.partitions.get("raw_events/2024-01-05")
        assert f"raw_events/2024-01-05 uuid:{(raw.instance_id or '')[:8]}" in await text(page, "#reads")
        assert f"daily_users/2024-01-05 uuid:{(live.instance_id or '')[:8]}" in await text(page, "#writes")
        assert "queued" in await text(page, "#history") and "succeeded" in await text(page, "#history")
        await page.screenshot(path=str(ARTIFACTS / "dashboard-job-run.png"), full_page=True)

        # "Want this partition": registers a dashboard want, which the live partition fulfils at once.
        await page.goto(f"{base}/partitions/raw_events/2024-01-04")
        await page.locator("#want-this").click()
        await page.wait_for_url("**/wants/w-*")
        for _ in range(50):
            if "successful" in await text(page, "h1"):
                break
            await asyncio.sleep(0.2)
            await page.reload()
        assert "raw_events/2024-01-04" in await text(page, "h1") and "successful" in await text(page, "h1")
        assert "dashboard" in await text(page, "dl.facts")

        # A hostile ref in the form is shown as text in the error, and nothing runs.
        await page.goto(f"{base}/wants")
        await page.fill("input[name=ref]", HOSTILE)
        await page.click("#want-form button")
        await page.wait_for_selector("#form-error")
        assert "<script>" in await text(page, "#form-error")
        assert await page.evaluate("window.__pwned") is None
        await page.close()


# The graph page, a want's timeline and the operator actions ------------------------------------------


async def test_the_graph_page_and_a_want_timeline_in_a_browser(demo_run: DemoRun, browser: Browser) -> None:
    stack, want = demo_run.stack, demo_run.want
    await asyncio.to_thread(ARTIFACTS.mkdir, parents=True, exist_ok=True)
    app = create_app(web_context(stack.settings, stack.bel, UI))
    async with serving(app, "127.0.0.1", free_port()) as base:
        page = await browser.new_page(viewport={"width": 1400, "height": 1000})
        await page.goto(f"{base}/graph")
        for job in stack.graph.jobs:
            assert await page.locator(f'#graph g.node.job[data-job="{job.label}"]').count() == 1
            row = page.locator(f'#jobs tr[data-job="{job.label}"]')
            assert f"{stack.settings.job_attempts} DATABUILD_JOB_ATTEMPTS" in await text(row, "td.attempts")
            assert "session DATABUILD_EXECUTOR" in await text(row, "td.executor")
        for pattern in stack.graph.patterns:
            assert await page.locator(f'#graph g.node.pattern[data-pattern="{pattern.text}"]').count() == 1
            row = page.locator(f'#patterns tr[data-pattern="{pattern.text}"]')
            expected = by_status(stack.bel, pattern.glob)
            for status in PartitionStatus:
                shown = await text(row, f'td[data-status="{status.value}"]')
                assert shown == str(expected.get(status, "")), (pattern.text, status)
        # The demo discovers its inputs at run time: the edges are what the latest runs read.
        for source, target in [("raw_events/{date}", "daily_users"), ("daily_users/{date}", "weekly_rollup")]:
            edge = f'#graph path.edge.input[data-source="pattern:{source}"][data-target="job:{target}"]'
            assert await page.locator(edge).count() == 1
        await page.locator("#graph").screenshot(path=str(ARTIFACTS / "dashboard-graph.png"))
        await page.screenshot(path=str(ARTIFACTS / "dashboard-graph-page.png"), full_page=True)

        # The want's timeline: one bar per job run of its tree, oldest first.
        view = want_view(stack.bel, want.want_id)
        run_ids = {link.job_run_id for n in view.data.nodes.values() for g in n.job_runs for link in g.runs}
        runs = sorted(
            (view.index.job_runs[i] for i in run_ids),
            key=lambda r: (r.created_at, r.started_at or r.created_at, r.job_run_id),
        )
        await page.goto(f"{base}/wants/{want.want_id}")
        bars = page.locator("#timeline g.bar")
        assert [await bar.get_attribute("data-job-run") for bar in await bars.all()] == [
            r.job_run_id for r in runs
        ]
        assert len(runs) == 23  # the discovering demo: 15 runs that build, 8 that dep-miss
        assert await page.locator("#timeline g.bar.state-dep_miss rect.ran").count() == 8
        assert await page.locator("#want-actions").count() == 0  # an ended want has no actions
        await page.locator("figure.timeline").screenshot(path=str(ARTIFACTS / "dashboard-want-timeline.png"))
        await page.close()


TOKEN = "dashboard-test-token-0123456789"


async def test_operators_cancel_retry_resolve_skip_and_taint_from_the_dashboard(
    make_stack: Callable[..., Awaitable[Stack]], browser: Browser
) -> None:
    """With tokens configured the forms need one: refused (nothing recorded) until the browser signs in."""
    stack = await make_stack(graph="tests.graphs:flaky", job_attempts=1)
    failing = await stack.db.want("fails/1")
    waiting = await stack.db.want("input/5")  # external: waits for a publish that never comes
    session = stack.parts.spark.session()
    await asyncio.to_thread(session.range(3).write.parquet, str(lake(stack.settings) / "input" / "2"))
    await stack.db.publish("input/2")  # its data, then its announcement
    pair = await stack.db.want("left/2")  # reads input/2, builds left/2 and right/2
    assert (await stack.db.wait(failing)).state is WantState.failed
    assert (await stack.db.wait(pair)).state is WantState.successful
    await until(lambda: stack.bel.wants.get(waiting.want_id).state is WantState.upstream_building)
    assert stack.bel.partitions.get("fails/1").status is PartitionStatus.failed

    settings = stack.settings.model_copy(update={"api_tokens": SecretStr(f"ops={TOKEN}")})
    app = create_app(web_context(settings, stack.bel, UI, client=stack.db))
    async with serving(app, "127.0.0.1", free_port()) as base:
        page = await browser.new_page()
        page.on("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))  # the confirm()s

        async def flash_after(selector: str) -> str:
            async with page.expect_navigation():
                await page.click(selector)
            return await text(page, "#flash") if await page.locator("#flash").count() else ""

        before = stack.bel.events.last_idx()
        await page.goto(f"{base}/partitions/fails/1")
        await page.click("#resolve")
        assert "sign in at /sign-in" in await text(page, "#error")  # refused before anything happened
        assert (
            stack.bel.events.last_idx() == before
            and stack.bel.partitions.get("fails/1").status is PartitionStatus.failed
        )
        await page.goto(f"{base}/sign-in?next=/partitions/fails/1")
        await page.fill("input[name=token]", TOKEN)
        assert await flash_after("#sign-in") == "signed in as ops"

        # Resolve the fail-lock, then retire the partition.
        assert "resolved fails/1" in await flash_after("#resolve")
        assert stack.bel.partitions.get("fails/1").status is not PartitionStatus.failed
        assert "fails/1 retired" in await flash_after("#skip")
        assert stack.bel.partitions.get("fails/1").status is PartitionStatus.skipped

        # Retry an open want (it decides again), then cancel it.
        await page.goto(f"{base}/wants/{waiting.want_id}")
        decided = stack.bel.wants.decision_seq(waiting.want_id)
        assert "decides again now" in await flash_after("#retry")
        await until(lambda: stack.bel.wants.decision_seq(waiting.want_id) > decided, seconds=30)
        assert "asked want input/5 to stop" in await flash_after("#cancel")
        await until(lambda: stack.bel.wants.get(waiting.want_id).state is WantState.canceled, seconds=30)

        # Taint shows the impact first; confirming taints the previewed instance and, with cascade, its readers.
        await page.goto(f"{base}/partitions/input/2")
        await page.click("#taint")
        await page.wait_for_url("**/taint/input/2")
        impact = await text(page, "#impact")
        assert "left/2" in impact and "right/2" in impact
        assert "2 downstream instance(s) stale, 2 of them current" in await text(page, "#impact-summary")
        await page.fill("input[name=reason]", "bad feed")
        await page.check("#cascade")
        tainted = await flash_after("#confirm-taint")
        assert tainted.startswith("tainted") and all(
            ref in tainted for ref in ("input/2", "left/2", "right/2")
        )
        for ref in ("input/2", "left/2", "right/2"):
            assert stack.bel.partitions.get(ref).status is PartitionStatus.tainted
        assert stack.bel.partitions.get("input/2").reason == "bad feed"
        await page.close()

    # Without tokens the forms answer loopback clients only.
    open_app = create_app(web_context(stack.settings, stack.bel, UI, client=stack.db))
    remote = TestClient(open_app, base_url="http://localhost:8000", client=("192.0.2.7", 50000))
    refused = remote.post(f"/wants/{failing.want_id}/retry")
    assert refused.status_code == 401 and "loopback clients only" in refused.text
