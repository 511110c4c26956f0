"""`kmon probe --check` against the suite's cluster: what the chart's `helm test` runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

KMON = str(Path(sys.executable).parent / "kmon")


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([KMON, "probe", "--check", *args], capture_output=True, text=True,
                          timeout=120)


def test_check_passes_on_a_reachable_cluster(kafka_bootstrap: str) -> None:
    done = _check("-b", kafka_bootstrap, "--events-topic", "kmon-check-events")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"probed cluster {kafka_bootstrap}: " in done.stdout
    assert "broker(s)" in done.stdout and "topic kmon-check-events missing" in done.stdout


def test_check_fails_when_the_security_settings_are_wrong(kafka_bootstrap: str) -> None:
    # The listener speaks PLAINTEXT: a TLS handshake with it fails, as a wrong CA or SASL
    # credential would. Reaching the port is not enough.
    done = _check("-b", kafka_bootstrap, "--set", "kafka.security.protocol=SSL")
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"probed cluster {kafka_bootstrap}: unreachable" in done.stdout
