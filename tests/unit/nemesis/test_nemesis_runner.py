"""The fault life cycle on a fault that touches nothing: records, undo on failure and on
interrupts, idempotent stops.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pytest

from kmon.nemesis.base import Fault, FaultError, interruptible
from kmon.nemesis.runner import Nemesis


class Fake(Fault):
    """Sets a flag at start and clears it at stop; can be told to fail half-way."""

    kind = "fake"

    def __init__(self, fail_start: bool = False, fail_stop: bool = False) -> None:
        self.on = False
        self.stops = 0
        self.fail_start, self.fail_stop = fail_start, fail_stop
        super().__init__()

    def params(self) -> dict[str, Any]:
        return {"fail_start": self.fail_start}

    def _start(self) -> None:
        self.on = True  # half of the fault takes effect ...
        self.mark("on")
        if self.fail_start:
            raise FaultError("the other half failed")

    def _stop(self) -> None:
        self.stops += 1
        if self.fail_stop:
            raise FaultError("cannot undo")
        self.on = False
        self.mark("off")


def nemesis() -> Nemesis:
    return Nemesis(cluster=None, proxy=None)  # type: ignore[arg-type]  # never touched


def test_run_records_every_step_in_order() -> None:
    fault = Fake()
    record = nemesis().run(fault, duration=0.05, wait_healthy=False)
    assert not fault.on and not fault.active
    stamps = [record.invoked_at, record.started_at, record.stop_invoked_at, record.stopped_at]
    assert all(s is not None for s in stamps) and stamps == sorted(stamps)  # type: ignore[type-var]
    assert record.stop_invoked_at - record.started_at >= 0.05  # type: ignore[operator]
    assert [m.what for m in record.marks] == ["on", "off"]
    assert record.healthy_at is None and record.error is None
    assert record.as_json()["fault"] == "fake"


def test_a_failed_start_is_undone() -> None:
    fault = Fake(fail_start=True)
    runner = nemesis()
    with pytest.raises(FaultError, match="the other half failed"):
        runner.start(fault)
    assert not fault.on and fault.stops == 1  # what took effect was undone
    assert fault.record.started_at is None and "start: the other half" in fault.record.error
    assert runner.records == [fault.record]


def test_stop_is_idempotent_and_a_fault_starts_once() -> None:
    fault = Fake()
    fault.start()
    with pytest.raises(FaultError, match="already active"):
        fault.start()
    fault.stop()
    fault.stop()
    assert fault.stops == 1


def test_body_errors_still_stop_the_fault() -> None:
    fault = Fake()
    with pytest.raises(RuntimeError, match="boom"), nemesis().active(fault, wait_healthy=False):
        assert fault.on
        raise RuntimeError("boom")
    assert not fault.on


def test_sigterm_during_the_hold_undoes_the_fault() -> None:
    fault = Fake()
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM))
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt), interruptible():
        timer.start()
        nemesis().run(fault, duration=30, wait_healthy=False)
    assert time.monotonic() - started < 5
    assert not fault.on and fault.record.stopped_at is not None
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored


def test_stop_all_keeps_undoing_after_a_failure() -> None:
    runner = nemesis()
    good, bad = Fake(), Fake(fail_stop=True)
    runner.start(good)
    runner.start(bad)
    errors = runner.stop_all()
    assert errors == ["fake: cannot undo"]
    assert not good.on and bad.on
    assert "stop: cannot undo" in bad.record.error
