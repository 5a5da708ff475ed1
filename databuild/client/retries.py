"""What a retry reopens, read from the BEL: the ended wants of a family, and what still blocks them."""

from databuild.bel.queries import BelQueries
from databuild.errors import InvalidTransitionError
from databuild.models import PartitionStatus, Want, WantState


def retryable(bel: BelQueries, want: Want) -> list[Want]:
    """The want and the wants it derived, transitively, that ended failed or canceled. Raises
    InvalidTransitionError for a want that succeeded or whose TTL passed."""
    if want.state is WantState.successful:
        raise InvalidTransitionError(
            f"want {want.want_id} succeeded; to build {want.ref} again, `databuild taint {want.ref}` and want it"
        )
    if want.state is WantState.expired:
        raise InvalidTransitionError(
            f"want {want.want_id} expired (its TTL passed at {want.spec.ttl_deadline:%Y-%m-%d %H:%M}Z); "
            "want the partition again with a later --ttl"
        )
    return bel.wants.ended_families([want])[want.want_id]


def fail_locked(bel: BelQueries, wants: list[Want]) -> list[str]:
    """The refs of ``wants`` that are fail-locked: a retry cannot build them until they are resolved."""
    partitions = bel.partitions.by_ref(sorted({w.ref for w in wants}))
    return [p.ref for p in partitions if p.status is PartitionStatus.failed]
