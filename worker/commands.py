"""The `databuild` command: every command of `databuild.cli`, and the two that run this package's
processes in the CLI's own, `dev` (the embedded stack) and `worker`. The CLI stands on the SDK; only
here, above both, does it meet the code that hosts workflows and activities."""

from typing import Annotated

import typer

import databuild.cli  # noqa: F401  (every command group registers itself on the app)
from databuild.cli.app import STACK_PANEL, app, console, main, run, settings, summarise_commands
from databuild.config import Settings, masked_url

DEV_SQL_PORT = 10000  # HiveServer2's own default: beeline -u jdbc:hive2://127.0.0.1:10000


@app.command(rich_help_panel=STACK_PANEL)
def dev(
    demo: Annotated[
        bool, typer.Option(help="Request the demo's top partition and print its fulfillment.")
    ] = False,
    exit_after_demo: Annotated[bool, typer.Option("--exit", help="Stop once the demo is done.")] = False,
    port: Annotated[int, typer.Option(help="Temporal frontend port.")] = 7233,
    ui_port: Annotated[int, typer.Option(help="Temporal UI port.")] = 8233,
    web_port: Annotated[int, typer.Option(help="Dashboard and HTTP API port (0: no web server).")] = 8000,
) -> None:
    """Embedded stack: Temporal dev server (+ UI), a worker and the dashboard; data in ./.databuild."""
    from worker.dev import run_dev  # Spark and the workflows load only for the commands that host them

    configured = dev_settings(port)
    raise typer.Exit(
        run(
            run_dev(
                configured,
                demo=demo,
                exit_after_demo=exit_after_demo,
                ui_port=ui_port,
                web_port=web_port,
                console=console,
            )
        )
    )


def dev_settings(port: int) -> Settings:
    """`databuild dev`'s settings: Temporal on loopback at ``port``, and Spark SQL on 10000 when free,
    unless `DATABUILD_SQL_PORT` says otherwise (`0`: off, as for a worker)."""
    from worker.ports import port_taken

    configured = settings(temporal_address=f"127.0.0.1:{port}")
    if "sql_port" not in configured.model_fields_set and not port_taken("127.0.0.1", DEV_SQL_PORT):
        configured = settings(temporal_address=f"127.0.0.1:{port}", sql_port=DEV_SQL_PORT)
    return configured


@app.command(rich_help_panel=STACK_PANEL)
def worker() -> None:
    """Run a worker against the configured Temporal, BEL and storage."""
    configured = settings()  # a bad setting is refused before the worker's imports (seconds)
    from databuild.process import log_to_stderr
    from worker.run import serve

    log_to_stderr()  # the Spark driver's own output goes to <home>/logs/spark.log (it logs where, once)
    console.print(
        f"worker on task queue [bold]{configured.task_queue}[/] at {configured.temporal_address} "
        f"(namespace {configured.namespace}); BEL {masked_url(configured.database_url)}"
    )
    run(serve(configured))


summarise_commands(app)

__all__ = ["app", "main"]
