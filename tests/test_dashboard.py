"""The dashboard in a real headless Chromium (Debian's package, driven by Playwright), over the demo."""

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from playwright.async_api import Browser, Page, async_playwright

from databuild.bel import BuildEventLog
from databuild.config import Settings
from databuild.graph import Graph
from databuild.models import WantSpec, WantState
from databuild.testing import free_port
from databuild.web import create_app, serving, web_context
from tests.conftest import DemoRun

pytestmark = pytest.mark.slow

ARTIFACTS = Path(os.environ.get("DATABUILD_TEST_ARTIFACTS", Path(__file__).parent.parent / "test-artifacts"))
UI = "http://127.0.0.1:8233"
HOSTILE = """<script>window.__pwned=1</script>"'&<b>"""


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


async def text(page: Page, selector: str) -> str:
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
        live = stack.bel.partition("daily_users/2024-01-05")
        assert (live.instance_id or "")[:8] in await text(page, "#focus")
        await page.screenshot(path=str(ARTIFACTS / "dashboard-partition.png"), full_page=True)

        await page.locator("#built-by a.job-run").click()
        await page.wait_for_url(f"**/job-runs/{live.built_by}")
        assert await text(page, "#job-label") == "daily_users"
        raw = stack.bel.partition("raw_events/2024-01-05")
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


def test_hostile_labels_and_reasons_render_as_text(tmp_path: Path) -> None:
    """Job labels come from user code and taint reasons from operators: both are escaped everywhere."""
    graph = Graph("hostile")

    @graph.job("h/{n}", label=HOSTILE)
    def hostile(ctx: object, n: str) -> None:  # pragma: no cover - never run
        raise AssertionError

    settings = Settings(home=tmp_path)
    bel = BuildEventLog.create(settings.database_url)
    from datetime import UTC, datetime

    spec = WantSpec(ref="h/1", data_timestamp=datetime(2024, 1, 1, tzinfo=UTC))
    bel.register_want(spec)
    decision = bel.decide(spec.want_id, 1, graph.resolve("h/1"))
    assert decision.job_run_id is not None
    bel.start_job_run(decision.job_run_id, 1, "w")
    bel.fail_job_run(decision.job_run_id, HOSTILE)
    bel.finish_want(spec.want_id, WantState.failed, reason=HOSTILE)
    app = create_app(web_context(settings, bel, UI))
    with TestClient(app, base_url="http://localhost:8000", client=("127.0.0.1", 50000)) as client:
        for path in (
            "/wants",
            f"/wants/{spec.want_id}",
            "/job-runs",
            f"/job-runs/{decision.job_run_id}",
            "/partitions/h/1",
        ):
            page = client.get(path)
            assert page.status_code == 200, path
            assert "<script>window.__pwned" not in page.text, path
            assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in page.text, path
        missing = client.get("/wants/" + quote("<img src=x onerror=alert(1)>", safe=""))
        assert missing.status_code == 404 and "<img" not in missing.text and "&lt;img src=x" in missing.text
        bad = client.get("/partitions/h/1", params={"fan_out": "lots"})
        assert bad.status_code == 400 and "fan_out" in bad.text and "Back to wants" in bad.text
        before = bel.last_idx()
        forged = client.post("/wants", data={"ref": "h/2"}, headers={"origin": "http://evil.example"})
        assert forged.status_code == 400 and "another site" in forged.text
        remote = TestClient(app, base_url="http://localhost:8000", client=("192.0.2.7", 50000))
        refused = remote.post("/wants", data={"ref": "h/2"})
        assert refused.status_code == 401 and "loopback clients only" in refused.text
        assert bel.last_idx() == before and bel.wants(ref_prefix="h/2") == []  # neither was recorded
        unknown = client.get("/no/such/page")
        assert unknown.status_code == 404 and "Back to wants" in unknown.text  # an HTML page, not JSON
    bel.dispose()
