"""`databuild`: the command line. Every list/show command takes --json for scripts.

One module per command group; each registers its commands on the shared Typer app when imported, so
the import order below is the order `databuild --help` lists them in."""

from databuild.cli import web, wants, backfill, operations, events, partitions  # noqa: F401, I001
from databuild.cli import staleness, cost, job_runs, upstream, schedule, envs, tables  # noqa: F401
from databuild.cli.app import app, main, summarise_commands

summarise_commands(app)

__all__ = ["app", "main"]
