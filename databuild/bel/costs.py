"""Job run costs (``job_run_costs``) and the delegations they value (``delegations``), in bulk: what the
cost views (``databuild.views.cost``) and ``/metrics`` total."""

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select

from databuild.bel import schema as s
from databuild.bel.base import ReadBase, WriteBase, run_key
from databuild.bel.rows import chunks
from databuild.domain import events as ev
from databuild.domain.cost import AttemptCost, DelegationFact, RunOutputs, SparkCost

# Reports read every cost and delegation in their range: rows this log wrote from validated events are
# built without validating them again (model_construct), which was most of a report's time.


def _attempt(row: Any) -> AttemptCost:
    return AttemptCost.model_construct(
        job_run_id=row["job_run_id"],
        attempt=row["attempt"],
        job_label=row["job_label"],
        executor=row["executor"],
        cost=None if row["cost"] is None else SparkCost.model_construct(**row["cost"]),
        unknown_reason=row["unknown_reason"],
        at=row["recorded_at"],
    )


class CostReads(ReadBase):
    def attempt_costs(self, since: datetime | None = None) -> list[AttemptCost]:
        """Every attempt's recorded cost (recorded at or after ``since``), oldest first."""
        query = select(s.job_run_costs).order_by(s.job_run_costs.c.recorded_at)
        if since is not None:
            query = query.where(s.job_run_costs.c.recorded_at >= since)
        return [_attempt(row) for row in self._all(query)]

    def attempt_costs_of(self, job_run_ids: Sequence[str]) -> list[AttemptCost]:
        """The recorded costs of these runs' attempts, by run, then attempt."""
        found: list[AttemptCost] = []
        for chunk in chunks(job_run_ids):
            query = select(s.job_run_costs).where(s.job_run_costs.c.job_run_id.in_(chunk))
            found += [_attempt(row) for row in self._all(query)]
        return sorted(found, key=lambda a: (a.job_run_id, a.attempt))

    def delegation_facts(self, since: datetime | None = None) -> list[DelegationFact]:
        """Every delegation (made at or after ``since``), oldest first."""
        d = s.delegations.c
        query = select(d.want_id, d.ref, d.delegated_to, d.kind, d.at).order_by(d.id)
        if since is not None:
            query = query.where(d.at >= since)
        return [DelegationFact.model_construct(**row) for row in self._all(query)]

    def run_outputs(self, job_run_ids: Sequence[str]) -> dict[str, RunOutputs]:
        """The job and outputs of each of these runs that exists, by id."""
        found: dict[str, RunOutputs] = {}
        r = s.job_runs.c
        for chunk in chunks(job_run_ids):
            query = select(r.job_run_id, r.job_label, r.outputs).where(r.job_run_id.in_(chunk))
            for row in self._all(query):
                found[row["job_run_id"]] = RunOutputs.model_construct(
                    job_label=row["job_label"], outputs=row["outputs"]
                )
        return found


class CostCommands(CostReads, WriteBase):
    def record_cost(self, cost: ev.JobRunCostRecorded) -> bool:
        """Record what an attempt cost, however it ended (once: a second record of it is ignored).
        Returns whether this call recorded it."""
        with self._write(run_key(cost.job_run_id)) as tx:
            c = s.job_run_costs.c
            exists = tx.conn.execute(
                select(c.attempt).where(c.job_run_id == cost.job_run_id, c.attempt == cost.attempt)
            ).first()
            if exists is not None:
                return False
            tx.append(cost)
            return True
