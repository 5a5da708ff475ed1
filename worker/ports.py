"""Which local TCP ports are taken, and by whom: `databuild dev` refuses ports another process holds
rather than joining whatever answers there."""

import errno
import os
import socket
from pathlib import Path

LISTEN = "0A"  # the socket state /proc/net/tcp gives a listening socket


def port_taken(host: str, port: int) -> bool:
    """Whether something listens on ``host:port`` (a socket in TIME_WAIT does not count: servers
    bind with SO_REUSEADDR, as this check does)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return True
            raise
    return False


def listener_pid(port: int) -> int | None:
    """The process listening on TCP ``port``, from /proc (Linux); None where /proc does not tell, e.g. a
    process of another user."""
    sockets = _listening_sockets(port)
    if not sockets:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in sockets for fd in (proc / "fd").iterdir()):
                return int(proc.name)
        except OSError:  # gone, or not ours to read
            continue
    return None


def describe_process(pid: int, width: int = 160) -> str:
    """``pid N (its command line) in its working folder``, as much of it as /proc shows."""
    proc = Path("/proc") / str(pid)
    try:
        argv = (proc / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return f"pid {pid}"
    command = " ".join(arg.decode(errors="replace") for arg in argv if arg)
    if len(command) > width:
        command = command[: width - 3] + "..."
    try:
        folder = f" in {os.readlink(proc / 'cwd')}"
    except OSError:
        folder = ""
    return f"pid {pid} ({command}){folder}"


def describe_listener(port: int) -> str:
    """Who listens on ``port``, for an error message."""
    pid = listener_pid(port)
    return describe_process(pid) if pid is not None else "a process this user cannot see"


def _listening_sockets(port: int) -> set[str]:
    """The /proc/PID/fd link targets (``socket:[inode]``) of the sockets listening on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == LISTEN and int(local.rpartition(":")[2], 16) == port:
                found.add(f"socket:[{inode}]")
    return found
