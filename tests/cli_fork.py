"""`databuild` commands at the cost of one interpreter start per pytest worker.

A server process (``python -m tests.cli_fork``) imports the CLI once, then runs each command it is sent in
a child forked from it: the CLI's own entry point (`main`, which ends the process with the command's exit
code) with the command's arguments, environment and working directory, its stdout and stderr in files of
its own, stdin empty. Each command still runs in a fresh process of its own, as from a shell; only the
imports (about 1.4 s of CPU per command, most of a short command's cost) are shared. Commands run
concurrently, as separate shells would.

Protocol: one JSON request per line on the server's stdin ({id, args, env, cwd, stdout, stderr, timeout});
one JSON line per ended command on its stdout ({id, returncode}). The server ends when its stdin closes
(its pytest worker ended), killing what still runs. ``cli`` is the client: ``tests.conftest.cli`` and
``forked_cli`` go through it."""

import concurrent.futures
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 120.0  # seconds per command, as subprocess.run was given


# The server ----------------------------------------------------------------------------------------------


def _start(request: dict[str, Any]) -> int:
    pid = os.fork()
    if pid == 0:
        _command(request)
    return pid


def _command(request: dict[str, Any]) -> NoReturn:
    """The forked child: the command, as `python -m worker` would run it."""
    import worker.commands  # the server's import: nothing is loaded again

    try:
        os.chdir(request["cwd"])
        for fd, path in ((1, request["stdout"]), (2, request["stderr"]), (0, os.devnull)):
            opened = os.open(path, os.O_RDONLY if fd == 0 else os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(opened, fd)
            os.close(opened)
        os.environ.clear()
        os.environ.update(request["env"])
        # rich reads COLUMNS, NO_COLOR and the like when a Console is made, and the CLI makes its two as it is
        # imported: made again in place, they read this command's environment, as in a fresh interpreter.
        consoles = importlib.import_module("databuild.cli.app")  # the module: the package's `app` is Typer's
        consoles.console.__init__()
        consoles.err.__init__(stderr=True)
        sys.argv = ["databuild", *request["args"]]
        worker.commands.main()  # leaves the process itself (os._exit) with the command's code
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(70)  # only if main returned or raised: never back into the server's loop


def _report(request_id: str, returncode: int) -> None:
    # Written to the descriptor, not through sys.stdout: a child forked meanwhile inherits no buffered line.
    os.write(1, (json.dumps({"id": request_id, "returncode": returncode}) + "\n").encode())


def serve() -> None:
    import worker.commands  # noqa: F401  (every command group, as `python -m worker` imports them)

    running: dict[int, tuple[str, float]] = {}  # pid -> (request id, deadline)
    pending = b""
    reading = True
    while reading or running:
        # Idle, it sleeps until a request comes; while commands run, it looks for their ends every 10 ms.
        ready, _, _ = select.select([0] if reading else [], [], [], 0.01 if running else None)
        if ready:
            chunk = os.read(0, 1 << 16)
            reading = bool(chunk)
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in filter(None, lines):
                request = json.loads(line)
                running[_start(request)] = (request["id"], time.monotonic() + request["timeout"])
        if not reading:  # the pytest worker is gone: so is what it started
            for pid in running:
                os.kill(pid, signal.SIGKILL)
        for pid, (request_id, deadline) in list(running.items()):
            ended, status = os.waitpid(pid, os.WNOHANG)
            if ended == 0 and time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                ended, status = os.waitpid(pid, 0)
            if ended != 0:
                del running[pid]
                _report(request_id, os.waitstatus_to_exitcode(status))


# The client ----------------------------------------------------------------------------------------------


class ForkServer:
    """One server process; ``run`` may be called from many threads at once."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.cli_fork"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.lock = threading.Lock()
        self.waiting: dict[str, concurrent.futures.Future[int]] = {}
        threading.Thread(target=self._read_results, daemon=True, name="cli-fork-results").start()

    def _read_results(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            result = json.loads(line)
            with self.lock:
                waiter = self.waiting.pop(result["id"])
            waiter.set_result(result["returncode"])
        with self.lock:
            for waiter in self.waiting.values():
                waiter.set_exception(RuntimeError(f"the CLI fork server ended ({self.process.wait()})"))
            self.waiting.clear()

    def run(
        self, args: Sequence[str], env: Mapping[str, str], cwd: Path, timeout: float = TIMEOUT
    ) -> subprocess.CompletedProcess[str]:
        assert self.process.stdin is not None
        with tempfile.TemporaryDirectory(prefix="databuild-cli-") as folder:
            out, err = Path(folder) / "stdout", Path(folder) / "stderr"
            request_id, waiter = uuid.uuid4().hex, concurrent.futures.Future[int]()
            request = {"id": request_id, "args": [str(a) for a in args], "env": dict(env), "cwd": str(cwd)}
            request |= {"stdout": str(out), "stderr": str(err), "timeout": timeout}
            with self.lock:
                self.waiting[request_id] = waiter
                self.process.stdin.write(json.dumps(request).encode() + b"\n")
                self.process.stdin.flush()
            returncode = waiter.result(timeout=timeout + 30)
            return subprocess.CompletedProcess(
                [sys.executable, "-m", "worker", *request["args"]],
                returncode,
                out.read_text(errors="replace"),
                err.read_text(errors="replace"),
            )


_server: ForkServer | None = None
_server_lock = threading.Lock()


def cli(
    args: Sequence[str], env: Mapping[str, str], cwd: Path = ROOT, timeout: float = TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """``args`` as `python -m worker` in ``cwd`` with exactly ``env``, in a process forked from this
    pytest worker's server (started on first use)."""
    global _server
    with _server_lock:
        if _server is None or _server.process.poll() is not None:
            _server = ForkServer()
        server = _server
    return server.run(args, env, cwd, timeout)


if __name__ == "__main__":
    serve()
