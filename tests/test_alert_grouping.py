"""The rules of a channel's alert queue on their own (databuild.domain.alerts): grouping by kind and job,
digests with counts, retries of a channel that does not take them, duplicates and giving up. The same
rules on the real stack: tests/test_alerts.py."""

from datetime import UTC, datetime, timedelta

import pytest

from databuild.domain.alerts import (
    DIGEST_REFS,
    LAST_RETRY,
    Alert,
    AlertKind,
    ChannelState,
    group_of,
    retry_delay,
)

pytestmark = pytest.mark.unit

T0 = datetime(2024, 1, 1, tzinfo=UTC)
WINDOW = timedelta(minutes=10)


def alert(kind: AlertKind, n: int, job: str | None = "daily_job") -> Alert:
    ref = f"daily/2024-01-{n:02d}"
    return Alert(
        kind=kind,
        subject=f"want-{n}" if kind is AlertKind.want_failed else f"jr-{n}",
        ref=ref,
        refs=[ref],
        job_label=job,
        at=T0,
        summary=f"{kind.value} {ref}",
        detail="RuntimeError: boom",
        link=f"/wants/want-{n}",
    )


def send_due(state: ChannelState, now: datetime, sent: list[Alert]) -> ChannelState:
    """What the channel's workflow does at ``now`` with a channel that takes everything."""
    while (due := state.next_due(WINDOW)) is not None and due[1] <= now:
        state, group = state.taken(due[0].key)
        sent.append(group.message(follow_up=group.key in state.sent))
        state = state.delivered(group, now)
    return state


def test_a_burst_of_one_jobs_failures_is_its_first_alert_then_one_digest_per_kind() -> None:
    state, sent = ChannelState(), list[Alert]()
    for n in range(1, 31):  # a backfill of 30 days of a job that always fails, within a minute
        at = T0 + timedelta(seconds=2 * n)
        for kind in (AlertKind.partition_fail_locked, AlertKind.want_failed):
            state = send_due(state.queued(alert(kind, n), at), at, sent)
    assert [(m.kind, m.count) for m in sent] == [
        (AlertKind.partition_fail_locked, 1),
        (AlertKind.want_failed, 1),
    ]
    assert sent[0] == alert(AlertKind.partition_fail_locked, 1)  # the first goes as it was raised
    assert state.wake_at(WINDOW) == T0 + timedelta(seconds=2) + WINDOW
    end = T0 + WINDOW + timedelta(seconds=2)
    state = send_due(state.tidied(end, WINDOW, timedelta(days=1))[0], end, sent)  # as the workflow does
    digests = {m.kind: m for m in sent[2:]}
    assert len(sent) == 4 and {m.count for m in digests.values()} == {29}
    failed = digests[AlertKind.want_failed]
    assert failed.summary.startswith(
        "wants for 29 more partitions of job daily_job failed: daily/2024-01-02, "
    )
    assert failed.summary.endswith("(+19 more)") and failed.refs[-1] == "daily/2024-01-30"
    assert failed.link == "/job-runs?job=daily_job" and failed.title.endswith("(29): job daily_job")
    assert failed.fields()["count"] == "29" and "The first: RuntimeError: boom" in failed.detail
    locked = digests[AlertKind.partition_fail_locked]
    assert locked.summary.startswith("29 more runs of job daily_job failed and fail-locked their outputs")
    # The windows close with nothing more: the next alert of the group goes at once again.
    state, _ = state.tidied(T0 + 3 * WINDOW, WINDOW, timedelta(days=1))
    assert state.wake_at(WINDOW) is None
    later = T0 + 3 * WINDOW
    state = send_due(state.queued(alert(AlertKind.want_failed, 31), later), later, sent)
    assert sent[-1] == alert(AlertKind.want_failed, 31)


