"""Where a process's consumers start their partitions (``OpMeta.starts``), when an op closes a
subscribe-mode consumer whose close is served an assignment: the starts that close looked up
belong to the closed consumer's group, never to the op's new consumer's."""

from __future__ import annotations

import io
from typing import Any

from confluent_kafka import TopicPartition

from kmon.history import Op, Start, iter_jsonl
from kmon.history.model import START_COMMITTED
from kmon.probes.process import ASSIGN, SUBSCRIBE, Process
from tests.unit.probes.fakes import TOPIC, fake_process

ASSIGN_GROUP, SUBSCRIBE_GROUP = "kmon-probe-t-assign", "kmon-probe-t-subscribe"


class FakeConsumer:
    """A consumer whose group committed ``committed`` (partition -> offset). Closing it serves
    it an assignment of ``served_on_close`` first, as librdkafka may while leaving a group."""

    def __init__(self, proc: Process, committed: dict[int, int],
                 served_on_close: tuple[int, ...] = ()) -> None:
        self.proc, self.committed_offsets, self.served_on_close = proc, committed, served_on_close
        self.assigned: list[tuple[int, int]] = []

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[Any]:
        return [TopicPartition(tp.topic, tp.partition, self.committed_offsets[tp.partition])
                for tp in partitions]

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned = [(tp.partition, tp.offset) for tp in partitions]

    def close(self) -> None:
        if self.served_on_close:
            self.proc._on_assign(self, [TopicPartition(TOPIC, p) for p in self.served_on_close])


def subscribed_process() -> tuple[Process, io.StringIO]:
    """A process whose subscribe-mode consumer (its group committed 40 on partition 1) is served
    partition 1 when it closes."""
    proc, history = fake_process()
    proc.consumer = FakeConsumer(proc, {1: 40}, served_on_close=(1,))  # type: ignore[assignment]
    proc.group, proc.mode = SUBSCRIBE_GROUP, SUBSCRIBE
    return proc, history


def completions(history: io.StringIO) -> list[Op]:
    return [o for o in iter_jsonl(history.getvalue().splitlines()) if o.type != "invoke"]


def test_an_assign_op_records_only_its_own_consumers_starts() -> None:
    proc, history = subscribed_process()
    new = FakeConsumer(proc, {0: 7, 1: 90})

    def new_consumer(mode: str) -> FakeConsumer:
        proc.group = ASSIGN_GROUP if mode == ASSIGN else SUBSCRIBE_GROUP
        return new

    proc._new_consumer = new_consumer  # type: ignore[method-assign,assignment]
    assert proc.assign([0])
    [done] = completions(history)
    # Partition 1, looked up in the subscribe group by the old consumer's close, is not
    # among the assign group's starts: its 40 is no read of that group's commits.
    assert (done.f, done.type, done.meta.group) == ("assign", "ok", ASSIGN_GROUP)
    assert done.meta.starts == {0: Start(7, START_COMMITTED)}
    assert new.assigned == [(0, 7)]


def test_a_crash_records_its_closed_consumers_starts_under_that_consumers_group() -> None:
    proc, history = subscribed_process()
    proc.crash()
    [done] = completions(history)
    assert (done.f, done.type) == ("crash", "info")
    assert done.meta.group == SUBSCRIBE_GROUP
    assert done.meta.starts == {1: Start(40, START_COMMITTED)}
