"""What an alert says and who receives it: pure rules, no channel or clock in sight.

An alert is about one subject (a want, a job run, a backfill) and is sent once per subject and kind; its
``key`` names that. A channel receives an alert when its tags allow it: tags ``kind:<kind>``,
``job:<label>`` and ``ref:<glob>`` each narrow what a channel gets (any tag of one category may match;
every category the channel uses must), and a channel without such tags gets every alert."""

from collections.abc import Callable
from datetime import datetime, timedelta
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Any

from pydantic import Field

from databuild.backfill import BackfillProgress
from databuild.domain.estimates import Confidence, Estimate
from databuild.models import JobRun, Model, Want


class AlertKind(StrEnum):
    sla_at_risk = "sla_at_risk"
    sla_missed = "sla_missed"
    want_failed = "want_failed"
    partition_fail_locked = "partition_fail_locked"
    upstream_late = "upstream_late"
    backfill_finished = "backfill_finished"


TITLES = {
    AlertKind.sla_at_risk: "SLA at risk",
    AlertKind.sla_missed: "SLA missed",
    AlertKind.want_failed: "want failed",
    AlertKind.partition_fail_locked: "partition fail-locked",
    AlertKind.upstream_late: "upstream partition late",
    AlertKind.backfill_finished: "backfill finished",
}
# How a channel shows it (apprise's notification types).
SEVERITY = {
    AlertKind.sla_at_risk: "warning",
    AlertKind.sla_missed: "failure",
    AlertKind.want_failed: "failure",
    AlertKind.partition_fail_locked: "failure",
    AlertKind.upstream_late: "warning",
    AlertKind.backfill_finished: "success",
}


class Alert(Model):
    kind: AlertKind
    subject: str = Field(description="what it is sent once for: a want id, a job run id or a backfill id")
    ref: str | None = Field(default=None, description="the partition it is about (the first, of several)")
    refs: list[str] = Field(default=[], description="every partition it is about")
    want_id: str | None = None
    job_label: str | None = None
    deadline: datetime | None = Field(default=None, description="the want's SLA deadline")
    eta: datetime | None = Field(default=None, description="when the partition is estimated live (p90)")
    at: datetime = Field(description="when it was raised (workflow time for SLA alerts)")
    summary: str = Field(description="one line: what happened")
    detail: str = Field(default="", description="why, and what to look at")
    link: str = Field(description="the dashboard page of its subject (a path, or a URL once sent)")

    @property
    def key(self) -> str:
        return f"{self.kind.value}:{self.subject}"

    @property
    def title(self) -> str:
        return f"DataBuild: {TITLES[self.kind]}: {self.ref or self.subject}"

    def body(self) -> str:
        lines = [self.summary]
        if self.detail:
            lines.append(self.detail)
        if self.deadline is not None:
            lines.append(f"deadline: {self.deadline:%Y-%m-%d %H:%M:%S} UTC")
        if self.eta is not None:
            lines.append(f"estimated live (p90): {self.eta:%Y-%m-%d %H:%M:%S} UTC")
        lines.append(f"details: {self.link}")
        return "\n".join(lines)

    def fields(self) -> dict[str, str]:
        """The alert as flat text fields, for channels that carry structured data (JSON webhooks)."""
        values = {
            "kind": self.kind.value,
            "subject": self.subject,
            "ref": self.ref,
            "refs": ",".join(self.refs) or None,
            "want_id": self.want_id,
            "job_label": self.job_label,
            "deadline": self.deadline.isoformat() if self.deadline else None,
            "eta": self.eta.isoformat() if self.eta else None,
            "at": self.at.isoformat(),
            "link": self.link,
        }
        return {k: v for k, v in values.items() if v is not None}


def receives(tags: set[str], alert: Alert) -> bool:
    """Whether a channel with ``tags`` gets ``alert`` (see the module's rule); other tags are ignored."""
    refs = alert.refs or [alert.ref or ""]
    tests: dict[str, Callable[[str], bool]] = {
        "kind": lambda value: value == alert.kind.value,
        "job": lambda value: value == alert.job_label,
        "ref": lambda value: any(fnmatchcase(ref, value) for ref in refs),
    }
    for category, test in tests.items():
        values = [t.partition(":")[2] for t in tags if t.startswith(category + ":")]
        if values and not any(test(v) for v in values):
            return False
    return True


