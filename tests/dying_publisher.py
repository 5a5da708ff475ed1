"""`databuild worker` whose process dies (SIGKILL, with its Spark JVM) right after its first commit to an
Iceberg table: the BEL made the instance live, the table has its snapshot, and the BEL never recorded that
commit (tests/test_iceberg.py). Run as `python -m tests.dying_publisher worker`."""

import os
import signal
from collections.abc import Mapping, Sequence

from databuild.jobs.tables.iceberg import IcebergTables
from databuild.jobs.tables.spec import Committed, Placed, TableSpec
from worker.commands import main

commit = IcebergTables.publish


def commit_then_die(
    self: IcebergTables, spec: TableSpec, placed: Sequence[Placed], summary: Mapping[str, str]
) -> Committed:
    commit(self, spec, placed, summary)
    os.killpg(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


IcebergTables.publish = commit_then_die  # type: ignore[method-assign]

if __name__ == "__main__":
    main()
