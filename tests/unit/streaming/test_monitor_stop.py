"""A stopped monitor leaves no Kafka client behind: the outputs producer it made is purged
and closed; a producer the caller handed in stays the caller's to close."""

from __future__ import annotations

from types import SimpleNamespace

from kmon.streaming import config
from kmon.streaming.monitor import Monitor


class FakeProducer:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[str] = []
        self.fail = fail

    def purge(self) -> None:
        self.calls.append("purge")

    def close(self) -> bool:
        self.calls.append("close")
        if self.fail:
            raise RuntimeError("broker gone")
        return True


def _started(producer: FakeProducer, handed_in: bool) -> Monitor:
    cfg = config.from_mapping({"kafka.bootstrap.servers": "127.0.0.1:1", "metrics.port": 0,
                               "checkpoint": "/nonexistent/ck"})
    m = Monitor(cfg, producer=producer if handed_in else None)
    # What start() does with the producer (without a SparkSession).
    m.outputs = SimpleNamespace(producer=producer, close=lambda: producer.calls.append("outputs"))
    if not handed_in:
        m._made_producer = producer
    return m


def _stopped(producer: FakeProducer, handed_in: bool) -> None:
    _started(producer, handed_in).stop()


def test_the_producer_the_monitor_made_is_purged_then_closed() -> None:
    p = FakeProducer()
    _stopped(p, handed_in=False)
    assert p.calls == ["outputs", "purge", "close"]  # the outputs closed before their producer


def test_a_producer_handed_in_is_left_open() -> None:
    p = FakeProducer()
    _stopped(p, handed_in=True)
    assert p.calls == ["outputs"]


def test_a_failing_close_does_not_fail_the_stop() -> None:
    p = FakeProducer(fail=True)
    _stopped(p, handed_in=False)
    assert p.calls == ["outputs", "purge", "close"]


def test_a_second_stop_does_not_close_again() -> None:
    p = FakeProducer()
    m = _started(p, handed_in=False)
    m.stop()
    m.stop()  # as the supervisor does after a failed restart
    assert p.calls == ["outputs", "purge", "close", "outputs"]  # closing outputs is idempotent
