"""Pid files are checked against /proc, never trusted."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kmon.local import procs
from tests.helpers import leave_time_wait


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A live process whose command line carries a recognisable marker argument."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "marker-arg"])
    yield proc
    proc.kill()
    proc.wait()


def test_read_pid_believes_only_a_live_process_with_the_marker(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    pid_file = tmp_path / "pid"
    assert procs.read_pid(pid_file, "marker-arg") is None  # no file
    pid_file.write_text("not a pid\n")
    assert procs.read_pid(pid_file, "marker-arg") is None
    pid_file.write_text(f"{sleeper.pid}\n")
    assert procs.read_pid(pid_file, "marker-arg") == sleeper.pid
    assert procs.read_pid(pid_file, "some-other-config") is None  # a reused pid
    sleeper.kill()
    sleeper.wait()
    assert procs.read_pid(pid_file, "marker-arg") is None  # stale


def test_stopped_and_zombie_states(sleeper: subprocess.Popen[bytes]) -> None:
    sleeper.send_signal(signal.SIGSTOP)
    procs.wait_dead(sleeper.pid, 0.2)  # give the kernel a moment; it is not dead
    assert procs.is_stopped(sleeper.pid) and procs.is_alive(sleeper.pid)
    sleeper.send_signal(signal.SIGCONT)
    sleeper.send_signal(signal.SIGKILL)
    assert procs.wait_dead(sleeper.pid, 10)  # a zombie (not yet reaped) counts as dead
    assert not procs.is_alive(sleeper.pid)


def test_port_in_use() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert procs.port_in_use(port)
    assert not procs.port_in_use(port)


def test_a_port_in_time_wait_is_not_in_use() -> None:
    """A restarted server may listen there (servers set SO_REUSEADDR): not a reason to refuse."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    leave_time_wait(port)
    assert not procs.port_in_use(port)


def test_tail(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    assert procs.tail(log, 2) == "line 98\nline 99"
    assert "no log" in procs.tail(tmp_path / "missing.log")


def test_a_spawned_process_is_recognised_at_once(tmp_path: Path) -> None:
    # Regression: the parent could resume while the child was still inside exec, when its
    # command line reads empty, and a broker started a moment ago looked dead.
    for _ in range(20):
        pid = procs.spawn(["/bin/sh", "-c", "sleep 30", "marker-arg"], tmp_path / "log", tmp_path)
        (tmp_path / "pid").write_text(f"{pid}\n")
        try:
            assert procs.read_pid(tmp_path / "pid", "marker-arg") == pid
        finally:
            procs.signal_pid(pid, signal.SIGKILL)
            assert procs.wait_dead(pid, 10)


def test_terminate_stops_a_server_and_forgets_its_pid_file(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    pid_file = tmp_path / "pid"
    pid_file.write_text(f"{sleeper.pid}\n")
    procs.terminate(pid_file, sleeper.pid, timeout=10)
    assert sleeper.wait(10) == -signal.SIGTERM  # asked, not killed
    assert not pid_file.exists()


def test_terminate_kills_a_server_that_ignores_sigterm(tmp_path: Path) -> None:
    stubborn = subprocess.Popen([sys.executable, "-c",
                                 "import signal, sys, time; "
                                 "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                                 "print('ready', flush=True); time.sleep(60)"],
                                stdout=subprocess.PIPE)
    try:
        assert stubborn.stdout is not None and stubborn.stdout.readline() == b"ready\n"
        pid_file = tmp_path / "pid"
        pid_file.write_text(f"{stubborn.pid}\n")
        procs.terminate(pid_file, stubborn.pid, timeout=0.5)
        assert stubborn.wait(10) == -signal.SIGKILL
        assert not pid_file.exists()
    finally:
        stubborn.kill()
        stubborn.wait()
