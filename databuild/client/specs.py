"""A want as a client asks for it, built and checked before anything is recorded."""

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from databuild.errors import AnnouncementRefusedError, InvalidWantError
from databuild.graph import Graph
from databuild.models import WantSource, WantSpec, default_data_timestamp, first_error
from databuild.refs import validate_ref
from databuild.temporal.upstream import check_announcement


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
        )
    except ValueError as error:
        raise InvalidWantError(first_error(error)) from None
    graph.resolve(spec.ref)  # unknown job -> UnknownJobError
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
