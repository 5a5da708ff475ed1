"""What a pull does with an upstream's page it cannot use: an UpstreamError, which the pull activity
retries (the upstream may be fixed), never an error that would end the subscription's workflow."""

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from activities.errors import application_error
from databuild.temporal.upstream import UpstreamError, fetch_page

pytestmark = pytest.mark.unit

BAD_REF_PAGE = {
    "events": [
        {
            "idx": 1,
            "type": "PartitionLive",
            "at": "2024-01-01T00:00:00Z",
            "want_id": None,
            "job_run_id": None,
            "ref": "data/../etc",
            "data": {"instance_id": "i-1"},
        }
    ],
    "next_since_idx": 1,
    "last_idx": 1,
}


@pytest.fixture
def upstream() -> Iterator[str]:
    """A real HTTP server on loopback that answers every events request with a page naming a bad ref."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(BAD_REF_PAGE).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def test_a_malformed_ref_from_upstream_is_retried_not_fatal(upstream: str) -> None:
    async with httpx.AsyncClient() as client:
        with pytest.raises(UpstreamError, match="malformed ref") as raised:
            await fetch_page(client, upstream, [], 0, None)
    assert not application_error(raised.value).non_retryable
