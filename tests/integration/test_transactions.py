"""Transactions work on the local cluster: later issues run transactional producers on it."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from confluent_kafka import Consumer, Producer, TopicPartition


def _read(bootstrap: str, topic: str, isolation: str, expected: int) -> list[str]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"test-{uuid.uuid4().hex[:8]}",  # required, though offsets are never used
        "enable.auto.commit": False,  # assigned reads from the start, nothing to commit
        "isolation.level": isolation,  # the property under test
    })
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[str] = []
        # Stop at the first empty poll after the expected count: a read_committed consumer
        # must not see more, a read_uncommitted one sees the aborted records too.
        for _ in range(120):
            msg = consumer.poll(0.5)
            if msg is None:
                if len(values) >= expected:
                    break
                continue
            if not msg.error():
                values.append(msg.value().decode())
        return values
    finally:
        consumer.close()


def test_committed_transactions_are_read_and_aborted_ones_are_not(
    kafka_bootstrap: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=1)
    producer = Producer({
        "bootstrap.servers": kafka_bootstrap,
        "transactional.id": f"test-{uuid.uuid4().hex[:8]}",  # makes the producer transactional
    })
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=f"committed-{i}".encode())
    producer.commit_transaction(60)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=f"aborted-{i}".encode())
    producer.flush(60)  # on the broker before the abort, or librdkafka drops them unsent
    producer.abort_transaction(60)

    committed = _read(kafka_bootstrap, topic, "read_committed", expected=5)
    assert committed == [f"committed-{i}" for i in range(5)]
    everything = _read(kafka_bootstrap, topic, "read_uncommitted", expected=10)
    assert sorted(everything) == sorted(committed + [f"aborted-{i}" for i in range(5)])
