"""The user's graph: jobs declared by their output patterns, and what a job body sees."""

from databuild.graph.context import JobContext
from databuild.graph.definition import Graph, InputsFn, Job, JobFn, JobTarget, Pattern, Resolution, load_graph

__all__ = [
    "Graph",
    "InputsFn",
    "Job",
    "JobContext",
    "JobFn",
    "JobTarget",
    "Pattern",
    "Resolution",
    "load_graph",
]
