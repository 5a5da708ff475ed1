"""What a fresh want (``databuild want REF --fresh``) does with a live partition, as pure rules.

A want by default accepts a live partition (historical delegation). A fresh want rebuilds it when it is
stale (``databuild.domain.staleness``), judged with the worker's job versions when the want decides:
first the inputs it read that are themselves stale, through fresh derivative wants it waits for, then the
partition itself. Stale only by its own code, or by an input superseded or tainted (whose live instance
is new already), it is built at once. A fresh want rebuilds its partition at most once: an instance built
by a run it executed or joined is accepted, stale or not, and the want says so."""

from collections.abc import Set
from dataclasses import dataclass

from databuild.domain.staleness import StaleKind, StaleReason
from databuild.models import Partition


@dataclass(frozen=True)
class Freshness:
    """What a fresh want's decision reads besides the usual: its partition's live instance as the store
    judged it, why that instance is stale (empty: it is not), and the inputs the want already waited for
    through derivative wants."""

    instance_id: str  # the live instance judged
    reasons: tuple[StaleReason, ...] = ()
    awaited: frozenset[str] = frozenset()


def stale_reasons(fresh: Freshness | None, own: Partition) -> tuple[StaleReason, ...]:
    """Why ``own``'s live instance is stale, for a fresh want; () for any other want, or when the live
    instance is not the one judged (rebuilt in between: new, so accepted)."""
    if fresh is None or own.instance_id is None or own.instance_id != fresh.instance_id:
        return ()
    return fresh.reasons


def rebuilds(fresh: Freshness | None, own: Partition, runs: Set[str]) -> bool:
    """Whether a want rebuilds its live partition ``own`` rather than accept it: it is fresh, the live
    instance is stale, and no run of the want built it (``runs``: every run it executed or joined)."""
    return bool(stale_reasons(fresh, own)) and own.built_by not in runs


def accepted(fresh: Freshness | None, own: Partition, runs: Set[str]) -> str | None:
    """Why a fresh want accepts its live partition, when it is stale all the same (its own rebuild went
    live and was stale again by then: rebuilt once, it is not rebuilt again); None otherwise."""
    reasons = stale_reasons(fresh, own)
    if not reasons or own.built_by not in runs:
        return None
    why = "; ".join(str(r) for r in reasons)
    return (
        f"fresh: built {own.instance_id} by job run {own.built_by} for this want, and it is stale again "
        f"({why}); a fresh want rebuilds once, so it accepts it"
    )


def stale_inputs(fresh: Freshness | None, own: Partition) -> list[str]:
    """The inputs to want fresh (and wait for) before the rebuild: those read that are themselves stale,
    except the ones the want already waited for once (whatever their derivative did, the want then builds
    with what is live: waiting again could go on for ever)."""
    refs = {
        r.input_ref
        for r in stale_reasons(fresh, own)
        if r.kind is StaleKind.input_stale and r.input_ref is not None
    }
    awaited = fresh.awaited if fresh is not None else frozenset()
    return sorted(refs - awaited)
