"""Job run costs (``job_run_costs``) and the delegations they value (``delegations``), in bulk: what the
cost views (``databuild.views.cost``) and ``/metrics`` total."""

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter
from sqlalchemy import select

from databuild.bel import schema as s
from databuild.bel.base import ReadBase, WriteBase, run_key
from databuild.bel.rows import chunks
from databuild.domain import events as ev
from databuild.domain.cost import AttemptCost, DelegationFact, RunOutputs

# Reports read every cost and delegation in their range: validated a list at a time (one call into
# pydantic's core for tens of thousands of rows, not one each).
_ATTEMPTS = TypeAdapter(list[AttemptCost])
_DELEGATIONS = TypeAdapter(list[DelegationFact])


def _attempts(rows: Sequence[Any]) -> list[AttemptCost]:
    return _ATTEMPTS.validate_python(
        [
            {
                "job_run_id": row["job_run_id"],
                "attempt": row["attempt"],
                "job_label": row["job_label"],
                "executor": row["executor"],
                "cost": row["cost"],
                "unknown_reason": row["unknown_reason"],
                "at": row["recorded_at"],
            }
            for row in rows
        ]
    )


class CostReads(ReadBase):
    def attempt_costs(self, since: datetime | None = None) -> list[AttemptCost]:
        """Every attempt's recorded cost (recorded at or after ``since``), oldest first."""
        query = select(s.job_run_costs).order_by(s.job_run_costs.c.recorded_at)
        if since is not None:
            query = query.where(s.job_run_costs.c.recorded_at >= since)
        return _attempts(self._all(query))

    def attempt_costs_of(self, job_run_ids: Sequence[str]) -> list[AttemptCost]:
        """The recorded costs of these runs' attempts, by run, then attempt."""
        found: list[AttemptCost] = []
        for chunk in chunks(job_run_ids):
            query = select(s.job_run_costs).where(s.job_run_costs.c.job_run_id.in_(chunk))
            found += _attempts(self._all(query))
        return sorted(found, key=lambda a: (a.job_run_id, a.attempt))

    def delegation_facts(self, since: datetime | None = None) -> list[DelegationFact]:
        """Every delegation (made at or after ``since``), oldest first."""
        d = s.delegations.c
        query = select(d.want_id, d.ref, d.delegated_to, d.kind, d.at).order_by(d.id)
        if since is not None:
            query = query.where(d.at >= since)
        return _DELEGATIONS.validate_python(self._all(query))

    def run_outputs(self, job_run_ids: Sequence[str]) -> dict[str, RunOutputs]:
        """The job and outputs of each of these runs that exists, by id."""
        found: dict[str, RunOutputs] = {}
        r = s.job_runs.c
        for chunk in chunks(job_run_ids):
            query = select(r.job_run_id, r.job_label, r.outputs).where(r.job_run_id.in_(chunk))
            for row in self._all(query):
                found[row["job_run_id"]] = RunOutputs(job_label=row["job_label"], outputs=row["outputs"])
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
