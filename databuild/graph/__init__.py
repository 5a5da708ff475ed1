"""The user's graph: jobs declared by their output patterns, and what a job body sees."""

from databuild.graph.checks import (
    Check,
    CheckContext,
    Verdict,
    accepted_values,
    custom,
    not_null,
    row_count,
    schema,
    unique,
)
from databuild.graph.context import JobContext
from databuild.graph.definition import Graph, InputsFn, Job, JobFn, JobTarget, Pattern, Resolution
from databuild.graph.loading import load_graph

__all__ = [
    "Check",
    "CheckContext",
    "Graph",
    "InputsFn",
    "Job",
    "JobContext",
    "JobFn",
    "JobTarget",
    "Pattern",
    "Resolution",
    "Verdict",
    "accepted_values",
    "custom",
    "load_graph",
    "not_null",
    "row_count",
    "schema",
    "unique",
]
