"""What every request must pass before the app sees it: a Host this server answers to, and a bounded body.

Both are plain ASGI middleware, so a refused request costs neither routing nor reading its body.
"""

from collections.abc import Sequence
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_BODY_BYTES = 1024 * 1024  # the largest request DataBuild takes (a want with 100 refs) is ~60 KB


class AllowedHosts:
    """Host names (any port) from DATABUILD_ALLOWED_HOSTS: exact, ``*.domain`` or ``*``."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)

    def allows(self, netloc: str) -> bool:
        """Whether ``netloc`` (a Host header, or an Origin's ``host:port``) names this server."""
        if "@" in netloc or "/" in netloc:
            return False
        try:
            parts = urlsplit("//" + netloc)
            _ = parts.port  # raises ValueError for a port that is not a number in range
        except ValueError:
            return False
        host = (parts.hostname or "").rstrip(".")
        return bool(host) and any(
            name == "*" or host == name or (name.startswith("*.") and host.endswith(name[1:]))
            for name in self.names
        )


class HostCheck:
    """Refuses (400) a request whose Host is not allowed: a page whose own name an attacker resolves to
    this server (DNS rebinding) would otherwise reach it as a loopback client."""

    def __init__(self, app: ASGIApp, hosts: AllowedHosts) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = Headers(scope=scope).get("host", "")
            if not self.hosts.allows(host):
                error = (
                    f"this server does not answer to the host {host!r}; the names it answers to are "
                    f"{', '.join(self.hosts.names)} (DATABUILD_ALLOWED_HOSTS): add the name clients use"
                )
                await JSONResponse({"error": error, "type": "UntrustedHost"}, 400)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class BodyLimit:
    """Refuses (413) a body over ``limit`` bytes: a declared Content-Length at once, and a streamed
    (chunked) body as soon as what arrived passes the limit, so no request holds more than that."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    def _too_large(self) -> HTTPException:
        return HTTPException(413, f"the request body is over the limit of {self.limit} bytes")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.limit:
            error = self._too_large()
            await JSONResponse({"error": error.detail}, error.status_code)(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit:
                raise self._too_large()  # answered by the app's handler, as any HTTP error
            return message

        await self.app(scope, counted, send)