def test_groups_are_per_kind_and_job_and_an_alert_about_no_job_groups_by_kind() -> None:
    assert group_of(alert(AlertKind.want_failed, 1)) == "want_failed:job:daily_job"
    assert group_of(alert(AlertKind.want_failed, 1, job="other")) == "want_failed:job:other"
    assert group_of(alert(AlertKind.backfill_finished, 1, job=None)) == "backfill_finished"
    state, sent = ChannelState(), list[Alert]()
    for n, job in enumerate(("a", "b", "c")):
        state = send_due(state.queued(alert(AlertKind.want_failed, n, job=job), T0), T0, sent)
    assert [m.job_label for m in sent] == ["a", "b", "c"]  # each job's first, at once


def test_a_channel_that_does_not_take_a_message_is_retried_with_backoff_and_the_rest_fold_in() -> None:
    assert [retry_delay(n).total_seconds() for n in range(1, 8)] == [10, 20, 40, 80, 160, 320, 600]
    assert retry_delay(1000) == LAST_RETRY
    state = ChannelState().queued(alert(AlertKind.want_failed, 1), T0)
    state, group = state.taken("want_failed:job:daily_job")
    state = state.queued(alert(AlertKind.want_failed, 2), T0)  # while the try was on its way
    state = state.not_delivered(group)
    assert state.failures == 1
    state, group = state.taken("want_failed:job:daily_job")
    state = state.not_delivered(group)
    for n in range(3, 9):
        state = state.queued(alert(AlertKind.want_failed, n), T0 + timedelta(minutes=n))
    assert state.failures == 2
    waiting = state.waiting["want_failed:job:daily_job"]
    assert waiting.count == 8 and waiting.first == alert(AlertKind.want_failed, 1)
    assert waiting.refs == [f"daily/2024-01-{n:02d}" for n in range(1, 9)]
    # Once it takes one, the count of failures starts again, and the message counted them all.
    state, group = state.taken(waiting.key)
    message = group.message(follow_up=False)
    assert message.count == 8 and message.summary.startswith("wants for 8 partitions of job daily_job failed")
    assert state.delivered(group, T0 + timedelta(hours=1)).failures == 0


def test_an_alert_queued_twice_counts_once_and_old_groups_are_given_up() -> None:
    state = ChannelState()
    for _ in range(3):  # a retried hand-over
        state = state.queued(alert(AlertKind.want_failed, 1), T0)
    assert state.waiting["want_failed:job:daily_job"].count == 1
    state = state.queued(alert(AlertKind.sla_missed, 2), T0 + timedelta(hours=20))
    state, given_up = state.tidied(T0 + timedelta(days=1), WINDOW, timedelta(days=1))
    assert given_up == 1 and list(state.waiting) == ["sla_missed:job:daily_job"]
    # One held for its window is tried from the window's end: a give-up time shorter than the window
    # does not drop it unsent.
    held, group = state.taken("sla_missed:job:daily_job")
    held = held.delivered(group, T0 + timedelta(hours=21))
    held = held.queued(alert(AlertKind.sla_missed, 3), T0 + timedelta(hours=21, minutes=1))
    assert held.tidied(T0 + timedelta(hours=21, minutes=9), WINDOW, timedelta(minutes=2))[1] == 0
    assert held.tidied(T0 + timedelta(hours=21, minutes=12), WINDOW, timedelta(minutes=2))[1] == 1


def test_a_digest_names_a_bounded_number_of_partitions() -> None:
    state = ChannelState()
    for n in range(1, 200):
        many = alert(AlertKind.want_failed, 1).model_copy(
            update={"subject": f"want-{n}", "ref": f"p/{n}", "refs": [f"p/{n}"], "summary": f"p/{n} failed"}
        )
        state = state.queued(many, T0)
    group = state.waiting["want_failed:job:daily_job"]
    message = group.message(follow_up=True)
    assert message.count == 199 and len(message.refs) == DIGEST_REFS
    assert message.summary.endswith("p/10 (+189 more)")
    assert message.detail.splitlines()[-2] == "- and 189 more"
