"""`databuild worker` whose process dies (SIGKILL, with its Spark JVM) as it is about to make its first
commit to an Iceberg table: the BEL made the instance live, and the table never heard of it
(tests/test_iceberg.py). Run as `python -m tests.dying_publisher worker`."""

import os
import signal
from collections.abc import Mapping, Sequence

from databuild.jobs.tables.iceberg import IcebergTables
from databuild.jobs.tables.spec import Committed, Placed, TableSpec
from worker.commands import main


def die_instead(
    self: IcebergTables, spec: TableSpec, placed: Sequence[Placed], summary: Mapping[str, str]
) -> Committed:
    os.killpg(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


IcebergTables.publish = die_instead  # type: ignore[method-assign]

if __name__ == "__main__":
    main()
