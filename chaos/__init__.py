"""Proof under faults: the demo graph on a stack of real processes (a Temporal dev server on a file
database, `databuild worker` processes, a PostgreSQL BEL of its own), a backfill-sized workload, faults
at moments drawn from a seed, and the invariants that must hold afterwards. It stands on the product
and its demo, as a user's harness would, outside the installed package.

Used by ``tests/test_chaos.py`` (a short run in CI: two restarts mid-build, then the other kinds at random) and
``bench/bench_chaos.py`` (the soak, ``make chaos``).

Faults:

* ``kill_worker``: SIGKILL one worker's process group (Python and its Spark JVM), restart it a moment
  later;
* ``restart_temporal``: SIGKILL the Temporal dev server, start it again on the same database file;
* ``terminate_bel``: ``pg_terminate_backend`` every connection to the BEL's database;
* ``bel_outage``: the BEL's database refuses every connection for ``outage_seconds`` (a failover);
* ``restart_stack``: SIGKILL the Temporal server and every worker at once, then start them all again.

Steering (``steer``): the first round also registers a real backfill of the ``daily_users`` its wants
need, and pauses, resumes, cancels and retries it at moments drawn from the seed, under the faults;
after the last retry every want of it must still end successful.

The seed fixes the schedule (which fault, which worker, the gaps between them); the interleaving with
the work still depends on timing, so a seed reproduces the schedule, not the exact run.

Invariants, checked after the faults stop:

* no want open in the BEL whose workflow is closed: every want that is not final in the BEL has a
  running Temporal workflow, and within the settle time every want ends, successfully;
* each (ref, taint generation, inputs read) built at most once: at most one ``PartitionLive`` of a job
  run per ref and set of inputs between two taints of it (a retried attempt may write data, but only one
  commit makes an instance; no partition is rebuilt more than once per new input);
* no partition fail-locked (the demo's jobs never fail: a fail-lock is a fault's, e.g. a database error's);
* the last late data wins: no reader of the late corrections read an older one than its day's live one;
* no build lock held by a dead run: every partition ``building`` is locked by a job run whose workflow
  is running;
* the projections equal a rebuild from the events alone;
* every live partition is readable and complete: its folder holds the instance the BEL says is live,
  it reads back as Parquet, and its content adds up (the demo's data is deterministic).

Its graph (``graph``) is the demo's and an incremental job fed by late corrections the run announces.
Its modules: ``config`` (what a run does), ``stack`` (the processes, and calls retried through faults),
``workload`` (the wants, rounds and late data), ``steering``, ``faults``, ``invariants`` (the checks and
the report they fill) and ``run`` (the run itself).
"""

from chaos.config import FAULT_KINDS, ChaosConfig, FaultKind
from chaos.invariants import ChaosReport
from chaos.run import run_chaos
from chaos.steering import STEERING_STEPS

__all__ = ["FAULT_KINDS", "STEERING_STEPS", "ChaosConfig", "ChaosReport", "FaultKind", "run_chaos"]
