"""A final read whose client call never returns is given up on at its bound: the shutdown
goes on to flush the op events (the pod's grace period would otherwise kill the probe with
them unsent), the reader's pending op ends as info and nothing it does later is recorded.
CI saw the matrix's share-group row lose its run to a final-read poll silent for 300 s."""

from __future__ import annotations

import io
import threading
import time
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from kmon.checker import check
from kmon.history import iter_jsonl
from kmon.probes import config
from kmon.probes.metrics import ProbeMetrics
from kmon.probes.process import Process
from kmon.probes.workload import Workload
from tests.unit.probes.fakes import OneTopicKeys
from tests.unit.probes.test_probe_catch_up import SettlingConsumer


class HangingConsumer(SettlingConsumer):
    """Polls that block in the native call until ``release`` (then read as usual)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def consume(self, n: int, timeout: float) -> list[Any]:
        self.release.wait()
        return super().consume(n, timeout)


class Keys(OneTopicKeys):
    """The key space as far as the summary reads it too."""

    created = 0
    coverage = None


def workload(history: io.StringIO) -> Workload:
    cfg = config.load(env={}, overrides={
        "kafka.bootstrap.servers": "127.0.0.1:1", "name": "t", "op_timeout": "0.2",
        "close_timeout": "0.5", "poll_timeout": "0.1", "final_read_timeout": "0.5"})
    wl = Workload(cfg, ProbeMetrics(CollectorRegistry()), history)
    wl.keyspace = Keys()  # type: ignore[assignment]
    return wl


@pytest.fixture
def consumer(monkeypatch: pytest.MonkeyPatch) -> HangingConsumer:
    c = HangingConsumer()
    monkeypatch.setattr(Process, "_new_consumer", lambda self, mode: c)
    return c


@pytest.mark.timeout(60)  # the unbounded read it replaces would wait for ever
def test_a_hung_final_read_is_abandoned_at_its_bound(consumer: HangingConsumer) -> None:
    history = io.StringIO()
    wl = workload(history)
    done = wl._final_read()
    assert done is not None and not done.reached and done.short == [0, 1], done
    assert len(wl.abandoned_clients) == 1  # the reader: never closed under its hung call
    consumer.release.set()  # the call returns at last: its read goes on, unrecorded
    time.sleep(0.5)
    ops = list(iter_jsonl(history.getvalue().splitlines()))
    poll = [o for o in ops if o.f == "poll"]
    assert [o.type for o in poll] == ["invoke", "info"], poll
    assert "final read: final-read did not return within" in (poll[-1].meta.error or "")
    assert ops[-1] == poll[-1]  # nothing after its info
    assert check(ops).valid


@pytest.mark.timeout(60)
def test_the_shutdown_after_a_hung_final_read_completes(consumer: HangingConsumer) -> None:
    wl = workload(io.StringIO())
    began = time.monotonic()
    summary = wl.shutdown()
    consumer.release.set()
    assert summary["final_read"]["reached"] is False, summary["final_read"]
    assert summary["hung_clients"] == 1
    assert summary["abandoned_ops"] == 1  # the reader's poll, completed info
    bound = 0.5 + 0.1 + 3 * 0.2
    assert time.monotonic() - began < bound + 5.0  # not the hang's length: no release came
