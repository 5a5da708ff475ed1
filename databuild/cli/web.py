"""`databuild web`: the dashboard and the HTTP API over the configured BEL. (`dev` and `worker`, which host
workflows, are the `worker` package's commands.)"""

from typing import Annotated

import typer

from databuild.cli.app import STACK_PANEL, app, console, run, settings
from databuild.config import masked_url


@app.command(rich_help_panel=STACK_PANEL)
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
