"""The monitor's supervision: a failed query restarts the monitor from the checkpoint, a
stop ends it, and failures that keep coming end the process."""

from __future__ import annotations

import threading

from kmon.streaming import main


class FakeMonitor:
    """Fails (raises from await_termination) ``fail`` times, then runs until stopped."""

    def __init__(self, fail: bool, stop: threading.Event, after: int = 0) -> None:
        self.fail, self.stop_event, self.after, self.stopped, self.calls = fail, stop, after, 0, 0

    def await_termination(self, timeout: float | None = None) -> bool:
        self.calls += 1
        if self.fail:
            raise RuntimeError("[CANNOT_OPEN_SOCKET] Can not open socket\nstack...")
        if self.calls > self.after:
            self.stop_event.set()
        return False

    def stop(self) -> None:
        self.stopped += 1


def test_a_failed_query_restarts_the_monitor_and_a_stop_ends_it() -> None:
    stop = threading.Event()
    started: list[FakeMonitor] = []

    def start() -> FakeMonitor:
        m = FakeMonitor(fail=not started, stop=stop, after=3)
        started.append(m)
        return m

    assert main.supervise(start, stop, backoff=lambda n: 0.0) == 0
    assert len(started) == 2  # the failed one, then its replacement
    assert started[0].stopped >= 1 and started[1].stopped >= 1  # nothing left running


def test_failures_that_keep_coming_end_the_process() -> None:
    stop = threading.Event()
    started: list[FakeMonitor] = []

    def start() -> FakeMonitor:
        started.append(FakeMonitor(fail=True, stop=stop))
        return started[-1]

    assert main.supervise(start, stop, backoff=lambda n: 0.0) == 1
    assert len(started) == main.MAX_RESTARTS + 1
    assert all(m.stopped for m in started)


def test_a_stop_during_the_backoff_ends_without_restarting() -> None:
    stop = threading.Event()
    started: list[FakeMonitor] = []

    def start() -> FakeMonitor:
        started.append(FakeMonitor(fail=True, stop=stop))
        return started[-1]

    def backoff(n: int) -> float:
        stop.set()  # SIGTERM arrives while waiting
        return 0.0

    assert main.supervise(start, stop, backoff=backoff) == 0
    assert len(started) == 1
