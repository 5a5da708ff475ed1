"""What every handler works with (the BEL to read, the SDK client to change state, settings) and the
dependency that hands it to them."""

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import quote

from fastapi import Request

from databuild.bel import BuildEventLog
from databuild.client import DataBuild
from databuild.config import Settings
from databuild.errors import BusyError
from databuild.graph import Graph
from databuild.jobs.storage import Storage
from databuild.refreshed import Refreshed
from databuild.views.graph import PartitionCounts, partition_counter
from databuild.web.auth import ApiTokens
from databuild.web.guards import AllowedHosts

# Plans computed at once by one web server; more are refused until one ends.
MAX_PLANS = 2


@dataclass
class WebContext:
    """What the handlers need: the BEL to read, and the DataBuild client through which every change
    of state goes (it connects to Temporal when a change first needs it, so the read-only pages and
    taints work while Temporal is down)."""

    bel: BuildEventLog
    settings: Settings
    temporal_ui: str
    db: DataBuild
    tokens: ApiTokens = field(default_factory=lambda: ApiTokens({}))
    _counters: dict[str, Refreshed[PartitionCounts]] = field(default_factory=dict)
    _plans: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(MAX_PLANS))

    @contextlib.asynccontextmanager
    async def planning(self) -> AsyncIterator[None]:
        """Hold one of the server's ``MAX_PLANS`` places for a plan, or refuse (BusyError) when none is
        free: six plans of 99,000 partitions at once took 260 MB and slowed every other request by 6 s."""
        if self._plans.locked():
            raise BusyError(
                f"the server is computing {MAX_PLANS} plans already; try again in a few seconds "
                "(or plan from the CLI, which reads the BEL itself)"
            )
        async with self._plans:
            yield

    def partition_counter(self, graph: Graph) -> Refreshed[PartitionCounts]:
        """The graph's partitions counted in the background, shared by the page and the API."""
        if graph.name not in self._counters:
            self._counters[graph.name] = partition_counter(self.bel, graph)
        return self._counters[graph.name]

    @functools.cached_property
    def storage(self) -> Storage:
        """Where job logs are read (opened on first use: pages that show none never need it)."""
        return Storage(self.settings.storage_root)

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
    """What the app needs: ``bel`` to read, and a client for changes of state, either ``client`` or one
    that shares ``bel``, loads the graph and connects to Temporal on first need."""
    return WebContext(
        bel=bel,
        settings=settings,
        temporal_ui=temporal_ui or default_temporal_ui(settings),
        db=client or DataBuild(None, bel, None, settings),
        tokens=ApiTokens.from_settings(settings),
    )


def default_temporal_ui(settings: Settings, ui_port: int = 8233) -> str:
    host = settings.temporal_address.rpartition(":")[0] or "127.0.0.1"
    return f"http://{host}:{ui_port}"
