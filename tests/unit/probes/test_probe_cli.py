"""`kmon probe` as users meet it before any cluster: settings listed, bad settings named."""

from __future__ import annotations

import os
import threading
import time

import pytest

from kmon.cli import main
from kmon.probes.workload import Pacer


def test_help_settings_lists_every_setting(capsys: pytest.CaptureFixture) -> None:
    assert main(["probe", "--help-settings"]) == 0
    out = capsys.readouterr().out
    for name in ("rate", "txn_share", "events.topic", "KMON_PROBE_RATE", "kafka.*"):
        assert name in out


B = ["-b", "127.0.0.1:1"]


@pytest.mark.parametrize(("argv", "setting"), [
    ([*B, "--rate", "-1"], "rate:"),
    ([*B, "--set", "txn_share=2"], "txn_share:"),
    ([*B, "--set", "nonsense"], "--set expects NAME=VALUE"),
    ([*B, "--set", "consumer.group.id=g"], "consumer.group.id:"),
    ([*B, "--set", "start_positions=librdkafka"], "kmon: error: start_positions: must be one of"),
])
def test_bad_settings_exit_2_naming_the_setting(
    argv: list[str], setting: str, capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for var in [v for v in os.environ if v.startswith("KMON_PROBE_")]:
        monkeypatch.delenv(var)
    assert main(["probe", *argv]) == 2
    assert setting in capsys.readouterr().err


def test_env_settings_are_read(capsys: pytest.CaptureFixture,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KMON_PROBE_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("KMON_PROBE_PROCESSES", "0")
    assert main(["probe"]) == 2
    assert "processes:" in capsys.readouterr().err


def test_pacer_spaces_ops_across_threads() -> None:
    pacer = Pacer(rate=200.0)
    stop = threading.Event()
    times: list[float] = []

    def worker() -> None:
        for _ in range(10):
            pacer.wait(stop)
            times.append(time.monotonic())

    threads = [threading.Thread(target=worker) for _ in range(3)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(times) == 30
    assert time.monotonic() - start >= 29 / 200 * 0.9  # 30 ops at 200/s take ~0.145 s


def test_pacer_stops_waiting_when_asked() -> None:
    pacer = Pacer(rate=0.5)
    stop = threading.Event()
    assert pacer.wait(stop) is True  # the first slot is now
    stop.set()
    t = time.monotonic()
    assert pacer.wait(stop) is False
    assert time.monotonic() - t < 1.0
