"""Run many `databuild` commands at the cost of one interpreter start: this process imports the CLI
once, then runs each command in a child forked from it, the CLI's own entry point (`main`, which ends
the process with the command's exit code) with the command's arguments, its stdout and stderr in files
of its own. Each command still runs in a fresh process of its own, as from a shell; only the imports
(about 1.4 s of CPU per command) are shared. Used by ``tests.conftest.cli_batch``.

Reads a JSON list of commands on stdin, each an argument list or {"args": [...], "env": {...}} (variables
set in its child only); writes a JSON list of {returncode, stdout, stderr}."""

import json
import os
import signal
import sys
import tempfile
import time
import traceback

import databuild.cli  # every command group, as `python -m databuild.cli` imports them

TIMEOUT = 120.0  # seconds per command, as `cli` allows


def run(args: list[str], env: dict[str, str] | None = None) -> dict[str, object]:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                os.environ.update(env or {})
                sys.argv = ["databuild", *args]
                databuild.cli.main()  # leaves the process itself (os._exit) with the command's code
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(70)  # only if main returned or raised: never back into the parent's loop
        deadline = time.monotonic() + TIMEOUT
        while (ended := os.waitpid(pid, os.WNOHANG)) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                ended = os.waitpid(pid, 0)
                break
            time.sleep(0.01)
        out.seek(0)
        err.seek(0)
        return {
            "returncode": os.waitstatus_to_exitcode(ended[1]),
            "stdout": out.read().decode(errors="replace"),
            "stderr": err.read().decode(errors="replace"),
        }


def main() -> None:
    commands = [c if isinstance(c, dict) else {"args": c} for c in json.load(sys.stdin)]
    results = [run([str(arg) for arg in c["args"]], c.get("env")) for c in commands]
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
