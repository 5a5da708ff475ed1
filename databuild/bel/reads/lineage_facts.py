"""What staleness is derived from (databuild.domain.staleness): live instances with the job and version
that built them, and the instances each was built from as they stand now, in bulk."""

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.sql import Select

from databuild.bel import schema as s
from databuild.bel.reads.base import ReadBase
from databuild.bel.reads.rows import chunks, ref_conditions
from databuild.domain.late_data import LateReader
from databuild.domain.staleness import Built, Read
from databuild.models import InstanceStatus, PartitionStatus

_LIVE = PartitionStatus.live.value
_OUT = s.partitions.alias("output_partition")
_IN = s.partition_instances.alias("input_instance")
_IN_REF = s.partitions.alias("input_partition")
# An instance's partition is found by its ref (the key); partitions.instance_id has no index, and joining
# on it alone made the database scan every live partition to find a few instances' (half a second at
# 150,000 partitions).
_OUT_OF_READ = (_OUT.c.instance_id == s.consumers.c.output_instance_id) & (
    _OUT.c.ref == s.consumers.c.output_ref
)

# A read of one of the reading run's own outputs is the previous instance it built on (an incremental
# job's): that the run superseded it is no news, so it is never a late or a stale read.
_NOT_PREVIOUS = ~(
    select(s.job_run_outputs.c.ref)
    .where(s.job_run_outputs.c.job_run_id == s.consumers.c.job_run_id, s.job_run_outputs.c.ref == _IN.c.ref)
    .exists()
)


class LineageFactReads(ReadBase):
    def live_built(
        self, ref_glob: str | None = None, *, stale_under: Mapping[str, str] | None = None
    ) -> dict[str, Built]:
        """Every live instance (of refs matching ``ref_glob``), by id: two queries, whatever their number.
        ``stale_under`` (the graph's job versions, by label): only those that can be stale under them, that
        read an input or were built by another version of their job. The others cannot be (most of a big
        estate: its sources and what reads nothing), and reading them made a count over a million
        instances take 17 s."""
        where = [_OUT.c.status == _LIVE, *ref_conditions(_OUT.c.ref, None, ref_glob)]
        if stale_under is None:
            return self._built(where, where)
        i, c = s.partition_instances.c, s.consumers.c
        read_any = select(c.id).where(c.output_instance_id == i.instance_id).exists()
        other_version = [
            (s.job_runs.c.job_label == label) & i.job_version.is_not(None) & (i.job_version != version)
            for label, version in stale_under.items()
        ]
        return self._built([*where, or_(read_any, *other_version)], where)

    def built_by_id(self, instance_ids: Sequence[str]) -> dict[str, Built]:
        """Those of these instances that are live, by id (as ``live_built``): two queries per chunk."""
        found: dict[str, Built] = {}
        i, c = s.partition_instances.c, s.consumers.c
        for chunk in chunks(instance_ids):
            live = _OUT.c.status == _LIVE
            ids = {"ids": chunk}
            found |= self._built(
                [live, s.one_of(i.instance_id, "ids")], [live, s.one_of(c.output_instance_id, "ids")], ids
            )
        return found

    def late_readers(self, refs: Sequence[str], *, of: bool = True) -> list[LateReader]:
        """The live instances that read an older instance of one of these refs than its live one (with
        ``of=False``: the live instances of these refs that read an older instance of any input than its
        live one, e.g. a rebuild that ended behind news heard while it ran), with the job that built each
        and its data time (of the wants its run built that ref for, the earliest; else of any want of the
        run). Three queries per chunk of refs."""
        found: list[LateReader] = []
        for chunk in chunks(refs):
            rows = self._all(_LATE_READS_OF if of else _LATE_READS_BY, {"refs": chunk})
            times = self._data_times({r["job_run_id"] for r in rows})
            for r in rows:
                of_run = times.get(r["job_run_id"], {})
                at = of_run.get(r["ref"]) or min(of_run.values(), default=None)
                if at is None:  # a run no want is linked to (none is, yet): nothing to place it in time
                    continue
                found.append(
                    LateReader(
                        r["ref"],
                        r["output_instance_id"],
                        r["job_label"],
                        at,
                        r["input_ref"],
                        r["input_instance_id"],
                        r["live_instance_id"],
                    )
                )
        return found

    def _data_times(self, job_run_ids: set[str]) -> dict[str, dict[str, datetime]]:
        """Per job run, per ref: the earliest data time of the wants linked to the run for that ref."""
        times: dict[str, dict[str, datetime]] = {}
        for chunk in chunks(sorted(job_run_ids)):
            for r in self._all(_DATA_TIMES, {"ids": chunk}):
                of_run = times.setdefault(r["job_run_id"], {})
                at = r["data_timestamp"]
                of_run[r["ref"]] = min(at, of_run.get(r["ref"], at))
        return times

    def _built(
        self, instances_where: list[Any], reads_where: list[Any], params: dict[str, Any] | None = None
    ) -> dict[str, Built]:
        reads: dict[str, list[Read]] = {}
        for r in self._all(_reads().where(*reads_where), params):
            live = r["live_instance_id"] if r["input_ref_status"] == _LIVE else None
            reads.setdefault(r["output_instance_id"], []).append(
                Read(r["input_ref"], r["input_instance_id"], InstanceStatus(r["input_status"]), live)
            )
        return {
            r["instance_id"]: Built(
                r["instance_id"],
                r["ref"],
                r["job_label"],
                r["job_run_id"],
                r["job_version"],
                tuple(dict.fromkeys(reads.get(r["instance_id"], []))),  # a read recorded twice counts once
            )
            for r in self._all(_instances().where(*instances_where), params)
        }


