"""Bearer tokens for the HTTP endpoints that change state or expose events to other graphs, and the
same-site rule of every request that may change state.

With tokens configured (``DATABUILD_API_TOKENS`` / ``DATABUILD_API_TOKENS_FILE``) those endpoints need
``Authorization: Bearer <token>``. Without any, they answer loopback clients only: the embedded stack
works out of the box, and a server exposed on a network refuses writes until tokens are set. Either way a
browser's request that may change state must come from a page of this very server (``same_site``): a
page of another site would otherwise act with the user's loopback address or cookie.
"""

import hmac
import ipaddress
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from fastapi import Request, Response
from fastapi.routing import APIRoute

from databuild.config import Settings
from databuild.errors import DataBuildError, InvalidInputError
from databuild.web.guards import AllowedHosts


class UnauthorizedError(DataBuildError):
    """Missing or wrong credentials: 401, and nothing is recorded."""

    retryable = False
    http_status = 401


class CrossSiteError(DataBuildError):
    """A browser sent a request that may change state from a page of another site: 403, nothing recorded."""

    retryable = False
    http_status = 403


@dataclass(frozen=True)
class ApiTokens:
    by_token: dict[str, str]  # token -> the name of who holds it

    @classmethod
    def from_settings(cls, settings: Settings) -> "ApiTokens":
        """Tokens from ``name=token`` entries (a bare token is held by "default"); a token may contain
        ``=``, as base64 does: the name ends at the first one. A malformed entry refuses to start."""
        entries: list[tuple[str, str]] = []
        if settings.api_tokens is not None:
            listed = settings.api_tokens.get_secret_value().split(",")
            entries += [(f"DATABUILD_API_TOKENS entry {n}", entry) for n, entry in enumerate(listed, 1)]
        if settings.api_tokens_file is not None:
            try:
                lines = settings.api_tokens_file.read_text().splitlines()
            except OSError as error:
                raise InvalidInputError(f"cannot read DATABUILD_API_TOKENS_FILE: {error}") from None
            where = f"DATABUILD_API_TOKENS_FILE ({settings.api_tokens_file}) line"
            entries += [(f"{where} {n}", line) for n, line in enumerate(lines, 1)]
        by_token: dict[str, str] = {}
        for where, entry in entries:
            entry = entry.strip()
            if entry and not entry.startswith("#"):
                name, token = _parse_entry(where, entry)
                by_token[token] = name
        return cls(by_token)

    @property
    def configured(self) -> bool:
        return bool(self.by_token)

    def holder(self, presented: str) -> str | None:
        for token, name in self.by_token.items():
            if hmac.compare_digest(token.encode(), presented.encode()):
                return name
        return None


def _parse_entry(where: str, entry: str) -> tuple[str, str]:
    """(name, token) of one ``name=token`` entry, or a bare token. Messages show neither: the part
    before the first ``=`` of a bare base64 token is most of the token."""
    name, sep, token = entry.partition("=")
    if not sep:
        name, token = "default", entry
    name, token = name.strip(), token.strip()
    problem = None
    if not name or any(c.isspace() for c in name):
        problem = "the name before the first `=` is empty or has spaces"
    elif any(c.isspace() for c in token):
        problem = "the token has spaces"
    elif len(token) < 16:
        problem = "the token after the first `=` is shorter than 16 characters"
    if problem is not None:
        raise InvalidInputError(
            f"{where}: {problem}; write each entry as name=token (a token that contains `=` needs a name)"
        )
    return name, token


def is_loopback(request: Request) -> bool:
    host = request.client.host if request.client else ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def caller(request: Request, tokens: ApiTokens) -> str:
    """Who is calling (a token's name, or "loopback"); raises ``UnauthorizedError`` otherwise."""
    header = request.headers.get("authorization", "")
    scheme, _, presented = header.partition(" ")
    if tokens.configured:
        if scheme.lower() != "bearer" or not presented:
            raise UnauthorizedError("this endpoint needs `Authorization: Bearer <token>`")
        name = tokens.holder(presented.strip())
        if name is None:
            raise UnauthorizedError("the bearer token is not one of DATABUILD_API_TOKENS")
        return name
    if is_loopback(request):
        return "loopback"
    raise UnauthorizedError(
        "no API tokens are configured, so only loopback clients may call this endpoint; "
        "set DATABUILD_API_TOKENS on the server and send `Authorization: Bearer <token>`"
    )


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def same_site(request: Request) -> None:
    """Refuses (403) a request that may change state sent by a browser from a page of another site: its
    Origin must name an allowed host and match the Host it sent to, and its Sec-Fetch-Site must not be
    cross-site. Scripts and the CLI send neither header, and pass."""
    origin = request.headers.get("origin")
    cross_site = request.headers.get("sec-fetch-site") == "cross-site"
    if origin is not None:
        hosts: AllowedHosts = request.app.state.context.hosts  # the WebContext's (it imports this module)
        netloc = urlsplit(origin).netloc
        cross_site |= netloc != request.headers.get("host") or not hosts.allows(netloc)
    if cross_site:
        raise CrossSiteError(
            f"a request from another site ({origin or 'unknown origin'}) may not change anything here; "
            "use this server's own pages, or call the API without an Origin header (scripts, the CLI)"
        )


Guard = TypeVar("Guard", bound=Callable[[Request], object])
_GUARDS: set[Callable[..., Any]] = set()


def guard(check: Guard) -> Guard:
    """Marks a dependency that decides whether the caller may use the route at all: a ``GuardedRoute``
    runs it before the request body is read."""
    _GUARDS.add(check)
    return check


class GuardedRoute(APIRoute):
    """Runs the route's guards before FastAPI reads and parses the request body (it resolves
    dependencies only after), so refusing a caller never costs reading and holding what it sent; a route
    that may change state (any method but GET, HEAD and OPTIONS) runs ``same_site`` first. Every router of
    the app uses it."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        guards: list[Callable[..., Any]] = [same_site] if (self.methods or set()) - SAFE_METHODS else []
        guards += [d.call for d in self.dependant.dependencies if d.call in _GUARDS]
        if not guards:
            return handler

        async def guarded(request: Request) -> Response:
            for check in guards:
                check(request)
            return await handler(request)

        return guarded
