"""Whether a new instance's schema may go into its table: the columns it adds are added, the types it
widens are widened, and everything that would lose data readers rely on is refused, naming the table, the
column and the fix. Types are Iceberg's names (``long``, ``string``, ``decimal(10, 2)``, ``struct<...>``)."""

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from databuild.errors import TableSchemaError

# Iceberg's type promotions: a reader of the old type reads the new one without loss.
_WIDENED = {("int", "long"), ("float", "double")}
_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")


@dataclass(frozen=True)
class SchemaChange:
    added: tuple[str, ...] = ()  # new columns, in the instance's order
    widened: tuple[str, ...] = ()  # columns whose type the table widens

    @property
    def evolves(self) -> bool:
        return bool(self.added or self.widened)


def widens(old: str, new: str) -> bool:
    """Whether ``new`` holds every value of ``old`` as Iceberg promotes types (``int`` to ``long``, ``float``
    to ``double``, a decimal to a wider one of the same scale)."""
    if (old, new) in _WIDENED:
        return True
    before, after = _DECIMAL.fullmatch(old), _DECIMAL.fullmatch(new)
    return bool(before and after and after[2] == before[2] and int(after[1]) > int(before[1]))


def schema_change(
    table: str,
    columns: Mapping[str, str],
    partitioned_by: Sequence[str],
    new_columns: Mapping[str, str],
    new_partitioned_by: Sequence[str],
) -> SchemaChange:
    """What the table ``table`` (``columns``: name to type, partitioned by ``partitioned_by``) must change
    to take an instance of ``new_columns`` partitioned by ``new_partitioned_by``. Raises
    ``TableSchemaError`` for a change that would lose data."""
    if list(partitioned_by) != list(new_partitioned_by):
        raise TableSchemaError(
            f"table {table} is partitioned by {', '.join(partitioned_by)}, and the job now writes it by "
            f"{', '.join(new_partitioned_by) or 'nothing'}: give the pattern a new table "
            f"(@graph.job(..., tables={{pattern: 'new_name'}})), or keep its placeholders"
        )
    dropped = [name for name in columns if name not in new_columns]
    if dropped:
        raise TableSchemaError(
            f"table {table}: the new instance has no column {dropped[0]!r}, which the table's other partitions "
            f"hold; write it again (null where it has no value), or give the pattern a new table"
            + (f" ({len(dropped) - 1} more column(s) dropped)" if len(dropped) > 1 else "")
        )
    widened = []
    for name, old in columns.items():
        new = new_columns[name]
        if new == old:
            continue
        if not widens(old, new):
            raise TableSchemaError(
                f"table {table}: column {name!r} is {old} in the table and {new} in the new instance, which "
                f"{'narrows it' if widens(new, old) else 'changes its type'}; cast it to {old} in the job, or "
                "give the pattern a new table"
            )
        widened.append(name)
    added = tuple(name for name in new_columns if name not in columns)
    return SchemaChange(added=added, widened=tuple(widened))
