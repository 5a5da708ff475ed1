"""Bearer tokens for the HTTP endpoints that change state or expose events to other graphs.

With tokens configured (``DATABUILD_API_TOKENS`` / ``DATABUILD_API_TOKENS_FILE``) those endpoints need
``Authorization: Bearer <token>``. Without any, they answer loopback clients only: the embedded stack
works out of the box, and a server exposed on a network refuses writes until tokens are set.
"""

import hmac
import ipaddress
from dataclasses import dataclass

from fastapi import Request

from databuild.config import Settings
from databuild.errors import DataBuildError, InvalidInputError


class UnauthorizedError(DataBuildError):
    """Missing or wrong credentials: 401, and nothing is recorded."""


@dataclass(frozen=True)
class ApiTokens:
    by_token: dict[str, str]  # token -> the name of who holds it

    @classmethod
    def from_settings(cls, settings: Settings) -> "ApiTokens":
        entries: list[str] = []
        if settings.api_tokens is not None:
            entries += settings.api_tokens.get_secret_value().split(",")
        if settings.api_tokens_file is not None:
            try:
                entries += settings.api_tokens_file.read_text().splitlines()
            except OSError as error:
                raise InvalidInputError(f"cannot read DATABUILD_API_TOKENS_FILE: {error}") from None
        by_token: dict[str, str] = {}
        for number, entry in enumerate(entries, start=1):
            entry = entry.strip()
            if not entry or entry.startswith("#"):
                continue
            name, _, token = entry.rpartition("=") if "=" in entry else ("default", "", entry)
            if len(token) < 16:
                raise InvalidInputError(
                    f"API token {number} ({name or 'unnamed'}) is shorter than 16 characters"
                )
            by_token[token] = name.strip() or "default"
        return cls(by_token)

    @property
    def configured(self) -> bool:
        return bool(self.by_token)

    def holder(self, presented: str) -> str | None:
        for token, name in self.by_token.items():
            if hmac.compare_digest(token.encode(), presented.encode()):
                return name
        return None


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
