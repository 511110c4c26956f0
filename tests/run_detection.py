"""Run the detection matrix (tests/integration/test_detection.py) in a pytest of its own.

`make test` runs it after the rest of the suite. A death of the test process by signal
(librdkafka has crashed it under fault rows) fails the run like a failed test: a rerun would
hide a crash that an operator's probe or monitor would hit too. So that a crash leaves its
evidence, the test process and every child it starts run with core dumps allowed and
``faulthandler`` on (every Python thread's stack on stderr); after a death by signal the
newest core in the working directory is opened with gdb, when installed, and the stack of
every native thread, the crashing one first, is printed. A run in which every test skipped
fails too (the matrix once skipped whole, and passed, on a machine without toxiproxy-server).

    python tests/run_detection.py [PYTEST_ARGS...]
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULE = "tests/integration/test_detection.py"
GDB_TIMEOUT_S = 300


def allow_cores() -> None:
    """Core dumps up to the hard limit (children inherit it), in the working directory
    unless the machine's core_pattern says otherwise."""
    hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
    resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))


def _run(args: list[str]) -> int:
    # tests/skip_policy.py (also loaded by tests/conftest.py, named here so that no conftest
    # change can lose it): the run fails when every test of the module skipped.
    command = [sys.executable, "-X", "faulthandler", "-m", "pytest", "-p", "tests.skip_policy",
               MODULE, *args]
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}  # children (probes, monitors) too
    return subprocess.run(command, cwd=ROOT, env=env, preexec_fn=allow_cores).returncode


def _signal_name(code: int) -> str | None:
    """The signal that killed the process, if one did (as subprocess or a shell reports it)."""
    number = -code if code < 0 else code - 128 if code > 128 else 0
    try:
        return signal.Signals(number).name if number else None
    except ValueError:
        return None


def newest_core(directory: Path, since: float) -> Path | None:
    """The newest ``core*`` file written in ``directory`` after ``since`` (time.time())."""
    cores = [p for p in directory.glob("core*") if p.is_file() and p.stat().st_mtime >= since]
    return max(cores, key=lambda p: p.stat().st_mtime, default=None)


def print_core_stacks(core: Path) -> None:
    """Every native thread's stack from ``core`` (gdb's current thread is the crashing one)."""
    gdb = shutil.which("gdb")
    if gdb is None:
        print(f"(gdb not installed: the core is {core})", flush=True)
        return
    command = [gdb, "-q", "-batch", "-ex", "bt 40", "-ex", "thread apply all bt 25",
               sys.executable, str(core)]
    try:
        subprocess.run(command, timeout=GDB_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        print(f"(gdb took over {GDB_TIMEOUT_S}s; the core is {core})", flush=True)


def main(args: list[str]) -> int:
    started = time.time()
    code = _run(args)
    name = _signal_name(code)
    if name is None:
        return code
    print(f"\n*** {MODULE}: the test process died by {name}: a crash, not a verdict ***",
          flush=True)
    core = newest_core(ROOT, started)
    if core is None:
        print("(no core was written: see ulimit -c and /proc/sys/kernel/core_pattern)",
              flush=True)
    else:
        print_core_stacks(core)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