def _instances() -> Select[Any]:
    i = s.partition_instances
    return (
        select(i.c.instance_id, i.c.ref, i.c.job_run_id, i.c.job_version, s.job_runs.c.job_label)
        .select_from(
            _OUT.join(i, (i.c.instance_id == _OUT.c.instance_id) & (i.c.ref == _OUT.c.ref)).outerjoin(
                s.job_runs, s.job_runs.c.job_run_id == i.c.job_run_id
            )
        )
        .order_by(i.c.ref)
    )


def _late_reads() -> Select[Any]:
    """Reads of an instance that is no longer its ref's live one, by a live instance (a reader that
    was itself superseded is no one's concern)."""
    c = s.consumers
    return (
        select(
            _OUT.c.ref,
            c.c.output_instance_id,
            c.c.job_run_id,
            s.job_runs.c.job_label,
            _IN.c.ref.label("input_ref"),
            c.c.input_instance_id,
            _IN_REF.c.instance_id.label("live_instance_id"),
        )
        .select_from(
            c.join(_OUT, _OUT_OF_READ)
            .join(_IN, _IN.c.instance_id == c.c.input_instance_id)
            .join(_IN_REF, _IN_REF.c.ref == _IN.c.ref)
            .join(s.job_runs, s.job_runs.c.job_run_id == c.c.job_run_id)
        )
        .where(
            _OUT.c.status == _LIVE,
            _IN_REF.c.status == _LIVE,
            _IN_REF.c.instance_id != c.c.input_instance_id,
            _NOT_PREVIOUS,
        )
        .order_by(_OUT.c.ref, _IN.c.ref)
    )


def _reads() -> Select[Any]:
    c = s.consumers
    return (
        select(
            c.c.output_instance_id,
            c.c.input_instance_id,
            _IN.c.ref.label("input_ref"),
            _IN.c.status.label("input_status"),
            _IN_REF.c.instance_id.label("live_instance_id"),
            _IN_REF.c.status.label("input_ref_status"),
        )
        .select_from(
            c.join(_OUT, _OUT_OF_READ)
            .join(_IN, _IN.c.instance_id == c.c.input_instance_id)
            .outerjoin(_IN_REF, _IN_REF.c.ref == _IN.c.ref)
        )
        .where(_NOT_PREVIOUS)
    )


# Built once (see bel.rows): the late reads of a chunk of refs, and the data times of a chunk of runs' wants.
_LATE_READS_OF = _late_reads().where(s.one_of(_IN.c.ref, "refs"))
_LATE_READS_BY = _late_reads().where(s.one_of(_OUT.c.ref, "refs"))
_DATA_TIMES = (
    select(s.want_job_runs.c.job_run_id, s.wants.c.ref, s.wants.c.data_timestamp)
    .select_from(s.want_job_runs.join(s.wants, s.wants.c.want_id == s.want_job_runs.c.want_id))
    .where(s.one_of(s.want_job_runs.c.job_run_id, "ids"))
)
