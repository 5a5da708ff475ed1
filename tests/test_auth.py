"""Bearer tokens on the endpoints that change state or expose events; a refused request records nothing."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from databuild.bel import BuildEventLog
from databuild.config import Settings
from databuild.errors import InvalidInputError
from databuild.web import create_app, web_context
from databuild.web.auth import ApiTokens

pytestmark = pytest.mark.unit

TOKEN = "s3cret-token-of-graph-b"
REMOTE = ("192.0.2.10", 40000)
LOOPBACK = ("127.0.0.1", 40000)
BASE = "http://127.0.0.1:8000"  # a Host the server answers to (DATABUILD_ALLOWED_HOSTS)
WRITES = [
    ("post", "/api/wants", {"ref": "daily_users/2024-01-01"}),
    ("post", "/api/partitions/ext/1/taint", {"dry_run": False}),
    ("post", "/api/partitions/ext/1/available", {}),
    ("post", "/api/instances/00000000-0000-0000-0000-000000000000/pin", {}),
    ("post", "/api/backfills", {"pattern": "ext/{n}", "start": "2024-01-01", "end": "2024-01-02"}),
    ("post", "/api/wants/w-1/cancel", {}),
    ("post", "/api/backfills/bf-1/cancel", {}),
    ("post", "/api/backfills/bf-1/pause", {}),
    ("post", "/api/backfills/bf-1/resume", {}),
    ("get", "/api/events", None),
]


@pytest.fixture
def bel(tmp_path: Path) -> Iterator[BuildEventLog]:
    log = BuildEventLog.create(f"sqlite:///{tmp_path / 'bel.sqlite'}")
    log.partitions.publish_external("ext/1")
    yield log
    log.dispose()


def app(tmp_path: Path, bel: BuildEventLog, tokens: str | None) -> object:
    settings = Settings(home=tmp_path, api_tokens=SecretStr(tokens) if tokens else None)
    return create_app(web_context(settings, bel))


def call(client: TestClient, method: str, path: str, body: object, **headers: str) -> object:
    if method == "get":
        return client.get(path, headers=headers)
    return client.post(path, json=body, headers=headers)


def test_with_tokens_every_guarded_endpoint_needs_one(tmp_path: Path, bel: BuildEventLog) -> None:
    before = bel.events.last_idx()
    client = TestClient(
        app(tmp_path, bel, f"graph-b={TOKEN}"), base_url=BASE, client=LOOPBACK
    )  # (loopback is not enough)
    for method, path, body in WRITES:
        for headers in ({}, {"authorization": "Bearer wrong-token-wrong-token"}, {"authorization": TOKEN}):
            response = call(client, method, path, body, **headers)
            assert response.status_code == 401, (path, headers, response.text)  # type: ignore[attr-defined]
            assert response.headers["www-authenticate"] == "Bearer"  # type: ignore[attr-defined]
    assert bel.events.last_idx() == before
    auth = {"authorization": f"Bearer {TOKEN}"}
    ok = client.get("/api/events", headers=auth)
    assert ok.status_code == 200 and ok.json()["events"]
    for hostile in ["a/%", "' OR 1=1 --", "x" * 600, "a/[bc]"]:
        bad = client.get("/api/events", params={"pattern": hostile}, headers=auth)
        assert bad.status_code == 400 and "pattern" in bad.json()["error"], hostile
    bad_ref = client.get("/api/events", params={"ref": "a/../b"}, headers=auth)
    assert bad_ref.status_code == 400 and "'..' segment" in bad_ref.json()["error"]
    assert client.get("/api/wants").status_code == 200  # read-only views stay open
    assert client.get("/wants").status_code == 200


def test_without_tokens_only_loopback_clients_may_write(tmp_path: Path, bel: BuildEventLog) -> None:
    before = bel.events.last_idx()
    remote = TestClient(app(tmp_path, bel, None), base_url=BASE, client=REMOTE)
    for method, path, body in WRITES:
        response = call(remote, method, path, body)
        assert response.status_code == 401 and "DATABUILD_API_TOKENS" in response.text  # type: ignore[attr-defined]
    assert bel.events.last_idx() == before
    local = TestClient(app(tmp_path, bel, None), base_url=BASE, client=LOOPBACK)
    assert local.get("/api/events").status_code == 200


def test_token_configuration_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="shorter than 16"):
        ApiTokens.from_settings(Settings(home=tmp_path, api_tokens=SecretStr("a=short")))
    listed = tmp_path / "tokens"
    listed.write_text(f"# graphs allowed to call us\ngraph-a={TOKEN}\n\n")
    tokens = ApiTokens.from_settings(Settings(home=tmp_path, api_tokens_file=listed))
    assert tokens.holder(TOKEN) == "graph-a" and tokens.holder("nope") is None
    with pytest.raises(InvalidInputError, match="cannot read DATABUILD_API_TOKENS_FILE"):
        ApiTokens.from_settings(Settings(home=tmp_path, api_tokens_file=tmp_path / "missing"))


def test_a_token_is_everything_after_the_first_equals_sign(tmp_path: Path) -> None:
    """Base64 tokens end in `=`; the holder's name ends at the first one."""
    settings = Settings(
        home=tmp_path, api_tokens=SecretStr("ci=abc=def0123456789abcdef,graph-b=dG9rZW4tb2YtZ3JhcGgtYg==")
    )
    tokens = ApiTokens.from_settings(settings)
    assert tokens.holder("abc=def0123456789abcdef") == "ci" and tokens.holder("def0123456789abcdef") is None
    assert tokens.holder("dG9rZW4tb2YtZ3JhcGgtYg==") == "graph-b"


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        (f"={TOKEN}", "the name before the first `=` is empty"),
        ("graph-a=", "the token after the first `=` is shorter than 16 characters"),
        ("dG9rZW4tb2YtZ3JhcGgtYQ==", "the token after the first `=` is shorter"),  # bare, with `=`
        (f"graph a={TOKEN}", "the name before the first `=` is empty or has spaces"),
        ("graph-a=short", "the token after the first `=` is shorter than 16 characters"),
    ],
)
def test_a_malformed_token_line_refuses_to_start_and_names_its_line(
    tmp_path: Path, line: str, problem: str
) -> None:
    listed = tmp_path / "tokens"
    listed.write_text(f"# graphs allowed to call us\ngraph-b={TOKEN}\n\n{line}\n")
    with pytest.raises(InvalidInputError) as refused:
        ApiTokens.from_settings(Settings(home=tmp_path, api_tokens_file=listed))
    message = str(refused.value)
    assert f"DATABUILD_API_TOKENS_FILE ({listed}) line 4: {problem}" in message and "name=token" in message
    assert TOKEN not in message and "dG9rZW4" not in message


def test_instances_are_pinned_and_unpinned_over_http(tmp_path: Path, bel: BuildEventLog) -> None:
    client = TestClient(app(tmp_path, bel, f"graph-b={TOKEN}"), base_url=BASE, client=REMOTE)
    auth = {"authorization": f"Bearer {TOKEN}"}
    instance = bel.partitions.get("ext/1").instance_id
    pinned = client.post(f"/api/instances/{instance}/pin", json={"reason": "audit"}, headers=auth)
    assert pinned.status_code == 200 and pinned.json()["pinned"] is True, pinned.text
    unpinned = client.post(f"/api/instances/{instance}/pin", json={"pinned": False}, headers=auth)
    assert unpinned.json()["pinned"] is False
    before = bel.events.last_idx()
    missing = client.post("/api/instances/not-an-instance/pin", json={}, headers=auth)
    assert missing.status_code == 404 and "no partition instance" in missing.json()["error"]
    assert bel.events.last_idx() == before
