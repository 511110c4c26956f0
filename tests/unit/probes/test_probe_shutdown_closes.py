"""A shutdown makes the history durable before it closes any client, and closes every
process's clients at once.

A close can block in librdkafka (a group leave while the coordinator is away). CI lost a
probe's whole run to one (2026-12-07): the history was sealed and flushed only after the
closes, and the close never returned. One process after another, closes that each wait out
``close_timeout`` would also take processes x 3 bounds, past a pod's grace period."""

from __future__ import annotations

import io
import random
import threading
import time

from prometheus_client import CollectorRegistry

from kmon.probes import config
from kmon.probes.metrics import ProbeMetrics
from kmon.probes.process import Process
from kmon.probes.workload import Workload
from tests.unit.probes.test_probe_final_read import Keys

CLOSE_TIMEOUT = 1.0
PROCESSES = 3


class CountedFlushes(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.flushes = 0

    def flush(self) -> None:
        self.flushes += 1
        super().flush()


class StuckClose:
    """A consumer whose close never returns (until ``release``), noting when it began and
    whether the history was sealed and flushed by then."""

    def __init__(self, wl: Workload, history: CountedFlushes, release: threading.Event,
                 began: list[tuple[float, bool, int]]) -> None:
        self.wl, self.history, self.release, self.began = wl, history, release, began

    def close(self) -> None:
        self.began.append((time.monotonic(), self.wl.recorder.sealed, self.history.flushes))
        self.release.wait()


def stopped_workload(history: CountedFlushes) -> Workload:
    """A workload whose processes' op loops have ended, with no final read."""
    cfg = config.load(env={}, overrides={
        "kafka.bootstrap.servers": "127.0.0.1:1", "name": "t", "processes": str(PROCESSES),
        "close_timeout": str(CLOSE_TIMEOUT), "op_timeout": "0.2", "final_read_timeout": "0"})
    wl = Workload(cfg, ProbeMetrics(CollectorRegistry()), history)
    wl.keyspace = Keys()  # type: ignore[assignment]
    wl.processes = [Process(n, wl, random.Random(n)) for n in range(PROCESSES)]
    wl.threads = [threading.Thread(target=lambda: None) for _ in wl.processes]
    for t in wl.threads:
        t.start()
        t.join()
    return wl


def test_the_history_is_sealed_and_flushed_before_any_close_and_closes_run_at_once() -> None:
    history = CountedFlushes()
    wl = stopped_workload(history)
    release = threading.Event()
    began: list[tuple[float, bool, int]] = []
    for p in wl.processes:
        p.consumer = StuckClose(wl, history, release, began)  # type: ignore[assignment]
    try:
        summary = wl.shutdown(close=False)
        assert began == [], "a client was closed before the summary"
        assert summary["abandoned_ops"] == 0
        wl.close_clients()
    finally:
        release.set()
    assert len(began) == PROCESSES
    assert all(sealed and flushes > 0 for _, sealed, flushes in began), began
    # At once: one after another, each close would begin a whole close_timeout after the last.
    starts = [at for at, _, _ in began]
    assert max(starts) - min(starts) < CLOSE_TIMEOUT, starts
    assert len(wl.abandoned_clients) == PROCESSES  # each given up at its bound, kept referenced


def test_a_shutdown_that_closes_counts_the_closes_that_hung() -> None:
    history = CountedFlushes()
    wl = stopped_workload(history)
    release = threading.Event()
    began: list[tuple[float, bool, int]] = []
    wl.processes[0].consumer = StuckClose(wl, history, release,  # type: ignore[assignment]
                                          began)
    try:
        summary = wl.shutdown()
    finally:
        release.set()
    assert len(began) == 1 and began[0][1], began
    assert summary["hung_clients"] == 1
