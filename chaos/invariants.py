"""What must hold after the faults stop, each check filling its part of the report."""

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sqlalchemy import select

from chaos.config import FINAL
from chaos.graph import CORRECTED_USERS
from chaos.stack import ChaosStack, read
from databuild.bel import BuildEventLog
from databuild.bel import schema as s
from databuild.jobs.storage import Storage
from databuild.models import Partition, PartitionStatus, Want, WantState
from databuild.testing import projection_rows

# The harness runs the whole product as a user would: the demo graph.
from examples.demo import EVENTS_PER_DAY, WINDOW_DAYS


@dataclass
class ChaosReport:
    seed: int
    faults: Counter[str] = field(default_factory=Counter)
    steering: Counter[str] = field(default_factory=Counter)  # backfill pauses, resumes, cancels, retries
    rounds: int = 0
    wants: int = 0
    successful: int = 0
    builds: int = 0
    retries: int = 0  # job attempts beyond each run's first (a killed attempt is retried)
    unfinished: list[str] = field(default_factory=list)  # wants not successful after the settle time
    stuck: list[str] = field(default_factory=list)  # wants open in the BEL whose workflow is closed
    # (ref, taint generation, inputs read) built more than once: a partition rebuilt without new input
    duplicates: list[str] = field(default_factory=list)
    fail_locked: list[str] = field(default_factory=list)  # partitions fail-locked (none should be)
    behind: list[str] = field(default_factory=list)  # readers of an older correction than the last
    dead_locks: list[str] = field(default_factory=list)  # building partitions whose run is not running
    projection_diffs: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    worker_exits: int = 0  # workers that exited without being killed (restarted, as a supervisor would)
    wall_s: float = 0.0

    def violations(self) -> list[str]:
        checks = {
            "wants not successful": self.unfinished,
            "wants open in the BEL whose workflow is closed": self.stuck,
            "duplicate builds (rebuilt without a new input)": self.duplicates,
            "partitions fail-locked": self.fail_locked,
            "readers behind the last late data": self.behind,
            "build locks held by dead runs": self.dead_locks,
            "projections differ from a rebuild": self.projection_diffs,
            "live partitions unreadable or incomplete": self.unreadable,
        }
        return [f"{name} ({len(found)}): {'; '.join(found[:5])}" for name, found in checks.items() if found]

    def summary(self) -> str:
        faults = ", ".join(f"{kind} {n}" for kind, n in sorted(self.faults.items())) or "none"
        steering = ", ".join(f"{step} {n}" for step, n in sorted(self.steering.items())) or "none"
        lines = [
            f"seed                 {self.seed}",
            f"faults injected      {sum(self.faults.values())} ({faults})",
            f"backfill steered     {sum(self.steering.values())} ({steering})",
            f"rounds               {self.rounds}",
            f"wants completed      {self.successful} of {self.wants}",
            f"partitions built     {self.builds} (job attempts retried: {self.retries})",
            f"duplicate builds     {len(self.duplicates)} (a partition rebuilt without a new input)",
            f"fail-locked          {len(self.fail_locked)}"
            f" (by a database error: {sum(_by_database(r) for r in self.fail_locked)})",
            f"behind late data     {len(self.behind)}",
            f"stuck wants          {len(self.stuck)} (open in the BEL, workflow closed)",
            f"dead build locks     {len(self.dead_locks)}",
            f"projection diffs     {len(self.projection_diffs)}",
            f"unreadable           {len(self.unreadable)}",
            f"worker self-exits    {self.worker_exits}",
            f"wall time            {self.wall_s:.1f} s",
        ]
        return "\n".join(lines)


async def check_liveness(stack: ChaosStack, report: ChaosReport) -> None:
    """Stuck wants and build locks of dead runs, with Temporal and every worker up again."""
    report.stuck = await stuck_wants(stack)
    report.dead_locks = await dead_locks(stack)


def _open_wants(bel: BuildEventLog) -> list[tuple[str, str]]:
    with bel.reader.connect() as conn:
        rows = conn.execute(
            select(s.wants.c.want_id, s.wants.c.workflow_id).where(s.wants.c.state.not_in(FINAL))
        ).all()
    return [(want_id, workflow_id) for want_id, workflow_id in rows]


