"""Announcements from other graphs: which refs a source may announce here, and pulling from an
upstream graph's events API (fetch a page of its partition events, check it, and announce each live
partition locally: the same path as `databuild publish`, the HTTP call and the push signal)."""

import re
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from pydantic import ValidationError

from databuild.config import Settings, masked_url
from databuild.errors import (
    AnnouncementRefusedError,
    DataBuildError,
    GraphDefinitionError,
    InvalidInputError,
    InvalidPartitionRefError,
    InvalidTransitionError,
    UnknownJobError,
)
from databuild.globs import compile_glob
from databuild.graph import Graph
from databuild.models import EventPage
from databuild.refs import validate_ref
from databuild.temporal.protocol import PullResult

PAGE = 500
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")

# (ref, instance id, location) -> changed anything
Announce = Callable[[str, str | None, str | None], Awaitable[bool]]

if TYPE_CHECKING:  # the CLI imports this module; httpx is only needed to pull
    import httpx


class UpstreamError(DataBuildError):
    """The upstream answered with something we cannot use (it is retried: the upstream may be fixed)."""


def check_announcement(graph: Graph, ref: str, patterns: Sequence[str] = ()) -> None:
    """Refuse an announcement of ``ref`` that ``graph`` must not accept, before anything is recorded.

    Only refs the graph declares external may be announced: the same rule that makes a want wait for
    a publish (`wait_external`) instead of building. A job's output is built here, and an announcement
    would replace what the job wrote with an instance whose data this graph never saw. ``patterns``
    are the globs of the upstream subscription the announcement came through; it must match one.
    Without patterns (a push-only upstream, the HTTP call, `databuild publish`) any external ref may."""
    declared = ", ".join(graph.external_patterns) or "none"
    try:
        target = graph.resolve(ref).target
    except UnknownJobError:
        raise AnnouncementRefusedError(
            f"{ref} is not external in graph {graph.name!r}: no job builds it and no graph.external(...) "
            f"pattern ({declared}) matches it; declare it external to accept announcements of it"
        ) from None
    except GraphDefinitionError as error:  # several jobs build it: still built here
        raise AnnouncementRefusedError(f"{ref} is built here ({error}), so it cannot be announced") from None
    if target is not None:
        raise AnnouncementRefusedError(
            f"{ref} is built here by job {target.job.label!r}, so it cannot be announced; only refs "
            f"graph {graph.name!r} declares external ({declared}) can"
        )
    if patterns and not any(compile_glob(p).matches(ref) for p in patterns):
        raise AnnouncementRefusedError(
            f"{ref} is outside the patterns this upstream is followed for ({', '.join(patterns)})"
        )


def check_upstream(name: str, url: str | None, patterns: list[str]) -> None:
    """Refuse a subscription that cannot work, before anything starts."""
    if not _NAME.fullmatch(name):
        raise InvalidInputError(f"upstream name {name!r} must be 1-100 of A-Z a-z 0-9 _ . -")
    if url is not None:
        import httpx

        parsed = httpx.URL(url)
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise InvalidInputError(
                f"upstream URL {masked_url(url)!r} must be http(s)://host[:port] of a DataBuild API"
            )
        if parsed.userinfo:
            raise InvalidInputError(
                f"upstream URL {masked_url(url)!r} carries credentials, which Temporal would keep in the "
                f"workflow's history; give the upstream's token in DATABUILD_UPSTREAM_TOKENS ({name}=TOKEN)"
            )
        if not patterns:
            raise InvalidInputError(
                "give at least one --pattern of the upstream refs to follow, e.g. 'daily/**'"
            )
    for pattern in patterns:
        compile_glob(pattern)


def token_for(settings: Settings, name: str) -> str | None:
    if settings.upstream_tokens is None:
        return None
    for entry in settings.upstream_tokens.get_secret_value().split(","):
        holder, _, token = entry.strip().partition("=")
        if holder == name and token:
            return token
    return None


async def fetch_page(
    client: "httpx.AsyncClient", url: str, patterns: list[str], cursor: int, token: str | None
) -> EventPage:
    params: list[tuple[str, str | int | float | bool | None]] = [
        ("since_idx", cursor),
        ("limit", PAGE),
        ("type", "PartitionLive"),
    ]
    params += [("pattern", p) for p in patterns]
    headers = {"authorization": f"Bearer {token}"} if token else {}
    response = await client.get(url.rstrip("/") + "/api/events", params=params, headers=headers)
    if response.status_code == 401:
        raise UpstreamError(f"{url} refused our token (401); set DATABUILD_UPSTREAM_TOKENS")
    response.raise_for_status()  # 5xx and others: retried with backoff by the activity's policy
    try:
        page = EventPage.model_validate_json(response.content)
    except ValidationError as error:
        raise UpstreamError(f"{url} sent a malformed events page: {error.errors()[0]['msg']}") from None
    for event in page.events:  # check the whole page before applying any of it
        if event.type != "PartitionLive" or event.ref is None or event.idx <= cursor:
            raise UpstreamError(f"{url} sent an event we did not ask for: #{event.idx} {event.type}")
        try:
            validate_ref(event.ref)
        except InvalidPartitionRefError as error:  # the upstream's fault: retried, never fatal to the sync
            raise UpstreamError(
                f"{url} sent PartitionLive #{event.idx} for a malformed ref: {error}"
            ) from None
        instance = event.data.get("instance_id")
        if not isinstance(instance, str) or not instance:
            raise UpstreamError(f"{url} sent PartitionLive #{event.idx} without an instance id")
    if page.next_since_idx < cursor:
        raise UpstreamError(f"{url} moved the cursor back from {cursor} to {page.next_since_idx}")
    return page


async def pull(
    client: "httpx.AsyncClient",
    url: str,
    patterns: list[str],
    cursor: int,
    token: str | None,
    announce: Announce,
) -> tuple[PullResult, list[str]]:
    """Apply one page. Returns the new cursor with what changed and was refused, and why each refused
    event was refused. A refused event can never apply, so it is skipped and the cursor moves past it."""
    page = await fetch_page(client, url, patterns, cursor, token)
    changed, refusals = 0, []
    for event in page.events:
        instance, location = event.data["instance_id"], event.data.get("location")
        assert event.ref is not None and isinstance(instance, str)
        try:
            changed += await announce(event.ref, instance, location if isinstance(location, str) else None)
        except (InvalidInputError, InvalidTransitionError) as error:
            refusals.append(f"#{event.idx} {event.ref}: {error}")
    more = page.next_since_idx < page.last_idx
    result = PullResult(cursor=page.next_since_idx, applied=changed, refused=len(refusals), more=more)
    return result, refusals
