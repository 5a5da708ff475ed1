"""The interface every table format implements. A format changes one table at a time and never decides
what its partitions should hold: the publisher tells it, from the BEL."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from databuild.jobs.tables.spec import Committed, Placed, TableSpec
from databuild.models import TableFormatName


@dataclass(frozen=True)
class TableState:
    """What a format says of one of its tables."""

    table: str  # namespace.table
    catalog: str  # where it is registered (no secrets)
    exists: bool
    snapshot_id: int | None = None  # its current snapshot (Iceberg)
    committed_at: datetime | None = None  # of its current snapshot
    location: str | None = None
    metadata: str | None = None  # its current metadata file (Iceberg): what `iceberg_scan` and others open


class TableFormat(Protocol):
    @property
    def name(self) -> TableFormatName: ...

    def qualified(self, spec: TableSpec) -> str:
        """``namespace.table``, as the BEL records it."""
        ...

    def audit(self, spec: TableSpec, placed: Sequence[Placed]) -> None:
        """Before the BEL commit that makes these instances of the table live: raise ``TableSchemaError``
        if the table cannot take them without losing data."""
        ...

    def publish(self, spec: TableSpec, placed: Sequence[Placed], summary: Mapping[str, str]) -> Committed:
        """Make each partition of ``placed`` show its instance, in one commit labelled with ``summary``.
        Idempotent: a commit already made of these instances is found, not made again."""
        ...

    def withdraw(self, spec: TableSpec, placed: Sequence[Placed], summary: Mapping[str, str]) -> Committed:
        """Take the partitions of ``placed`` out of the table, in one commit."""
        ...

    def listed(self, spec: TableSpec) -> list[dict[str, str]]:
        """The partition values the table holds now (to find what it holds that the BEL says is not live)."""
        ...

    def describe(self, spec: TableSpec) -> TableState: ...

    def expire(self, spec: TableSpec, keep: set[int], older_than: datetime) -> list[int]:
        """Expire the snapshots older than ``older_than`` but those of ``keep`` and the current one;
        returns their ids."""
        ...
