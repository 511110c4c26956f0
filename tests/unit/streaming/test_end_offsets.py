"""The monitor's start reads the facts topic's end offsets: a transient broker answer (a topic
just created, a leader moving) is retried, anything else fails at once."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kmon.streaming.kafka import _watermarks


class _Answers:
    """Answers get_watermark_offsets from a script: an error code raises, a number is the end."""

    def __init__(self, *script: int) -> None:
        self.script, self.calls = list(script), 0

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        self.calls += 1
        step = self.script.pop(0)
        if step < 0:
            raise KafkaException(KafkaError(-step))
        return 0, step


TP = TopicPartition("facts", 0)


def test_not_leader_right_after_creation_is_retried() -> None:
    c = _Answers(-KafkaError.NOT_LEADER_FOR_PARTITION, -KafkaError.LEADER_NOT_AVAILABLE, 42)
    assert _watermarks(c, TP, time.monotonic() + 10)[1] == 42
    assert c.calls == 3


def test_a_lasting_error_fails_fast() -> None:
    c = _Answers(-KafkaError.TOPIC_AUTHORIZATION_FAILED, 42)
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        _watermarks(c, TP, time.monotonic() + 10)
    assert c.calls == 1


def test_a_transient_error_past_the_deadline_is_raised() -> None:
    c = _Answers(-KafkaError.NOT_LEADER_FOR_PARTITION, 42)
    with pytest.raises(KafkaException, match="NOT_LEADER_FOR_PARTITION"):
        _watermarks(c, TP, time.monotonic())


class _BrokerKilled:
    """A broker killed under the monitor's start: its handle destroyed, then all brokers down."""

    def __init__(self) -> None:
        self.errors = [KafkaError._DESTROY_BROKER, KafkaError._ALL_BROKERS_DOWN]

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return 0, 7


def test_a_broker_killed_while_the_monitor_starts_is_retried() -> None:
    assert _watermarks(_BrokerKilled(), TP, time.monotonic() + 10)[1] == 7