def _locks(bel: BuildEventLog) -> list[tuple[str, str, str]]:
    with bel.reader.connect() as conn:
        rows = conn.execute(
            select(s.partitions.c.ref, s.job_runs.c.job_run_id, s.job_runs.c.workflow_id)
            .join(s.job_runs, s.job_runs.c.job_run_id == s.partitions.c.building_job_run_id)
            .where(s.partitions.c.status == PartitionStatus.building.value)
        ).all()
    return [(ref, job_run_id, workflow_id) for ref, job_run_id, workflow_id in rows]


def _want(bel: BuildEventLog, want_id: str) -> Want:
    return bel.wants.get(want_id)


def _partition(bel: BuildEventLog, ref: str) -> Partition:
    return bel.partitions.get(ref)


async def stuck_wants(stack: ChaosStack) -> list[str]:
    """Wants not final in the BEL without a running workflow. A workflow records its want's final state
    before it ends, so a second look at the BEL settles a race with one that just ended."""
    stuck = []
    for want_id, workflow_id in await read(stack, _open_wants):
        if not await stack.workflow_running(workflow_id):
            now = await read(stack, _want, want_id)
            if not now.state.is_final:
                stuck.append(f"{now.ref} {want_id} is {now.state.value} but {workflow_id} is not running")
    return stuck


async def dead_locks(stack: ChaosStack) -> list[str]:
    """Partitions being built by a job run whose workflow is not running (a run releases or commits
    its outputs before its workflow ends)."""
    dead = []
    for ref, job_run_id, workflow_id in await read(stack, _locks):
        if not await stack.workflow_running(workflow_id):
            now = await read(stack, _partition, ref)
            if now.status is PartitionStatus.building and now.building_job_run_id == job_run_id:
                dead.append(f"{ref} locked by {job_run_id}, whose workflow is not running")
    return dead


def check_outcomes(bel: BuildEventLog, report: ChaosReport) -> None:
    with bel.reader.connect() as conn:
        wants = conn.execute(
            select(s.wants.c.ref, s.wants.c.want_id, s.wants.c.state, s.wants.c.reason)
        ).all()
    report.wants = len(wants)
    report.successful = sum(1 for w in wants if w.state == WantState.successful.value)
    report.unfinished = [
        f"{w.ref} {w.want_id} {w.state}: {w.reason or ''}"
        for w in wants
        if w.state != WantState.successful.value
    ]


def check_builds(bel: BuildEventLog, report: ChaosReport) -> None:
    """A build is a committed instance of a job run: a ``PartitionLive`` with a job run. Each ref may
    have one per taint generation (the generation counts the ``PartitionTainted`` events before it) and
    set of inputs read (a new input instance, late data, rebuilds it once; its own previous instance, an
    incremental job's, is no input)."""
    with bel.reader.connect() as conn:
        rows = conn.execute(
            select(s.events.c.type, s.events.c.ref, s.events.c.data)
            .where(s.events.c.type.in_(["PartitionLive", "PartitionTainted"]))
            .order_by(s.events.c.idx)
        ).all()
        read_rows = conn.execute(
            select(s.consumers.c.output_instance_id, s.consumers.c.input_instance_id)
            .join(
                s.partition_instances, s.partition_instances.c.instance_id == s.consumers.c.input_instance_id
            )
            .where(s.partition_instances.c.ref != s.consumers.c.output_ref)
        ).all()
    reads: dict[str, set[str]] = {}
    for output, input_instance in read_rows:
        reads.setdefault(output, set()).add(input_instance)
    generation: Counter[str] = Counter()
    built: dict[tuple[str, int, frozenset[str]], list[str]] = {}
    for kind, ref, data in rows:
        if kind == "PartitionTainted":
            generation[ref] += 1
        elif data.get("job_run_id"):
            inputs = frozenset(reads.get(data["instance_id"], set()))
            built.setdefault((ref, generation[ref], inputs), []).append(data["job_run_id"])
    report.builds = len(built)
    with bel.reader.connect() as conn:
        attempts = conn.execute(select(s.job_runs.c.attempts).where(s.job_runs.c.attempts > 1)).all()
    report.retries = sum(n - 1 for (n,) in attempts)
    report.duplicates = [
        f"{ref} generation {gen} built {len(runs)} times from the same inputs (job runs {', '.join(runs)})"
        for (ref, gen, _inputs), runs in built.items()
        if len(runs) > 1
    ]


