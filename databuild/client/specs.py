"""A want as a client asks for it, built and checked before anything is recorded."""

import hashlib
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

from databuild.backfill import BackfillRequest
from databuild.bel.queries import BelQueries
from databuild.durations import to_utc
from databuild.errors import AnnouncementRefusedError, InvalidWantError
from databuild.graph import Graph
from databuild.models import WantSource, WantSpec, first_error
from databuild.refs import validate_ref
from databuild.temporal.upstream import check_announcement
from databuild.views.staleness import basis_of, stale_among

_DATE_IN_REF = re.compile(r"(?<!\d)(\d{4})-(\d{2})-(\d{2})(?!\d)")


def default_data_timestamp(ref: str, now: datetime) -> datetime:
    """The business time a ref stands for: the first ISO date in it, else the start of today (UTC); one
    per ref and day, so repeating a CLI request is idempotent."""
    match = _DATE_IN_REF.search(ref)
    if match:
        try:
            return datetime(int(match[1]), int(match[2]), int(match[3]), tzinfo=UTC)
        except ValueError:
            pass
    now = to_utc(now)
    return datetime(now.year, now.month, now.day, tzinfo=UTC)


def build_spec(
    graph: Graph,
    ref: str,
    *,
    data_timestamp: datetime | None = None,
    sla: timedelta | None = None,
    ttl: timedelta | None = None,
    source: WantSource = WantSource.cli,
    now: datetime | None = None,
    generation: int = 0,
    requires: Sequence[str] = (),
    fresh: bool = False,
    fresh_of: str | None = None,
) -> WantSpec:
    """Build and check a want without recording anything; raises a clear error on bad input."""
    validate_ref(ref)
    if source is WantSource.derivative:
        raise InvalidWantError("derivative wants are created by DataBuild itself, not by clients")
    now = now or datetime.now(UTC)
    try:
        spec = WantSpec(
            ref=ref,
            data_timestamp=data_timestamp or default_data_timestamp(ref, now),
            sla=sla,
            ttl=ttl,
            source=source,
            generation=generation,
            requires=list(requires),
            fresh=fresh,
            fresh_of=fresh_of if fresh else None,
        )
    except ValueError as error:
        raise InvalidWantError(first_error(error)) from None
    resolved = graph.resolve(spec.ref)  # unknown job -> UnknownJobError
    if fresh and resolved.target is None:
        raise InvalidWantError(
            f"{ref} is external (made outside graph {graph.name!r}): DataBuild cannot rebuild it, so a fresh "
            "want has nothing to do; want it without --fresh, or have its owner publish a new instance"
        )
    for required in spec.requires:
        try:
            check_announcement(graph, required)
        except AnnouncementRefusedError as error:  # nothing could ever make it available
            raise InvalidWantError(f"the want cannot require {required}: {error}") from None
    if spec.ttl_deadline is not None and spec.ttl_deadline <= now:
        raise InvalidWantError(
            f"the TTL of this want ended at {spec.ttl_deadline:%Y-%m-%d %H:%M}Z, before now "
            f"({now:%Y-%m-%d %H:%M}Z); the TTL counts from the data timestamp "
            f"{spec.data_timestamp:%Y-%m-%d %H:%M}Z, so give a longer --ttl or none"
        )
    return spec


def backfill_specs(
    graph: Graph,
    request: BackfillRequest,
    partitions: Sequence[tuple[str, datetime]],
    generations: Mapping[str, int],
    fresh_of: Mapping[str, str] | None = None,
) -> list[WantSpec]:
    """The wants of a backfill for ``partitions`` (ref, data time); ``fresh_of``: of a stale-only
    backfill, what each fresh want is asked against (``WantSpec.fresh_of``)."""
    return [
        build_spec(
            graph,
            ref,
            data_timestamp=at,
            sla=request.sla,
            ttl=request.ttl,
            source=WantSource.backfill,
            generation=generations.get(ref, 0),
            fresh=fresh_of is not None,
            fresh_of=fresh_of.get(ref) if fresh_of is not None else None,
        )
        for ref, at in partitions
    ]


def stale_only(
    bel: BelQueries, graph: Graph, request: BackfillRequest, partitions: Sequence[tuple[str, datetime]]
) -> tuple[BackfillRequest, list[tuple[str, datetime]], dict[str, str]]:
    """Of a stale-only backfill: the request named by the stale instances it wants (so asking again once
    they are rebuilt, or others are stale, is a new backfill), those partitions of the range, and what
    the fresh want of each is asked against. Reads only."""
    stale = stale_among(bel, graph, [ref for ref, _ in partitions])
    fresh_of = {ref: basis_of(found.instance_id, found) for ref, found in stale.items()}
    named = hashlib.sha256("\n".join(sorted(fresh_of.values())).encode()).hexdigest()[:16]
    request = request.model_copy(update={"stale_set": named})
    return request, [(ref, at) for ref, at in partitions if ref in stale], fresh_of
