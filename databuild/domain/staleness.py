"""Which live instances are stale, and why: derived from what each was built from and by which job
version, never stored by hand.

A live instance is stale when its job's version changed since it was built (a recorded version only: an
unknown one never counts), when an input it read has a newer live instance or was tainted, or when an
input it read is itself stale (transitively)."""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from pydantic import Field

from databuild.models import InstanceStatus, Model


class StaleKind(StrEnum):
    """Why a live instance is stale (databuild.domain.staleness)."""

    code_changed = "code_changed"  # its job's version changed since it was built
    input_superseded = "input_superseded"  # an input it read has a newer live instance
    input_tainted = "input_tainted"  # an input it read was tainted
    input_stale = "input_stale"  # an input it read is itself stale


class StaleReason(Model):
    kind: StaleKind
    input_ref: str | None = Field(default=None, description="of an input reason: the input")
    input_instance_id: str | None = Field(default=None, description="the input's instance it read")
    live_instance_id: str | None = Field(
        default=None, description="input_superseded: the input's live instance now"
    )
    built_version: str | None = Field(default=None, description="code_changed: the version that built it")
    current_version: str | None = Field(default=None, description="code_changed: its job's version now")

    def __str__(self) -> str:
        match self.kind:
            case StaleKind.code_changed:
                return f"job version changed {self.built_version} -> {self.current_version}"
            case StaleKind.input_superseded:
                return f"read {self.input_ref} {self.input_instance_id}, since superseded by {self.live_instance_id}"
            case StaleKind.input_tainted:
                return f"read {self.input_ref} {self.input_instance_id}, since tainted"
            case StaleKind.input_stale:
                return f"read {self.input_ref} {self.input_instance_id}, which is stale"


class StalePartition(Model):
    """A live partition whose data is stale, and why."""

    ref: str
    instance_id: str
    job_label: str | None = Field(description="the job that built it; None: external")
    job_run_id: str | None
    job_version: str | None = Field(description="the version that built it; None: unknown")
    reasons: list[StaleReason]


@dataclass(frozen=True)
class Read:
    """An input instance one instance was built from, as it stands now."""

    ref: str
    instance_id: str
    status: InstanceStatus  # of the instance read
    live_instance_id: str | None  # the ref's live instance now (None: the ref is not live)


@dataclass(frozen=True)
class Built:
    """A live instance: what built it and what it read."""

    instance_id: str
    ref: str
    job_label: str | None  # None: external
    job_run_id: str | None
    version: str | None  # None: not recorded
    reads: tuple[Read, ...]


def staleness(
    built: Mapping[str, Built], versions: Mapping[str, str], targets: Iterable[str]
) -> dict[str, list[StaleReason]]:
    """The reasons each of ``targets`` (ids of ``built``) is stale, for the stale ones. ``built`` holds
    the targets and every live instance they read, transitively; ``versions`` the graph's job versions
    now (a job no longer in the graph has no version to compare)."""
    memo: dict[str, list[StaleReason]] = {}
    for target in targets:
        _resolve(target, built, versions, memo)
    return {t: memo[t] for t in dict.fromkeys(targets) if memo.get(t)}


def _resolve(
    target: str, built: Mapping[str, Built], versions: Mapping[str, str], memo: dict[str, list[StaleReason]]
) -> None:
    """Depth first without recursion (a lineage chain can be longer than Python's stack); an instance
    met again on its own path (impossible in recorded lineage) counts as not stale there."""
    on_path: set[str] = set()
    stack: list[tuple[str, bool]] = [(target, False)]
    while stack:
        node, expanded = stack.pop()
        if node in memo or node not in built:
            continue
        if expanded:
            memo[node] = _reasons(built[node], versions, memo)
            on_path.discard(node)
            continue
        if node in on_path:
            continue
        on_path.add(node)
        stack.append((node, True))
        stack.extend(
            (r.instance_id, False) for r in built[node].reads if _is_live(r) and r.instance_id not in memo
        )


def _is_live(read: Read) -> bool:
    return read.status is InstanceStatus.live and read.live_instance_id == read.instance_id


def _reasons(
    instance: Built, versions: Mapping[str, str], memo: Mapping[str, list[StaleReason]]
) -> list[StaleReason]:
    reasons: list[StaleReason] = []
    current = versions.get(instance.job_label) if instance.job_label is not None else None
    if instance.version is not None and current is not None and current != instance.version:
        reasons.append(
            StaleReason(kind=StaleKind.code_changed, built_version=instance.version, current_version=current)
        )
    for read in sorted(instance.reads, key=lambda r: (r.ref, r.instance_id)):
        kind = _read_kind(read, memo)
        if kind is not None:
            reasons.append(
                StaleReason(
                    kind=kind,
                    input_ref=read.ref,
                    input_instance_id=read.instance_id,
                    live_instance_id=read.live_instance_id if kind is StaleKind.input_superseded else None,
                )
            )
    return reasons


def _read_kind(read: Read, memo: Mapping[str, list[StaleReason]]) -> StaleKind | None:
    if read.status is InstanceStatus.tainted:
        return StaleKind.input_tainted
    if _is_live(read):
        return StaleKind.input_stale if memo.get(read.instance_id) else None
    if read.live_instance_id is not None:
        return StaleKind.input_superseded
    return None  # retired with nothing live after it (resolved): no newer data to have read
