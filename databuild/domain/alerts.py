"""What an alert says and who receives it: pure rules, no channel or clock in sight.

An alert is about one subject (a want, a job run, a backfill) and is raised once per subject and kind;
its ``key`` names that. A channel receives an alert when its tags allow it: tags ``kind:<kind>``,
``job:<label>`` and ``ref:<glob>`` each narrow what a channel gets (any tag of one category may match;
every category the channel uses must), and a channel without such tags gets every alert."""

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Any
from urllib.parse import urlencode

from pydantic import Field

from databuild.backfill import BackfillProgress
from databuild.domain.checks import Recheck
from databuild.domain.estimates import Confidence, Estimate
from databuild.models import CheckResult, JobRun, Model, Want


class AlertKind(StrEnum):
    sla_at_risk = "sla_at_risk"
    sla_missed = "sla_missed"
    want_failed = "want_failed"
    partition_fail_locked = "partition_fail_locked"
    upstream_late = "upstream_late"
    backfill_finished = "backfill_finished"
    check_warning = "check_warning"


TITLES = {
    AlertKind.sla_at_risk: "SLA at risk",
    AlertKind.sla_missed: "SLA missed",
    AlertKind.want_failed: "want failed",
    AlertKind.partition_fail_locked: "partition fail-locked",
    AlertKind.upstream_late: "upstream partition late",
    AlertKind.backfill_finished: "backfill finished",
    AlertKind.check_warning: "check warning",
}
# How a channel shows it (apprise's notification types).
SEVERITY = {
    AlertKind.sla_at_risk: "warning",
    AlertKind.sla_missed: "failure",
    AlertKind.want_failed: "failure",
    AlertKind.partition_fail_locked: "failure",
    AlertKind.upstream_late: "warning",
    AlertKind.backfill_finished: "success",
    AlertKind.check_warning: "warning",
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
    count: int = Field(default=1, description="how many alerts it tells of: more than one in a digest")

    @property
    def key(self) -> str:
        return f"{self.kind.value}:{self.subject}"

    @property
    def title(self) -> str:
        times = f" ({self.count})" if self.count > 1 else ""
        return f"DataBuild: {TITLES[self.kind]}{times}: {self.ref or self.subject}"

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
            "count": str(self.count),
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


def check_warnings(run: JobRun, failed: Sequence[CheckResult], at: datetime) -> Alert:
    """The run published instances that failed warning checks (once per run)."""
    refs = list(dict.fromkeys(r.ref for r in failed))
    return Alert(
        kind=AlertKind.check_warning,
        subject=run.job_run_id,
        ref=refs[0] if refs else None,
        refs=refs,
        job_label=run.job_label,
        want_id=run.want_id,
        at=at,
        summary=f"job {run.job_label} published {', '.join(refs)}, which failed warning checks",
        detail="; ".join(f"check {r.name} of {r.ref}: {r.message}" for r in failed),
        link=f"/partitions/{refs[0]}" if refs else f"/job-runs/{run.job_run_id}",
    )


def check_fail_locked(recheck: Recheck, job_label: str | None, at: datetime) -> Alert:
    """A re-run of a partition's checks failed a blocking one: its instance is out of service and the
    partition fail-locked (once per instance)."""
    failed = [r for r in recheck.results if r.blocks]
    return Alert(
        kind=AlertKind.partition_fail_locked,
        subject=f"check:{recheck.instance_id}",
        ref=recheck.ref,
        refs=[recheck.ref],
        job_label=job_label,
        at=at,
        summary=f"{recheck.ref} failed a blocking check on its live instance; fail-locked until resolved",
        detail="; ".join(f"check {r.name}: {r.message}" for r in failed)
        + f". After fixing the cause: `databuild resolve {recheck.ref}`",
        link=f"/partitions/{recheck.ref}",
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


# Grouping and per-channel delivery ----------------------------------------------------------------
# Each channel has one queue of alerts (``ChannelState``, the state of its workflow). Alerts of one kind
# about one job (any alert of a kind about no job) form a group: the first of a group goes out at once;
# those that come within ``window`` of its last message wait for the window's end and go as one digest
# with their count. A channel that does not take a message is tried again after a growing delay, one
# message at a time, while its alerts go on queueing (and folding into their groups' digests).
DIGEST_REFS = 50  # partitions a digest names in its fields; the rest are counted
DIGEST_SHOWN = 10  # partitions and member summaries a digest names in its text
REMEMBERED = 1000  # alert keys a channel remembers, so that a queued alert queued again counts once
REMEMBER_FOR = timedelta(hours=1)  # longer than any retry of the activity that queues an alert
FIRST_RETRY = timedelta(seconds=10)
LAST_RETRY = timedelta(minutes=10)  # the longest a channel waits between two tries

DIGESTS = {
    AlertKind.want_failed: "wants for {n} {more}partitions{of_job} failed",
    AlertKind.partition_fail_locked: "{n} {more}runs{of_job} failed and fail-locked their outputs",
    AlertKind.sla_missed: "{n} {more}partitions{of_job} missed their SLA deadline",
    AlertKind.sla_at_risk: "{n} {more}partitions{of_job} are predicted to miss their SLA",
    AlertKind.upstream_late: "{n} {more}wants{of_job} wait for late upstream partitions",
    AlertKind.backfill_finished: "{n} {more}backfills finished",
    AlertKind.check_warning: "{n} {more}runs{of_job} published data that failed warning checks",
}


def group_of(alert: Alert) -> str:
    """The group an alert is sent with: its kind and job, or its kind alone when it is about no job (a
    backfill's end, an upstream partition)."""
    return f"{alert.kind.value}:job:{alert.job_label}" if alert.job_label else alert.kind.value


class AlertGroup(Model):
    """The alerts of one group waiting to go to one channel: the first whole, the rest counted."""

    key: str
    first: Alert
    count: int = 1
    refs: list[str] = Field(
        default=[], description=f"the partitions they are about (the first {DIGEST_REFS})"
    )
    lines: list[str] = Field(default=[], description=f"the summaries of the first {DIGEST_SHOWN}")
    since: datetime = Field(description="when the first of them was queued")
    last: datetime = Field(description="when the last of them was queued")

    @classmethod
    def of(cls, alert: Alert, at: datetime) -> "AlertGroup":
        return cls(
            key=group_of(alert),
            first=alert,
            refs=_refs(alert)[:DIGEST_REFS],
            lines=[alert.summary],
            since=at,
            last=at,
        )

    def merged(self, later: "AlertGroup | None") -> "AlertGroup":
        """This group with the alerts of ``later`` (of the same group, queued after) folded in."""
        if later is None:
            return self
        refs = list(dict.fromkeys([*self.refs, *later.refs]))[:DIGEST_REFS]
        return self.model_copy(
            update={
                "count": self.count + later.count,
                "refs": refs,
                "lines": [*self.lines, *later.lines][:DIGEST_SHOWN],
                "last": max(self.last, later.last),
            }
        )

    def message(self, follow_up: bool) -> Alert:
        """What goes to the channel: the alert itself when it is alone, else a digest that counts them
        (``follow_up``: a message of the group went out within the window, so these are "more")."""
        if self.count == 1:
            return self.first
        first, label = self.first, self.first.job_label
        said = DIGESTS[first.kind].format(
            n=self.count, more="more " if follow_up else "", of_job=f" of job {label}" if label else ""
        )
        named = ", ".join(self.refs[:DIGEST_SHOWN])
        unnamed = self.count - min(len(self.refs), DIGEST_SHOWN)
        listed = [f"- {line}" for line in self.lines]
        if self.count > len(self.lines):
            listed.append(f"- and {self.count - len(self.lines)} more")
        return Alert(
            kind=first.kind,
            subject=f"job {label}" if label else TITLES[first.kind],
            refs=self.refs,
            job_label=label,
            at=first.at,
            summary=f"{said}: {named}" + (f" (+{unnamed} more)" if unnamed > 0 and named else ""),
            detail="\n".join([*listed, *([f"The first: {first.detail}"] if first.detail else [])]),
            link=_job_runs_link(label) if label else first.link,
            count=self.count,
        )


def _refs(alert: Alert) -> list[str]:
    return alert.refs or ([alert.ref] if alert.ref else [])


def _job_runs_link(label: str) -> str:
    return "/job-runs?" + urlencode({"job": label})


class ChannelState(Model):
    """One channel's queue: the groups waiting, when each group's last message went out, the alerts
    queued lately (to count each once), and how many tries in a row failed. Each change makes a new
    state."""

    waiting: dict[str, AlertGroup] = {}
    sent: dict[str, datetime] = {}
    seen: dict[str, datetime] = {}
    failures: int = 0

    def queued(self, alert: Alert, at: datetime) -> "ChannelState":
        """With ``alert`` folded into its group; the same state if it was queued before (a retried
        hand-over)."""
        if alert.key in self.seen:
            return self
        seen = {**self.seen, alert.key: at}
        if len(seen) > REMEMBERED:
            del seen[min(seen, key=seen.__getitem__)]
        group = AlertGroup.of(alert, at)
        waiting = self.waiting.get(group.key)
        merged = group if waiting is None else waiting.merged(group)
        return self.model_copy(update={"seen": seen, "waiting": {**self.waiting, group.key: merged}})

    def due_at(self, group: AlertGroup, window: timedelta) -> datetime:
        """When ``group`` goes: as soon as it waits, unless a message of its group went out within the
        window; then at the window's end."""
        last = self.sent.get(group.key)
        return group.since if last is None or group.since >= last + window else last + window

    def next_due(self, window: timedelta) -> tuple[AlertGroup, datetime] | None:
        """The group that goes next, and when."""
        due = [(group, self.due_at(group, window)) for group in self.waiting.values()]
        return min(due, key=lambda pair: (pair[1], pair[0].since), default=None)

    def taken(self, key: str) -> "tuple[ChannelState, AlertGroup]":
        """The group out of the queue while it is delivered: its alerts queued meanwhile wait anew."""
        waiting = dict(self.waiting)
        group = waiting.pop(key)
        return self.model_copy(update={"waiting": waiting}), group

    def delivered(self, group: AlertGroup, at: datetime) -> "ChannelState":
        return self.model_copy(update={"sent": {**self.sent, group.key: at}, "failures": 0})

    def not_delivered(self, group: AlertGroup) -> "ChannelState":
        """The group back in the queue, ahead of its alerts that came meanwhile; one more failure (wait
        ``retry_delay(failures)`` before the next try)."""
        merged = group.merged(self.waiting.get(group.key))
        return self.model_copy(
            update={"waiting": {**self.waiting, group.key: merged}, "failures": self.failures + 1}
        )

    def tidied(
        self, now: datetime, window: timedelta, give_up_after: timedelta
    ) -> "tuple[ChannelState, int]":
        """Closed windows and old keys forgotten, and the groups tried for ``give_up_after`` since they
        were due or their last alert came given up; with how many alerts were given up. A window stays
        open until the digest it held back goes, which tells that its alerts are "more"."""
        keep = {
            k: g for k, g in self.waiting.items() if now < max(g.last, self.due_at(g, window)) + give_up_after
        }
        given_up = sum(g.count for k, g in self.waiting.items() if k not in keep)
        state = self.model_copy(
            update={
                "waiting": keep,
                "sent": {k: at for k, at in self.sent.items() if now < at + window or k in keep},
                "seen": {k: at for k, at in self.seen.items() if now < at + REMEMBER_FOR},
            }
        )
        return state, given_up

    def wake_at(self, window: timedelta) -> datetime | None:
        """When a group is due or a window closes; None when the channel has nothing left to do."""
        times = [at + window for at in self.sent.values()]
        if (due := self.next_due(window)) is not None:
            times.append(due[1])
        return min(times, default=None)


def retry_delay(failures: int) -> timedelta:
    """The wait before trying a channel again after ``failures`` tries in a row failed: doubling from
    FIRST_RETRY up to LAST_RETRY."""
    delay: timedelta = FIRST_RETRY * 2 ** min(max(failures - 1, 0), 20)
    return min(delay, LAST_RETRY)
