"""What every handler works with (the BEL to read, the SDK client to change state, settings) and the
dependency that hands it to them."""

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import quote

from fastapi import Request

from databuild.bel import BuildEventLog
from databuild.client import DataBuild
from databuild.config import Settings
from databuild.web.auth import ApiTokens
from databuild.web.guards import AllowedHosts

Connect = Callable[[], Awaitable[DataBuild]]


@dataclass
class WebContext:
    """What the handlers need: the BEL to read, and a DataBuild client (connected on first use,
    so the read-only pages work while Temporal is down) to register wants."""

    bel: BuildEventLog
    settings: Settings
    temporal_ui: str
    connect: Connect
    tokens: ApiTokens = field(default_factory=lambda: ApiTokens({}))
    connected: DataBuild | None = None  # the client, once connected (or handed in)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def client(self) -> DataBuild:
        async with self._lock:
            if self.connected is None:
                self.connected = await self.connect()
            return self.connected

    @property
    def hosts(self) -> AllowedHosts:
        return AllowedHosts(self.settings.allowed_hosts)

    def workflow_url(self, workflow_id: str) -> str:
        return f"{self.temporal_ui}/namespaces/{quote(self.settings.namespace, safe='')}/workflows/" + quote(
            workflow_id, safe=""
        )


def context(request: Request) -> WebContext:
    found: WebContext = request.app.state.context
    return found


def web_context(
    settings: Settings, bel: BuildEventLog, temporal_ui: str | None = None, *, client: DataBuild | None = None
) -> WebContext:
    """What the app needs: ``bel`` to read, and a client to register wants, either ``client`` or one
    that shares ``bel`` and connects to Temporal on first use (so read-only pages work without it)."""

    async def connect_client() -> DataBuild:
        from databuild.graph import load_graph
        from databuild.temporal import connect

        return DataBuild(await connect(settings), bel, load_graph(settings.graph), settings)

    return WebContext(
        bel=bel,
        settings=settings,
        temporal_ui=temporal_ui or default_temporal_ui(settings),
        connect=connect_client,
        tokens=ApiTokens.from_settings(settings),
        connected=client,
    )


def default_temporal_ui(settings: Settings, ui_port: int = 8233) -> str:
    host = settings.temporal_address.rpartition(":")[0] or "127.0.0.1"
    return f"http://{host}:{ui_port}"
