"""A process knows its consumer's assignment without asking librdkafka.

``Consumer.assignment()`` waits for librdkafka's main thread while holding the GIL: every
thread of the probe stops for as long as that thread is slow, and for good if it never
answers. A poll (and a transaction's rewind) therefore reads the assignment the process set
itself: by its assign ops, and in subscribe mode by its rebalance callbacks and the
unassignment confluent-kafka makes after a revoking one. The stand-in consumer below keeps its
assignment as librdkafka does (only assign calls change it) and fails any ``assignment()``
call, so each test also checks that the tracked assignment is the client's.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kmon.probes.process import ASSIGN, SUBSCRIBE, Process
from tests.unit.probes.fakes import TOPIC, fake_process


class FakeConsumer:
    """No records; an assignment changed only by ``assign`` (and ``unassign_after_callback``,
    confluent-kafka's fallback); ``assignment()`` answers only when ``may_ask``."""

    def __init__(self, fail_assign: bool = False) -> None:
        self.current: list[tuple[str, int]] = []
        self.fail_assign = fail_assign
        self.may_ask = False
        self.asked = 0

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        return []

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        pass  # the group assigns later, through the callbacks

    def close(self) -> None:
        self.current = []

    def assign(self, partitions: list[TopicPartition]) -> None:
        if self.fail_assign:
            raise KafkaException(KafkaError(KafkaError._STATE))
        self.current = [(tp.topic, tp.partition) for tp in partitions]

    def unassign_after_callback(self) -> None:
        self.current = []

    def assignment(self) -> list[TopicPartition]:
        self.asked += 1
        assert self.may_ask, "assignment() asked of librdkafka (holds the GIL)"
        return [TopicPartition(t, p) for t, p in self.current]


def process(mode: str) -> tuple[Process, FakeConsumer]:
    # Client start positions: no committed-offset lookups in the stand-in.
    proc, _ = fake_process(start_positions="client")
    consumer = FakeConsumer()
    proc._new_consumer = lambda m: consumer  # type: ignore[method-assign,assignment,return-value]
    proc.mode = mode
    return proc, consumer


def polled_keys(proc: Process) -> set[int]:
    return set(proc._poll())


def test_a_poll_after_an_assign_op_reads_the_assignment_the_op_set() -> None:
    proc, consumer = process(ASSIGN)
    assert proc.assign([0, 1])
    assert polled_keys(proc) == {0, 1}
    assert proc.assign([1])  # the same consumer, a new assignment
    assert polled_keys(proc) == {1} == {p for _, p in consumer.current}
    assert consumer.asked == 0


def test_the_assignment_follows_the_rebalance_callbacks_of_a_subscribe_mode_consumer() -> None:
    proc, consumer = process(SUBSCRIBE)
    proc.consumer = consumer  # type: ignore[assignment]
    assert polled_keys(proc) == set()
    proc._on_assign(consumer, [TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])  # type: ignore[arg-type]
    assert polled_keys(proc) == {0, 1}
    proc._on_revoke(consumer, [TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])  # type: ignore[arg-type]
    consumer.unassign_after_callback()
    assert polled_keys(proc) == set()
    proc._on_assign(consumer, [TopicPartition(TOPIC, 1)])  # type: ignore[arg-type]
    assert polled_keys(proc) == {1}
    proc._on_lost(consumer, [TopicPartition(TOPIC, 1)])  # type: ignore[arg-type]
    consumer.unassign_after_callback()
    assert polled_keys(proc) == set() and consumer.current == []
    assert consumer.asked == 0


def test_callbacks_of_a_consumer_being_closed_leave_the_new_consumers_assignment() -> None:
    proc, consumer = process(ASSIGN)
    assert proc.assign([0])
    closing = FakeConsumer()
    proc._on_assign(closing, [TopicPartition(TOPIC, 1)])  # type: ignore[arg-type]
    proc._on_revoke(closing, [TopicPartition(TOPIC, 1)])  # type: ignore[arg-type]
    assert polled_keys(proc) == {0}
    assert consumer.asked == 0


def test_a_failed_assign_leaves_the_assignment_unknown_so_the_client_is_asked() -> None:
    proc, consumer = process(SUBSCRIBE)
    proc.consumer = consumer  # type: ignore[assignment]
    proc._on_assign(consumer, [TopicPartition(TOPIC, 0)])  # type: ignore[arg-type]
    consumer.fail_assign = True
    with pytest.raises(KafkaException):
        proc._on_assign(consumer, [TopicPartition(TOPIC, 1)])  # type: ignore[arg-type]
    consumer.may_ask = True
    assert polled_keys(proc) == {0} and consumer.asked == 1


def test_a_new_consumer_starts_with_no_assignment() -> None:
    proc, consumer = process(SUBSCRIBE)
    proc.consumer = consumer  # type: ignore[assignment]
    proc._on_assign(consumer, [TopicPartition(TOPIC, 0)])  # type: ignore[arg-type]
    proc.crash()  # closes it
    fresh = FakeConsumer()
    proc._new_consumer = lambda m: fresh  # type: ignore[method-assign,assignment,return-value]
    assert proc.subscribe([TOPIC])
    assert polled_keys(proc) == set() and fresh.asked == 0