def check_fail_locks(bel: BuildEventLog, report: ChaosReport) -> None:
    """No partition fail-locked: the demo's jobs never fail, so a fail-lock is a fault's doing (the BEL's
    database lost while a finished build recorded itself, before its outcome was retried in place)."""
    with bel.reader.connect() as conn:
        rows = conn.execute(
            select(s.partitions.c.ref, s.partitions.c.reason).where(
                s.partitions.c.status == PartitionStatus.failed.value
            )
        ).all()
    report.fail_locked = [f"{ref}: {reason}" for ref, reason in rows]


def _by_database(finding: str) -> bool:
    return any(sign in finding for sign in ("OperationalError", "DatabaseUnavailable", "server closed"))


def check_news(bel: BuildEventLog, report: ChaosReport) -> None:
    """Every reader of the late corrections read the last one of its day (the last news wins)."""
    with bel.reader.connect() as conn:
        feeds = list(
            conn.execute(select(s.partitions.c.ref).where(s.partitions.c.ref.like("corrections/%"))).scalars()
        )
    report.behind = [
        f"{r.ref} read {r.input_read} of {r.input_ref}, whose live instance is {r.input_live}"
        for r in bel.lineage.late_readers(feeds)
    ]


def dump_events(bel: BuildEventLog, path: Path) -> None:
    with bel.reader.connect() as conn, path.open("w") as out:
        for idx, at, data in conn.execute(
            select(s.events.c.idx, s.events.c.at, s.events.c.data).order_by("idx")
        ):
            out.write(json.dumps({"idx": idx, "at": at.isoformat(), **data}) + "\n")


def check_projections(bel: BuildEventLog, report: ChaosReport) -> None:
    """Projections equal a rebuild from the events alone (with nothing else writing)."""
    before = projection_rows(bel)
    bel.events.rebuild_projections()
    after = projection_rows(bel)
    for table, rows in before.items():
        if rows != after[table]:
            only_now = sorted(set(rows) - set(after[table]))[:2]
            only_rebuilt = sorted(set(after[table]) - set(rows))[:2]
            report.projection_diffs.append(f"{table}: kept {only_now}, rebuilt {only_rebuilt}")


def check_partitions(bel: BuildEventLog, storage: Storage, report: ChaosReport) -> None:
    with bel.reader.connect() as conn:
        live = conn.execute(
            select(s.partitions.c.ref, s.partitions.c.instance_id).where(
                s.partitions.c.status == PartitionStatus.live.value, s.partitions.c.external.is_(False)
            )
        ).all()
    for ref, instance_id in live:
        location = storage.local_path(storage.instance_key(ref, instance_id))
        if location is None or not location.is_dir():
            report.unreadable.append(f"{ref}: the BEL says instance {instance_id}, whose location is missing")
            continue
        try:
            problem = content_problem(ref, pq.read_table(location))
        except Exception as error:  # anything pyarrow cannot read is the finding
            problem = f"unreadable: {error}"
        if problem:
            report.unreadable.append(f"{ref}: {problem}")


# What adds up in each demo partition (its data is deterministic): the row count, or a column's sum.
DEMO_CONTENT: dict[str, tuple[str | None, int]] = {
    "raw_events": (None, EVENTS_PER_DAY),
    "daily_users": ("events", EVENTS_PER_DAY),  # every event of the day, counted per user
    "daily_summary": ("events", WINDOW_DAYS * EVENTS_PER_DAY),
    "top_spenders": (None, 10),
    "user_totals": (None, CORRECTED_USERS),  # one row per corrected user, however often it merged
}


def content_problem(ref: str, table: pa.Table) -> str | None:
    """What does not add up in a demo partition, or None."""
    column, expected = DEMO_CONTENT[ref.partition("/")[0]]
    found = table.num_rows if column is None else int(pc.sum(table.column(column)).as_py() or 0)
    what = "rows" if column is None else f"sum({column})"
    return None if found == expected else f"{what} is {found}, expected {expected}"
