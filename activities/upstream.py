"""Activities of the upstream-sync workflow: pull a page of an upstream graph's events, apply pushed
announcements. Both announce through `DataBuild.publish`, like `databuild publish` and the HTTP API."""

import httpx
from temporalio import activity

from databuild.client import DataBuild
from databuild.errors import InvalidInputError, InvalidTransitionError
from databuild.temporal import protocol as p
from databuild.temporal.upstream import pull, token_for


class UpstreamActivities:
    def __init__(self, db: DataBuild) -> None:
        self.db = db
        self._http: httpx.AsyncClient | None = None  # made in the worker's event loop, on first use

    def http(self) -> httpx.AsyncClient:
        """One connection pool for every pull, so polling an upstream reuses its connection."""
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=30)
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    @activity.defn
    async def pull_upstream(self, input: p.PullInput) -> p.PullResult:
        async def announce(ref: str, instance_id: str | None, location: str | None) -> bool:
            _, changed, _ = await self.db.publish(
                ref, instance_id=instance_id, source=input.name, patterns=input.patterns, location=location
            )
            return changed

        token = token_for(self.db.settings, input.name)
        result, refusals = await pull(self.http(), input.url, input.patterns, input.cursor, token, announce)
        for refusal in refusals:
            activity.logger.warning("skipped event %s from upstream %s", refusal, input.name)
        return result

    @activity.defn
    async def apply_announcements(self, input: p.AnnouncementsInput) -> int:
        applied = 0
        for a in input.announcements:
            try:
                _, changed, _ = await self.db.publish(
                    a.ref,
                    instance_id=a.instance_id,
                    source=a.graph,
                    patterns=input.patterns,
                    location=a.location,
                )
            except (InvalidInputError, InvalidTransitionError) as error:  # it can never apply: say why, go on
                activity.logger.warning("refused announcement of %r from %s: %s", a.ref, a.graph, error)
                continue
            applied += changed
        return applied
