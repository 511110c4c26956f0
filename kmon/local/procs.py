"""Process bookkeeping for the local stack: pid files that are checked, not trusted.

A pid file can outlive its process (a reboot, a SIGKILL, another tool), and the pid can be
reused by an unrelated process. So a pid counts only while the process is alive and its command
line names the very config file we started it with.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

# Processes this Python process started and has not yet seen exit. Polling them collects their
# exit status: a killed child would otherwise stay a zombie (and look alive to `kill -0`) for
# as long as we run.
_children: dict[int, subprocess.Popen[bytes]] = {}


def spawn(cmd: Sequence[str], log_path: Path, cwd: Path,
          environ: Mapping[str, str] | None = None) -> int:
    """Start ``cmd`` in its own session, output appended to ``log_path``; returns its pid.

    Its own session: Ctrl-C in a terminal reaches kmon, which stops things in order, rather
    than every server at once (and ``session_members`` finds what the server started).
    Returns once the new program's command line is visible in /proc: the parent can resume
    while the kernel is still inside exec, when the command line reads empty and the pid would
    not yet pass ``read_pid``. ``environ``: the child's environment (default: this one's).
    """
    with open(log_path, "ab") as log:
        child = subprocess.Popen(
            list(cmd), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=cwd, start_new_session=True, env=None if environ is None else dict(environ),
        )
    _children[child.pid] = child
    deadline = time.monotonic() + 5.0
    while not cmdline(child.pid) and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    return child.pid


def reap_children() -> None:
    for pid, child in list(_children.items()):
        if child.poll() is not None:
            del _children[pid]


def proc_state(pid: int) -> str | None:
    """The kernel's one-letter state (R, S, T, Z, ...), or None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name in parentheses may itself contain spaces or parentheses.
    return stat[stat.rindex(")") + 2]


def is_alive(pid: int) -> bool:
    """True while ``pid`` exists and has not finished exiting.

    A multi-threaded process (a JVM) shows its main thread as a zombie while the other threads
    still exit and its sockets are still open; it counts as dead only once they are gone.
    """
    reap_children()
    state = proc_state(pid)
    if state is None:
        return False
    if state in ("Z", "X"):
        try:
            return len(os.listdir(f"/proc/{pid}/task")) > 1
        except OSError:
            return False
    return True


def session_members(leader: int) -> list[int]:
    """Pids of the live processes in the session ``leader`` leads (a server ``spawn`` started
    and whatever it started in turn), the leader first."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the command name: state, ppid, pgrp, session, ...
        if int(stat[stat.rindex(")") + 2:].split()[3]) == leader:
            out.append(int(entry.name))
    return sorted(out, key=lambda p: p != leader)


def is_stopped(pid: int) -> bool:
    """Stopped by SIGSTOP (state T), i.e. paused."""
    return proc_state(pid) == "T"


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def read_pid(pid_file: Path, marker: str) -> int | None:
    """The pid in ``pid_file`` if that process is alive and ``marker`` is one of its arguments."""
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    if is_alive(pid) and marker in cmdline(pid):
        return pid
    return None


def signal_pid(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def wait_dead(pid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``pid`` to exit; True if it did."""
    deadline = time.monotonic() + timeout
    while True:
        if not is_alive(pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def terminate(pid_file: Path, pid: int | None, timeout: float) -> None:
    """Stop a server: SIGTERM (its clean shutdown), SIGKILL after ``timeout`` seconds, then
    forget its pid file. ``pid`` None: nothing runs, only the file goes."""
    if pid is not None:
        signal_pid(pid, signal.SIGTERM)
        if not wait_dead(pid, timeout):
            signal_pid(pid, signal.SIGKILL)
            wait_dead(pid, 10.0)
    pid_file.unlink(missing_ok=True)


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True if something is bound to ``port`` (a server would fail to listen on it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Like a server, ignore connections lingering in TIME_WAIT from an earlier run.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def tail(path: Path, lines: int = 30) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 64 * 1024))
            text = handle.read().decode(errors="replace")
    except FileNotFoundError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])
