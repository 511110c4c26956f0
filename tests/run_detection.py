"""Run the detection matrix (tests/integration/test_detection.py) in a pytest of its own.

`make test` runs it after the rest of the suite. During its fault rows librdkafka has killed
the test process with SIGSEGV (twice in about eight full runs on 2026-11-25, no core, no Python
frame: the process holds the in-process monitor's producer and the nemesis' admin clients
while brokers are killed and leaders elected uncleanly). Probes already run in child
processes for the same reason (kmon.nemesis.probe_child). A death by signal is not a verdict
on kmon's detection, so it gets one rerun on a freshly started stack, said loudly; a test
failure, or a second death, fails the run. So does a run in which every test skipped (the
matrix once skipped whole, and passed, on a machine without toxiproxy-server).

    python tests/run_detection.py [PYTEST_ARGS...]
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULE = "tests/integration/test_detection.py"


def _run(args: list[str]) -> int:
    # tests/skip_policy.py (also loaded by tests/conftest.py, named here so that no conftest
    # change can lose it): the run fails when every test of the module skipped.
    command = [sys.executable, "-m", "pytest", "-p", "tests.skip_policy", MODULE, *args]
    return subprocess.run(command, cwd=ROOT).returncode


def _signal_name(code: int) -> str | None:
    """The signal that killed the process, if one did (as subprocess or a shell reports it)."""
    number = -code if code < 0 else code - 128 if code > 128 else 0
    try:
        return signal.Signals(number).name if number else None
    except ValueError:
        return None


def _fresh_stack() -> None:
    """Stop what the dead run left behind (its brokers, its proxies): the rerun starts them."""
    sys.path.insert(0, str(ROOT))
    from kmon.local.cluster import LocalCluster
    from kmon.local.toxiproxy import LocalToxiproxy
    from tests.helpers import suite_stack

    home, base = suite_stack()
    cluster = LocalCluster(home=home, port_base=base)
    LocalToxiproxy(home=home, port_base=base, cache=cluster.cache).down()
    from kmon.nemesis.protocol import kafka_proxy_of

    kafka_proxy_of(cluster).down()
    cluster.down()


def main(args: list[str]) -> int:
    code = _run(args)
    name = _signal_name(code)
    if name is None:
        return code
    print(f"\n*** {MODULE}: the test process died by {name}, not by a failed test; "
          "rerunning it once on a fresh stack ***\n", flush=True)
    _fresh_stack()
    code = _run(args)
    if _signal_name(code) is not None:
        print(f"\n*** {MODULE}: died by {_signal_name(code)} again ***\n", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