# What each event says. ``at`` is when it happened (workflow time for SLA timers).
def _about_want(kind: AlertKind, want: Want, job_label: str | None, at: datetime, **said: Any) -> Alert:
    """An alert about ``want``'s own partition, linked to its page."""
    return Alert(
        kind=kind,
        subject=want.want_id,
        ref=want.ref,
        refs=[want.ref],
        want_id=want.want_id,
        job_label=job_label,
        deadline=want.sla_deadline,
        at=at,
        link=f"/wants/{want.want_id}",
        **said,
    )


def sla_missed(want: Want, job_label: str | None, at: datetime) -> Alert:
    summary = f"{want.ref} is not built and its SLA deadline has passed; the want keeps working ({want.state.value})"
    return _about_want(AlertKind.sla_missed, want, job_label, at, summary=summary, detail=want.reason or "")


def sla_at_risk(want: Want, job_label: str | None, estimate: Estimate, at: datetime) -> Alert:
    assert want.sla_deadline is not None
    late = estimate.eta_p90 - want.sla_deadline
    slowest = f"; the slowest remaining step is {estimate.slowest_step}" if estimate.slowest_step else ""
    guess = (
        f" (at the earliest: {', '.join(estimate.unknown + estimate.external)} cannot be timed)"
        if estimate.confidence is Confidence.none
        else f" ({estimate.confidence.value} confidence)"
    )
    return _about_want(
        AlertKind.sla_at_risk,
        want,
        job_label,
        at,
        eta=estimate.eta_p90,
        summary=f"{want.ref} is predicted to miss its SLA by {_span(late)}{guess}",
        detail=f"p90 estimate from the durations of the jobs left to run{slowest}",
    )


def upstream_late(want: Want, external: list[str], at: datetime) -> Alert:
    return Alert(
        kind=AlertKind.upstream_late,
        subject=want.want_id,
        ref=external[0],
        refs=external,
        want_id=want.want_id,
        deadline=want.sla_deadline,
        at=at,
        summary=f"upstream partition(s) {', '.join(external)} not yet available; {want.ref} needs them "
        "to meet its SLA",
        detail="announced by an upstream graph or `databuild publish`",
        link=f"/wants/{want.want_id}",
    )


def want_failed(want: Want, job_label: str | None, at: datetime) -> Alert:
    summary = f"want for {want.ref} failed"
    return _about_want(AlertKind.want_failed, want, job_label, at, summary=summary, detail=want.reason or "")


def fail_locked(run: JobRun, at: datetime) -> Alert:
    return Alert(
        kind=AlertKind.partition_fail_locked,
        subject=run.job_run_id,
        ref=run.outputs[0] if run.outputs else None,
        refs=run.outputs,
        job_label=run.job_label,
        want_id=run.want_id,
        at=at,
        summary=f"job {run.job_label} failed; {', '.join(run.outputs)} fail-locked until resolved",
        detail=f"{run.reason or 'no reason given'}. After fixing the cause: `databuild resolve {run.outputs[0]}`"
        if run.outputs
        else run.reason or "",
        link=f"/job-runs/{run.job_run_id}",
    )


def backfill_finished(progress: BackfillProgress, at: datetime) -> Alert:
    counts = ", ".join(f"{n} {state.value}" for state, n in sorted(progress.by_state.items()))
    return Alert(
        kind=AlertKind.backfill_finished,
        subject=progress.backfill_id,
        ref=progress.request.pattern,
        at=at,
        summary=f"backfill {progress.backfill_id} of {progress.request.pattern} finished: {counts}",
        link=f"/backfills/{progress.backfill_id}",
    )


def _span(value: timedelta) -> str:
    seconds = max(int(value.total_seconds()), 1)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return " ".join(f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n) or "0s"
