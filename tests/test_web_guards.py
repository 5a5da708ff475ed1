"""The web server under the attacks that once worked and that take no measuring: DNS rebinding past its
loopback-only writes (against a real `databuild web` on loopback), and numbers too large for a date or an
integer column. (The attacks measured in time: tests/test_web_hardening.py.)"""

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from databuild.bel import BuildEventLog
from databuild.config import Settings
from databuild.models import PartitionStatus
from databuild.web import create_app, web_context
from tests.test_web_hardening import web_server

pytestmark = pytest.mark.unit

EVIL = "evil.example"


# 3. DNS rebinding: a Host the server does not answer to is refused before anything else. -----------------


@pytest.fixture
def loopback_bel(tmp_path: Path) -> Iterator[BuildEventLog]:
    bel = BuildEventLog.create(Settings(home=tmp_path).database_url.get_secret_value())
    bel.partitions.publish_external("ext/1")
    yield bel
    bel.dispose()


async def test_requests_naming_another_host_are_refused_before_anything_else(
    tmp_path: Path, loopback_bel: BuildEventLog
) -> None:
    before = loopback_bel.events.last_idx()
    with web_server(tmp_path) as base:  # no tokens: loopback clients may write
        port = base.rsplit(":", 1)[1]
        rebound = {"host": f"{EVIL}:{port}", "origin": f"http://{EVIL}:{port}"}
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            attacks = [
                client.post("/wants", data={"ref": "ext/2"}, headers=rebound),
                client.post("/api/partitions/ext/1/taint", json={"cascade": True}, headers=rebound),
                client.get("/api/events", headers=rebound),
                client.get("/wants", headers=rebound),
            ]
            for response in await asyncio.gather(*attacks):
                assert response.status_code == 400, response.text
                assert f"'{EVIL}:{port}'" in response.text and "DATABUILD_ALLOWED_HOSTS" in response.text
            assert loopback_bel.events.last_idx() == before
            assert loopback_bel.partitions.get("ext/1").status is PartitionStatus.live

            # Every loopback name answers, on any port.
            for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "localhost"):
                assert (await client.get("/api/events", headers={"host": host})).status_code == 200, host
            # The form also refuses an allowed Origin that is not this server, and an Origin not allowed.
            for host, origin in (
                (f"localhost:{port}", "http://localhost:3000"),
                (f"127.0.0.1:{port}", f"http://{EVIL}"),
            ):
                form = await client.post(
                    "/wants", data={"ref": "ext/2"}, headers={"host": host, "origin": origin}
                )
                assert form.status_code == 403 and "another site" in form.text, (host, origin)
    assert loopback_bel.events.last_idx() == before


def test_allowed_hosts_are_configurable(tmp_path: Path, loopback_bel: BuildEventLog) -> None:
    settings = Settings.model_validate(
        {"home": tmp_path, "allowed_hosts": "databuild.internal,*.example.org"}
    )
    app = create_app(web_context(settings, loopback_bel))
    for base, status in [
        ("http://databuild.internal:8000", 200),
        ("http://a.b.example.org", 200),
        ("http://example.org", 400),
        ("http://127.0.0.1:8000", 400),
    ]:
        assert TestClient(app, base_url=base).get("/api/stats").status_code == status, base


# 7. Numbers past a date's or an integer column's range are 400s naming the limit, and record nothing. ----


def test_overflowing_durations_and_offsets_are_refused_with_the_limit(
    tmp_path: Path, loopback_bel: BuildEventLog
) -> None:
    before = loopback_bel.events.last_idx()
    app = create_app(web_context(Settings(home=tmp_path), loopback_bel))
    client = TestClient(app, base_url="http://127.0.0.1:8000", client=("127.0.0.1", 50000))
    for field, value in (("ttl", "999999999999d"), ("sla", "3000000d"), ("ttl", "9" * 5000 + "s")):
        response = client.post("/api/wants", json={"ref": "daily_users/2024-01-01", field: value})
        assert response.status_code == 400 and "at most 36500d" in response.json()["error"], response.text
        page = client.post("/wants", data={"ref": "daily_users/2024-01-01", field: value})
        assert page.status_code == 400 and "at most 36500d" in page.text, page.text
    huge = "99999999999999999999"
    for path, name in [
        ("/api/wants", "offset"),
        ("/api/partitions", "offset"),
        ("/api/job-runs", "offset"),
        ("/api/events", "since_idx"),
        ("/api/partitions/ext/1", "offset"),
        ("/wants", "offset"),
        ("/partitions/ext/1", "offset"),
    ]:
        response = client.get(path, params={name: huge})
        assert response.status_code == 400 and str(2**63 - 1) in response.text, (path, response.text)
    assert loopback_bel.events.last_idx() == before
