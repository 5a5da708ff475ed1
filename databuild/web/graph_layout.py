"""A layered drawing of the graph view for the dashboard's `/graph` page, computed here so the page is
plain server-rendered SVG (no layout library, no script).

Data flows left to right: a pattern feeds the jobs that read it, a job feeds its output patterns.
1. Edges that close a cycle (a job reading an earlier partition of its own output) are set aside, found
   by a depth-first search in the nodes' order; they are drawn as arcs below the nodes.
2. Each node's column is the longest path to it from a node nobody feeds, so every edge points right.
3. Within a column, nodes are ordered by the mean position of their neighbours in the previous column
   (then the next), a few sweeps each way: the usual barycentre heuristic against crossings.
4. Columns are as wide as their widest node; nodes are centred vertically.
Text widths are estimated from a monospace font, so boxes fit their labels without measuring them.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean

from databuild.durations import format_duration
from databuild.models import PartitionStatus
from databuild.views.graph import GraphView, JobInput, JobNode, PatternNode

CHAR_WIDTH = 7.3  # of the page's 12px monospace font
LINE_HEIGHT = 16
PADDING = 10
GAP_X = 56
GAP_Y = 22
MARGIN = 16
SWEEPS = 4


@dataclass(frozen=True)
class Placed:
    key: str
    x: float
    y: float
    width: float
    height: float


@dataclass(frozen=True)
class Route:
    source: str
    target: str
    path: str  # SVG path data
    back: bool  # closes a cycle: drawn as an arc below


@dataclass(frozen=True)
class Layout:
    nodes: dict[str, Placed]
    routes: list[Route]
    width: float
    height: float


def layered(sizes: dict[str, tuple[float, float]], edges: Sequence[tuple[str, str]]) -> Layout:
    """Place nodes (``key -> (width, height)``, in a stable order) and route ``edges`` between them."""
    order = list(sizes)
    back = _back_edges(order, edges)
    forward = [e for e in edges if e not in back]
    columns = _columns(order, forward)
    _reduce_crossings(columns, forward)
    widths = [max(sizes[k][0] for k in column) for column in columns]
    heights = [sum(sizes[k][1] for k in column) + GAP_Y * (len(column) - 1) for column in columns]
    tallest = max(heights, default=0.0)
    placed: dict[str, Placed] = {}
    x = float(MARGIN)
    for column, width, height in zip(columns, widths, heights, strict=True):
        y = MARGIN + (tallest - height) / 2
        for key in column:
            w, h = sizes[key]
            placed[key] = Placed(key, x + (width - w) / 2, y, w, h)
            y += h + GAP_Y
        x += width + GAP_X
    dip = 36.0 if back else 0.0
    routes = [_route(placed[s], placed[t], (s, t) in back, dip) for s, t in edges]
    return Layout(placed, routes, max(x - GAP_X + MARGIN, 0.0), tallest + 2 * MARGIN + dip)


def _back_edges(order: list[str], edges: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
    following: dict[str, list[str]] = {key: [] for key in order}
    for source, target in edges:
        following[source].append(target)
    state: dict[str, str] = {}  # "open" while on the search path, then "done"
    back: set[tuple[str, str]] = set()
    for root in order:
        if root in state:
            continue
        state[root] = "open"
        path = [(root, iter(following[root]))]
        while path:
            node, rest = path[-1]
            found = next(rest, None)
            if found is None:
                state[node] = "done"
                path.pop()
            elif state.get(found) == "open":
                back.add((node, found))
            elif found not in state:
                state[found] = "open"
                path.append((found, iter(following[found])))
    return back


def _columns(order: list[str], forward: list[tuple[str, str]]) -> list[list[str]]:
    """Longest-path layering over acyclic ``forward`` edges (Kahn's order)."""
    following: dict[str, list[str]] = {key: [] for key in order}
    waiting = dict.fromkeys(order, 0)
    for source, target in forward:
        following[source].append(target)
        waiting[target] += 1
    column = dict.fromkeys(order, 0)
    ready = [key for key in order if waiting[key] == 0]
    for key in ready:  # grows as nodes become ready
        for target in following[key]:
            column[target] = max(column[target], column[key] + 1)
            waiting[target] -= 1
            if waiting[target] == 0:
                ready.append(target)
    columns: list[list[str]] = [[] for _ in range(max(column.values(), default=-1) + 1)]
    for key in order:
        columns[column[key]].append(key)
    return columns


def _reduce_crossings(columns: list[list[str]], forward: list[tuple[str, str]]) -> None:
    before: dict[str, list[str]] = {key: [] for column in columns for key in column}
    after: dict[str, list[str]] = {key: [] for key in before}
    for source, target in forward:
        before[target].append(source)
        after[source].append(target)
    position = {key: i for column in columns for i, key in enumerate(column)}
    for _ in range(SWEEPS):
        for sweep, neighbours in ((columns[1:], before), (columns[-2::-1], after)):
            for column in sweep:
                column.sort(
                    key=lambda k: fmean(position[n] for n in neighbours[k]) if neighbours[k] else position[k]
                )
                position.update((key, i) for i, key in enumerate(column))


def _route(source: Placed, target: Placed, back: bool, dip: float) -> Route:
    if back:  # from the bottom of the source round below to the bottom of the target
        x1, y1 = source.x + source.width / 2, source.y + source.height
        x2, y2 = target.x + target.width / 2, target.y + target.height
        low = max(y1, y2) + dip
        path = f"M{x1:.1f},{y1:.1f} C{x1:.1f},{low:.1f} {x2:.1f},{low:.1f} {x2:.1f},{y2 + 6:.1f}"
    else:
        x1, y1 = source.x + source.width, source.y + source.height / 2
        x2, y2 = target.x, target.y + target.height / 2
        mid = (x1 + x2) / 2
        path = f"M{x1:.1f},{y1:.1f} C{mid:.1f},{y1:.1f} {mid:.1f},{y2:.1f} {x2 - 6:.1f},{y2:.1f}"
    return Route(source.key, target.key, path, back)


# The graph view as boxes and arrows ------------------------------------------------------------------


@dataclass(frozen=True)
class DrawnNode:
    box: Placed
    lines: list[str]  # the first is the title
    job: JobNode | None = None
    pattern: PatternNode | None = None


@dataclass(frozen=True)
class DrawnEdge:
    route: Route
    input: JobInput | None  # None: a job's output


@dataclass(frozen=True)
class Drawing:
    width: float
    height: float
    nodes: list[DrawnNode]
    edges: list[DrawnEdge]


def pattern_key(pattern: str) -> str:
    return f"pattern:{pattern}"


def job_key(label: str) -> str:
    return f"job:{label}"


def counts_line(pattern: PatternNode) -> str:
    if not pattern.total:
        return "no partitions"
    return " · ".join(f"{pattern.counts[s]} {s.value}" for s in PartitionStatus if pattern.counts.get(s))


def policy_lines(job: JobNode) -> list[str]:
    """A job's policies in two short lines: how its runs are run, then how they are admitted."""
    p = job.policies
    attempts = p.effective.attempts
    run = (
        f"{attempts} attempt{'s' if attempts != 1 else ''} · "
        f"{format_duration(p.effective.start_to_close_timeout)} · {p.effective_executor}"
    )
    admission = [
        f"batch {p.batch}" if p.batch else "",
        f"pool {p.pool}" if p.pool else "",
        f"≤{p.max_running} running" if p.max_running else "",
    ]
    return [run, " · ".join(a for a in admission if a)] if any(admission) else [run]


def draw(view: GraphView) -> Drawing:
    # Jobs first: the search for cycles then reaches each output pattern through its job, so a cycle (a
    # job reading its own earlier partitions) is broken at the input edge and the pattern stays after it.
    labelled: dict[str, tuple[list[str], JobNode | None, PatternNode | None]] = {}
    for job in view.jobs:
        labelled[job_key(job.label)] = ([job.label, *policy_lines(job)], job, None)
    for pattern in view.patterns:
        labelled[pattern_key(pattern.pattern)] = ([pattern.pattern, counts_line(pattern)], None, pattern)
    wired: list[tuple[tuple[str, str], JobInput | None]] = []
    for job in view.jobs:
        wired += [((pattern_key(i.pattern), job_key(job.label)), i) for i in job.inputs]
        wired += [((job_key(job.label), pattern_key(out)), None) for out in job.outputs]
    layout = layered({k: _size(lines) for k, (lines, _, _) in labelled.items()}, [e for e, _ in wired])
    return Drawing(
        width=layout.width,
        height=layout.height,
        nodes=[
            DrawnNode(layout.nodes[k], lines, job, pattern) for k, (lines, job, pattern) in labelled.items()
        ],
        edges=[DrawnEdge(route, i) for route, (_, i) in zip(layout.routes, wired, strict=True)],
    )


def _size(lines: list[str]) -> tuple[float, float]:
    """The box that fits ``lines``."""
    return round(max(len(line) for line in lines) * CHAR_WIDTH + 2 * PADDING), len(
        lines
    ) * LINE_HEIGHT + PADDING
