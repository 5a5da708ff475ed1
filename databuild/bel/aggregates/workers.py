"""Worker processes: the versions each runs, recorded when it starts."""

from collections.abc import Mapping, Sequence

from sqlalchemy import select

from databuild.bel import schema as s
from databuild.bel.aggregates.base import WriteBase
from databuild.bel.reads.base import ReadBase
from databuild.bel.reads.rows import chunks
from databuild.domain import events as ev
from databuild.domain.workers import WorkerVersions


class WorkerReads(ReadBase):
    def versions(self, identities: Sequence[str]) -> list[WorkerVersions]:
        """The recorded workers of these identities (a worker that never recorded itself is left out)."""
        rows = []
        for chunk in chunks(list(identities)):
            rows += self._all(select(s.workers).where(s.workers.c.identity.in_(chunk)))
        return sorted(
            (
                WorkerVersions(
                    identity=r["identity"],
                    task_queue=r["task_queue"],
                    graph=r["graph"],
                    versions=r["versions"],
                    started_at=r["started_at"],
                )
                for r in rows
            ),
            key=lambda w: w.identity,
        )


class Workers(WorkerReads, WriteBase):
    def record(self, identity: str, task_queue: str, graph: str, versions: Mapping[str, str]) -> None:
        """A worker started serving ``task_queue`` with these job versions."""
        with self._write(f"worker:{identity}") as tx:
            tx.extend(
                [
                    ev.WorkerStarted(
                        identity=identity, task_queue=task_queue, graph=graph, versions=dict(versions)
                    )
                ]
            )
