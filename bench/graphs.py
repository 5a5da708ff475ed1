"""The graph the benchmarks run: one trivial Spark job and one external input pattern."""

from typing import TYPE_CHECKING

from databuild.graph import Graph

if TYPE_CHECKING:
    from databuild.job_context import JobContext

graph = Graph("bench")
graph.external("live/{n}")


@graph.job("trivial/{n}")
def trivial(ctx: "JobContext", n: str) -> None:
    """The smallest real Spark job: ten rows written as the output partition."""
    ctx.write(f"trivial/{n}", ctx.spark.range(10))
