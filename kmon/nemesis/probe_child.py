"""A probe workload in a child process.

The probe's clients are librdkafka's. Under some faults (DeleteRecords ahead of a consumer,
an unclean election) librdkafka has crashed the whole process (SIGSEGV/SIGABRT) about once
in three matrix runs; in a child it takes down that probe only, and the matrix can say so
and run the row again instead of losing the test run or the monitor with it.

The child writes the history file itself and sends back the probe id once started, and the
workload's summary and metrics once shut down. Its stacks go to a file beside the history
(``stacks_path``) if it crashes, if its shutdown takes longer than ``SHUTDOWN_DUMP_AFTER``,
or if it sends nothing in time (a SIGUSR1 before the kill), and ``ProbeDied`` names each
thread's innermost frame: a hang is diagnosable from the error alone, even one where a
thread holds the GIL inside the native client and no Python code runs at all, and even
where a test run captured (and dropped) the child's stderr.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import multiprocessing
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from kmon.probes.stacks import DUMP_SIGNAL, enable_stack_dumps, innermost_frames

log = logging.getLogger("kmon.nemesis.probe")

START_TIMEOUT = 90.0  # spawn, import, create the events topic
# A shutdown's own bounds (kmon.probes.workload.shutdown_bound): in-flight ops (40 s at the
# defaults), the final read (its timeout plus 30 s) and the events' flush (31 s); the child
# closes its clients after its summary. One still running after this dumps its stacks,
# though it may yet end within the parent's wait.
SHUTDOWN_DUMP_AFTER = 120.0
EXIT_TIMEOUT = 30.0  # from the summary to the process' exit (interpreter teardown)
DUMP_WAIT = 3.0  # for that dump to be written before the kill
GDB_TIMEOUT = 90.0  # attach and walk every thread's native stack


class ProbeDied(RuntimeError):
    """The probe's process ended without a summary (a crash in the native client)."""


def stacks_path(history: Path) -> Path:
    """Where the child of ``history`` writes its stacks."""
    return history.with_name(history.name + ".stacks")


class ProbeChild:
    """``start()`` a workload with ``overrides`` (probe settings) writing ``history``;
    ``shutdown()`` stops it and returns its summary (``Workload.shutdown``); its metrics, in
    Prometheus' text format, are then in ``metrics_text``."""

    def __init__(self, overrides: dict[str, str], history: Path,
                 dump_after: float = SHUTDOWN_DUMP_AFTER) -> None:
        self.overrides = dict(overrides)
        self.history = Path(history)
        self.dump_after = dump_after
        self.probe_id = ""
        self.metrics_text = ""
        self._proc: Any = None
        self._conn: Any = None

    def start(self) -> None:
        ctx = multiprocessing.get_context("spawn")  # no fork of a parent with live threads
        self._conn, child_end = ctx.Pipe()
        self._proc = ctx.Process(target=_child_main, name="kmon-probe",
                                 args=(self.overrides, str(self.history), child_end,
                                       self.dump_after),
                                 daemon=True)
        self._proc.start()
        child_end.close()
        kind, payload = self._receive(START_TIMEOUT, "start")
        if kind == "error":
            self._proc.join(10)
            raise RuntimeError(f"the probe did not start: {payload}")
        self.probe_id = payload

    def shutdown(self, timeout: float = 300.0) -> dict[str, Any]:
        """Stop the workload, wait for its final read and summary; the child exits."""
        with contextlib.suppress(OSError):  # already dead: _receive says how
            self._conn.send("stop")
        hung = False
        try:
            kind, payload = self._receive(timeout, "shutdown")
        finally:
            self._proc.join(EXIT_TIMEOUT)
            if self._proc.is_alive():
                hung = True
                log.warning("the probe process did not exit within %.0fs of its summary; "
                            "killed", EXIT_TIMEOUT)
                self._proc.kill()
                self._proc.join(5)
            self._conn.close()
        if kind == "error":
            raise RuntimeError(f"the probe failed: {payload}")
        # A crash after the summary (its clients' teardown at exit) is a crash all the same:
        # an operator's probe would die the same way on every stop.
        code = self._proc.exitcode
        if code is not None and code < 0 and not hung:
            raise ProbeDied(f"the probe process died after its summary: {_exit_text(code)}")
        summary, self.metrics_text = payload
        return summary

    def kill(self) -> int:
        """SIGKILL the probe's process (a pod evicted, a node lost); returns its pid."""
        pid = int(self._proc.pid)
        self._proc.kill()
        self._proc.join(10)
        with contextlib.suppress(OSError):
            self._conn.close()
        return pid

    def sample(self, name: str, labels: dict[str, str]) -> float | None:
        """One sample of the stopped probe's metrics (None: no such sample); ``labels`` need
        not name the constant ones (``cluster``)."""
        from prometheus_client.parser import text_string_to_metric_families

        for family in text_string_to_metric_families(self.metrics_text):
            for s in family.samples:
                if s.name == name and labels.items() <= s.labels.items():
                    return float(s.value)
        return None

    def _receive(self, timeout: float, what: str) -> tuple[str, Any]:
        try:
            if self._conn.poll(timeout):
                return self._conn.recv()
        except (EOFError, OSError):
            pass
        self._proc.join(5)
        code = self._proc.exitcode
        if code is None:
            since = self._dump_stacks()
            self._proc.kill()
            raise ProbeDied(f"the probe process sent nothing within {timeout:.0f}s of {what}"
                            f"{self._stacks_text(since)}")
        raise ProbeDied(f"the probe process died during {what}: {_exit_text(code)}"
                        f"{self._stacks_text(0)}")

    def _dump_stacks(self) -> int:
        """Ask the silent child for every thread's stack (in its stacks file), then wait a
        moment: faulthandler writes them from a signal handler, so a process whose Python is
        frozen (the GIL held in a native call that never returns) still shows where. Returns
        the file's size before the dump, where this dump begins."""
        path = stacks_path(self.history)
        since = path.stat().st_size if path.exists() else 0
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._proc.pid, DUMP_SIGNAL)
            log.warning("the probe process (pid %d) is silent: its stacks go to %s",
                        self._proc.pid, path)
            time.sleep(DUMP_WAIT)
        append_native_stacks(int(self._proc.pid), path)
        return since

    def _stacks_text(self, since: int) -> str:
        """``; innermost frames: ... (stacks in PATH)`` from the stacks file's dumps after
        byte ``since``; "" if none was written."""
        path = stacks_path(self.history)
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                f.seek(since)
                frames = innermost_frames(f.read())
        except OSError:
            return ""
        return f"; innermost frames: {frames} (stacks in {path})" if frames else ""


