"""The dashboard's cost plot: per job, a bar pair per day (task-seconds spent, task-seconds saved), on one
shared axis of days so the jobs line up. Geometry only; the template draws it (autoescaped)."""

from dataclasses import dataclass

from databuild.domain.cost import CostRow

BAR = 10  # width of one bar
GAP = 6  # between two days
HEIGHT = 120  # of the bars' area
LEFT = 48  # room for the scale
BOTTOM = 18  # room for the day labels


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    height: float
    kind: str  # spent or saved
    title: str


@dataclass(frozen=True)
class DayLabel:
    x: float
    text: str


@dataclass(frozen=True)
class Chart:
    job: str
    width: float
    height: float
    top: float  # the scale's largest value, task-seconds
    bars: list[Bar]
    labels: list[DayLabel]


def charts(series: dict[str, list[CostRow]]) -> list[Chart]:
    days = sorted({row.key for rows in series.values() for row in rows})
    step = 2 * BAR + GAP
    # A label every few days, so they do not overlap (a day label is about 60 px wide).
    every = max(1, -(-60 // step))
    labels = [DayLabel(LEFT + i * step + BAR, day) for i, day in enumerate(days) if i % every == 0]
    return [_chart(job, rows, days, labels) for job, rows in sorted(series.items())]


def _chart(job: str, rows: list[CostRow], days: list[str], labels: list[DayLabel]) -> Chart:
    top = max([max(r.task_seconds, r.task_seconds_saved) for r in rows] + [1e-9])
    step = 2 * BAR + GAP
    bars: list[Bar] = []
    for row in rows:
        x = LEFT + days.index(row.key) * step
        for offset, kind, value, count in (
            (0, "spent", row.task_seconds, f"{row.builds_run} run"),
            (BAR, "saved", row.task_seconds_saved, f"{row.builds_avoided} avoided"),
        ):
            height = HEIGHT * value / top
            title = f"{row.key}: {value:,.1f} task-s {kind} ({count})"
            bars.append(Bar(x + offset, HEIGHT - height, height, kind, title))
    return Chart(job, LEFT + len(days) * step, HEIGHT + BOTTOM, top, bars, labels)
