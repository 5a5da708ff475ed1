"""A want's fulfilment as a timeline: one bar per job run of its tree (its own runs and its derivative
wants'), oldest first, so a user sees what took the time. A bar is the time the run waited (from being
queued to its latest attempt's start: pool slots, a batch window, and the attempts before a retry) and
the time its latest attempt ran, coloured by outcome; a run still going extends to ``now``.

Drawn from the want view the page already loaded (no query of its own), as SVG geometry for the page.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from databuild.durations import format_duration
from databuild.models import JobRun
from databuild.views.lineage import WantView

WIDTH = 1100.0  # of the drawing, labels included
LABEL_WIDTH = 330.0
ROW = 22.0
BAR = 14.0
AXIS = 24.0
LABEL_CHARS = 44
# Tick steps in seconds: the first that keeps the axis to at most MAX_TICKS ticks.
STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)
MAX_TICKS = 8


@dataclass(frozen=True)
class Bar:
    run: JobRun
    relation: str  # how the want came to follow it (executed, delegated, batched, skipped)
    label: str
    y: float
    waited: tuple[float, float]  # x and width of the wait before its latest attempt
    ran: tuple[float, float] | None  # x and width of its latest attempt; None: it never started
    summary: str  # "waited 2s · ran 14s"


@dataclass(frozen=True)
class Timeline:
    bars: list[Bar]
    more: int  # runs past the limit, not drawn
    ticks: list[tuple[float, str]]
    width: float
    height: float
    plot_x: float


def want_timeline(view: WantView, now: datetime, *, limit: int = 200) -> Timeline:
    relations: dict[str, str] = {}
    for node in view.data.nodes.values():
        for group in node.job_runs:
            for link in group.runs:
                relations.setdefault(link.job_run_id, link.relation)
    runs = sorted(
        (view.index.job_runs[run_id] for run_id in relations),
        key=lambda r: (r.created_at, r.started_at or r.created_at, r.job_run_id),
    )
    shown = runs[:limit]
    spans = [(run, *_span(run, now)) for run in shown]
    start = min((r.created_at for r in shown), default=now)
    end = max((e for _, _, e in spans), default=now)
    total = max((end - start).total_seconds(), 1.0)
    plot = WIDTH - LABEL_WIDTH - 10

    def x(at: datetime) -> float:
        return LABEL_WIDTH + (at - start).total_seconds() / total * plot

    def segment(begin: datetime, finish: datetime) -> tuple[float, float]:
        return x(begin), max(x(finish) - x(begin), 1.0)  # an instant still shows

    bars = []
    for row, (run, started, ended) in enumerate(spans):
        waited_until = started or ended
        bars.append(
            Bar(
                run=run,
                relation=relations[run.job_run_id],
                label=_label(run),
                y=AXIS + row * ROW,
                waited=segment(run.created_at, waited_until),
                ran=segment(started, ended) if started else None,
                summary=_summary(waited_until - run.created_at, ended - started if started else None),
            )
        )
    step = next((s for s in STEPS if total / s <= MAX_TICKS), STEPS[-1])
    ticks = [
        (x(start + timedelta(seconds=t)), f"+{format_duration(timedelta(seconds=t))}")
        for t in range(0, int(total) + 1, step)
    ]
    return Timeline(bars, len(runs) - len(shown), ticks, WIDTH, AXIS + len(bars) * ROW + 6, LABEL_WIDTH)


def _span(run: JobRun, now: datetime) -> tuple[datetime | None, datetime]:
    """When its latest attempt started (None: never) and when it ended (``now`` while it goes on)."""
    if run.ended_at is not None:
        ended = run.ended_at
    else:  # a run recorded before runs kept their end has its last change instead
        ended = run.updated_at if run.state.is_final else max(now, run.created_at)
    started = run.started_at if run.started_at is not None and run.started_at <= ended else None
    return started, ended


def _label(run: JobRun) -> str:
    more = f" +{len(run.outputs) - 1}" if len(run.outputs) > 1 else ""
    text = f"{run.job_label} {run.outputs[0] if run.outputs else ''}{more}"
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def _summary(waited: timedelta, ran: timedelta | None) -> str:
    parts = [f"waited {_took(waited)}"]
    if ran is not None:
        parts.append(f"ran {_took(ran)}")
    return " · ".join(parts)


def _took(value: timedelta) -> str:
    seconds = value.total_seconds()
    return f"{seconds:.1f}s" if seconds < 60 else format_duration(value)
