"""Projections of the events of wants."""

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, select, update

from databuild.bel import schema as s
from databuild.bel.engine import insert_rows, update_rows
from databuild.bel.projections.common import (
    UNSUBSCRIBE,
    UPDATE_WANT,
    derivatives_by_ref,
    link,
    projects,
    projects_together,
    set_want,
    subscribe,
    workflow_of,
)
from databuild.bel.reads.rows import chunks
from databuild.domain import events as ev
from databuild.models import (
    WantState,
)


@projects_together(ev.WantCreated)
def _wants_created(conn: Connection, events: Sequence[ev.WantCreated], at: datetime) -> None:
    insert_rows(conn, s.wants, [_want_row(event, at) for event in events])
    # A want is subscribed to from its creation on, so a new want has no subscription yet.
    subscriptions = [
        {"ref": ref, "want_id": event.want_id, "workflow_id": event.workflow_id}
        for event in events
        for ref in dict.fromkeys([event.spec.ref, *event.spec.requires])
    ]
    insert_rows(conn, s.subscriptions, subscriptions)


def _want_row(event: ev.WantCreated, at: datetime) -> dict[str, Any]:
    spec = event.spec
    return {
        "want_id": event.want_id,
        "ref": spec.ref,
        "data_timestamp": spec.data_timestamp,
        "sla_seconds": None if spec.sla is None else spec.sla.total_seconds(),
        "ttl_seconds": None if spec.ttl is None else spec.ttl.total_seconds(),
        "source": spec.source.value,
        "parent_want_id": spec.parent_want_id,
        "root_want_id": spec.root_want_id or event.want_id,
        "generation": spec.generation,
        "fresh": spec.fresh,
        "fresh_of": spec.fresh_of if spec.fresh else None,
        "cause": spec.cause,
        "instance_id": None,
        "state": WantState.new.value,
        "sla_missed": False,
        "sla_deadline": spec.sla_deadline,
        "reason": None,
        "job_run_id": None,
        "decision_seq": 0,
        "opening": 0,
        "workflow_id": event.workflow_id,
        "created_at": at,
        "updated_at": at,
    }


@projects_together(ev.WantBuilding)
def _wants_building(conn: Connection, events: Sequence[ev.WantBuilding], at: datetime) -> None:
    """Wants of a group of decisions that build, in one statement for their rows and one for their links."""
    rows = [
        {
            "want_id": e.want_id,
            "updated_at": at,
            "state": WantState.building.value,
            "job_run_id": e.job_run_id,
            "decision_seq": e.decision_seq,
        }
        for e in events
    ]
    update_rows(conn, s.wants, rows)
    link(conn, [(e.want_id, e.job_run_id, e.relation) for e in events])


@projects(ev.WantAwaitingRequirements)
def _want_awaiting_requirements(conn: Connection, event: ev.WantAwaitingRequirements, at: datetime) -> None:
    set_want(conn, event.want_id, at, state=WantState.upstream_building.value)


@projects(ev.WantWaitingExternal)
def _want_waiting_external(conn: Connection, event: ev.WantWaitingExternal, at: datetime) -> None:
    set_want(
        conn, event.want_id, at, state=WantState.upstream_building.value, decision_seq=event.decision_seq
    )


@projects(ev.WantBlocked)
def _want_blocked(conn: Connection, event: ev.WantBlocked, at: datetime) -> None:
    set_want(
        conn,
        event.want_id,
        at,
        state=WantState.upstream_building.value,
        decision_seq=event.decision_seq,
        reason=event.reason,
        job_run_id=None,
    )
    subscribe(conn, event.want_id, event.refs, workflow_of(conn, event.want_id))


@projects(ev.WantUpstreamBuilding)
def _want_upstream_building(conn: Connection, event: ev.WantUpstreamBuilding, at: datetime) -> None:
    set_want(conn, event.want_id, at, state=WantState.upstream_building.value)
    if event.missing:
        # By ref, not by position: an input live by then has no derivative want.
        child_of = derivatives_by_ref(conn, event.derivative_want_ids)
        insert_rows(
            conn,
            s.derivatives,
            [
                {
                    "want_id": event.want_id,
                    "job_run_id": event.job_run_id,
                    "ref": ref,
                    "derivative_want_id": child_of.get(ref),
                }
                for ref in event.missing
            ],
        )
    subscribe(conn, event.want_id, event.missing, workflow_of(conn, event.want_id))


_END_WANTS = (
    update(s.wants)
    .where(s.one_of(s.wants.c.want_id, "ids"))
    .values(
        state=bindparam("end_state"),
        reason=bindparam("end_reason"),
        instance_id=bindparam("end_instance"),
        updated_at=bindparam("at"),
    )
)


@projects_together(ev.WantFinished)
def _wants_finished(conn: Connection, events: Sequence[ev.WantFinished], at: datetime) -> None:
    # Wants that end alike (a backfill's cancel ends thousands so) are one UPDATE per few hundred.
    alike: dict[tuple[str, str | None, str | None], list[str]] = {}
    for w in events:
        alike.setdefault((w.state.value, w.reason, w.instance_id), []).append(w.want_id)
    for (state, reason, instance_id), want_ids in alike.items():
        for chunk in chunks(want_ids):
            ending = {"end_state": state, "end_reason": reason, "end_instance": instance_id, "at": at}
            conn.execute(_END_WANTS, {"ids": chunk, **ending})
            conn.execute(UNSUBSCRIBE, {"ids": chunk})


_NEXT_OPENING = (
    update(s.wants).where(s.wants.c.want_id == bindparam("pk")).values(opening=s.wants.c.opening + 1)
)


@projects(ev.WantRetried)
def _want_retried(conn: Connection, event: ev.WantRetried, at: datetime) -> None:
    steps = {} if event.decision_seq is None else {"decision_seq": event.decision_seq}
    set_want(
        conn,
        event.want_id,
        at,
        state=WantState.new.value,
        reason=None,
        instance_id=None,
        job_run_id=None,
        **steps,
    )
    conn.execute(_NEXT_OPENING, {"pk": event.want_id})
    want = conn.execute(
        select(s.wants.c.ref, s.wants.c.workflow_id).where(s.wants.c.want_id == event.want_id)
    ).one()
    subscribe(conn, event.want_id, [want.ref], want.workflow_id)  # it ended unsubscribed


@projects(ev.WantSlaMissed)
def _want_sla_missed(conn: Connection, event: ev.WantSlaMissed, at: datetime) -> None:
    conn.execute(UPDATE_WANT, {"pk": event.want_id, "sla_missed": True})


@projects(ev.WantSlaAtRisk)
def _want_sla_at_risk(conn: Connection, event: ev.WantSlaAtRisk, at: datetime) -> None:
    conn.execute(UPDATE_WANT, {"pk": event.want_id, "sla_at_risk": True})
