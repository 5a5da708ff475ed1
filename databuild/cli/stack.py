"""Commands that run the stack: `dev` (everything embedded), `web` and `worker`."""

from typing import Annotated

import typer

from databuild.cli.app import app, console, run, settings
from databuild.config import Settings, masked_url

DEV_SQL_PORT = 10000  # HiveServer2's own default: beeline -u jdbc:hive2://127.0.0.1:10000


@app.command()
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
    from worker.dev import run_dev  # the CLI hands over to the worker package to host workflows

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


@app.command()
def web(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port of the dashboard and the HTTP API.")] = 8000,
    temporal_ui: Annotated[
        str | None,
        typer.Option(envvar="DATABUILD_TEMPORAL_UI_URL", help="Temporal UI base URL for workflow links."),
    ] = None,
) -> None:
    """Serve the dashboard (/) and the HTTP JSON API (/api, docs at /docs) over the configured BEL."""
    from databuild.bel import BuildEventLog
    from databuild.process import log_to_stderr, settle_heap
    from databuild.web import create_app, serve, web_context

    configured = settings()
    log_to_stderr()
    context = web_context(
        configured, BuildEventLog.create(configured.database_url.get_secret_value()), temporal_ui
    )
    served = create_app(context)
    settle_heap()  # once, after start-up: what start-up made stays out of every later full collection
    console.print(
        f"dashboard http://{host}:{port}/  API http://{host}:{port}/api  BEL {masked_url(configured.database_url)}"
    )
    run(serve(served, host, port))


@app.command()
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