def append_native_stacks(pid: int, path: Path) -> bool:
    """Append every native thread's stack of live process ``pid`` to ``path``, by gdb when
    installed. Python's stacks cannot say which thread holds the GIL inside the native client
    (CI, 2026-12-07: a 5 s ``join`` that never returned); gdb's show the holder, not waiting
    in ``take_gil``. False if gdb is missing or gave up (it detaches, and the process goes
    on as it was)."""
    gdb = shutil.which("gdb")
    if gdb is None:
        return False
    command = [gdb, "-q", "-batch", "-p", str(pid), "-ex", "info threads",
               "-ex", "thread apply all bt 30"]
    try:
        with open(path, "a", encoding="utf-8") as out:
            out.write(f"\n--- native stacks of pid {pid} (gdb) ---\n")
            out.flush()
            done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=GDB_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _child_main(overrides: dict[str, str], history: str, conn: Any, dump_after: float) -> None:
    logging.basicConfig(level=logging.WARNING,
                        format="%(asctime)s probe[%(process)d] %(name)s: %(message)s")
    # The parent ends the child through the pipe; ^C in a terminal goes to the parent.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # On a crash, and on the parent's DUMP_SIGNAL when it hangs; kept open to the exit.
    stacks = open(stacks_path(Path(history)), "w", buffering=1, encoding="utf-8")  # noqa: SIM115
    enable_stack_dumps(stacks)
    from prometheus_client import generate_latest

    from kmon.probes import config as probe_config
    from kmon.probes.workload import Workload

    try:
        cfg = probe_config.load(env={}, overrides=overrides)
        with open(history, "w") as f:
            wl = Workload(cfg, history=f)  # its own metrics, labelled as the probe's
            wl.start()
            conn.send(("started", cfg.probe_id))
            with contextlib.suppress(EOFError):  # EOF: the parent is gone
                conn.recv()  # "stop"
            faulthandler.dump_traceback_later(dump_after, file=stacks)
            try:
                summary = wl.shutdown(close=False)
            finally:
                faulthandler.cancel_dump_traceback_later()
        conn.send(("summary", (summary, generate_latest(wl.metrics.registry).decode())))
        # After the summary: a close that hangs in librdkafka costs the parent EXIT_TIMEOUT
        # and a warning, not the history (CI, 2026-12-07: a probe lost to a hung close).
        wl.close_clients()
    except Exception as exc:
        log.exception("probe failed")
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()
