"""A process's commit op without a cluster: what it records for each way a synchronous offset
commit can end (returned, refused, hung), and that a hung commit's consumer is closed only once
the call returns, its callbacks then belonging to no op."""

from __future__ import annotations

import io
import threading
from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kmon.history import Op, Rebalance, iter_jsonl
from kmon.probes.process import Process
from tests.unit.probes.fakes import TOPIC, fake_process


class FakeConsumer:
    """``commit`` answers with ``answer``: partition errors, an exception, or an Event to
    block on (then it returns no error)."""

    def __init__(self, answer: Any = None) -> None:
        self.answer = answer
        self.committed: list[list[tuple[str, int, int]]] = []
        self.closed = threading.Event()

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> list[Any]:
        assert asynchronous is False
        self.committed.append([(tp.topic, tp.partition, tp.offset) for tp in offsets])
        if isinstance(self.answer, BaseException):
            raise self.answer
        if isinstance(self.answer, threading.Event):
            self.answer.wait()
        errors = self.answer or {}
        # (TopicPartition.error is read-only: the process reads nothing else of the result)
        return [SimpleNamespace(error=KafkaError(errors[tp.partition])
                                if tp.partition in errors else None) for tp in offsets]

    def close(self) -> None:
        self.closed.set()


def process(consumer: FakeConsumer) -> tuple[Process, io.StringIO]:
    proc, history = fake_process()
    proc.consumer, proc.group = consumer, "kmon-probe-t-assign"
    return proc, history


def ops(history: io.StringIO) -> list[Op]:
    return list(iter_jsonl(history.getvalue().splitlines()))


def test_a_commit_that_returned_clean_is_ok_with_its_group_and_offsets() -> None:
    consumer = FakeConsumer()
    proc, history = process(consumer)
    proc.commit({1: 5, 2: 7})
    invoke, done = ops(history)
    assert consumer.committed == [[(TOPIC, 1, 5), (TOPIC, 2, 7)]]
    assert (done.f, done.type, done.commits()) == ("commit", "ok", [(1, 5), (2, 7)])
    assert invoke.value == done.value and invoke.meta.group == done.meta.group
    assert done.meta.group == "kmon-probe-t-assign" and set(done.meta.placements) == {1, 2}
    assert proc.pid == 0 and proc.consumer is consumer


def test_nothing_to_commit_is_no_op() -> None:
    proc, history = process(FakeConsumer())
    proc.commit({})
    assert ops(history) == []


def test_a_refused_commit_is_info_and_the_process_carries_on() -> None:
    # A retried attempt may have been stored; the call returned, so nothing is in flight.
    consumer = FakeConsumer(KafkaException(KafkaError(KafkaError.ILLEGAL_GENERATION)))
    proc, history = process(consumer)
    proc.commit({1: 5, 2: 7})
    done = ops(history)[-1]
    assert (done.type, done.meta.error.split(":")[0]) == ("info", "ILLEGAL_GENERATION")
    assert proc.pid == 0 and proc.consumer is consumer


def test_a_partly_stored_commit_is_info_and_the_process_carries_on() -> None:
    consumer = FakeConsumer({2: KafkaError.UNKNOWN_TOPIC_OR_PART})  # 1 stored, 2 refused
    proc, history = process(consumer)
    proc.commit({1: 5, 2: 7})
    assert ops(history)[-1].type == "info"
    assert proc.pid == 0 and proc.consumer is consumer and not consumer.closed.is_set()


def test_a_commit_librdkafka_never_sent_is_fail() -> None:
    consumer = FakeConsumer(KafkaException(KafkaError(KafkaError._NO_OFFSET)))
    proc, history = process(consumer)
    proc.commit({1: 5})
    assert ops(history)[-1].type == "fail" and proc.pid == 0


def test_a_hung_commit_is_info_and_its_consumer_is_closed_once_the_call_returns() -> None:
    release = threading.Event()
    consumer = FakeConsumer(release)
    proc, history = process(consumer)
    proc.commit({1: 5})
    done = ops(history)[-1]
    assert done.type == "info" and "commit did not return within 0.2s" in done.meta.error
    assert proc.pid == 1 and proc.consumer is None
    assert not consumer.closed.is_set(), "closed under a call in progress"
    # Its callbacks (a close revokes) now belong to no op of the process.
    proc._on_revoke(consumer, [TopicPartition(TOPIC, 1)])  # type: ignore[arg-type]
    assert proc.rebalances == []
    proc._on_revoke(FakeConsumer(), [TopicPartition(TOPIC, 1)])  # type: ignore[arg-type]
    assert proc.rebalances == [Rebalance("revoked", (1,))]
    release.set()
    assert consumer.closed.wait(5)


class HangingClose(FakeConsumer):
    """A consumer whose close blocks until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def close(self) -> None:
        self.release.wait()
        super().close()


def test_a_consumer_whose_close_outlasts_its_timeout_is_abandoned_with_its_callbacks() -> None:
    consumer = HangingClose()
    proc, history = process(consumer)
    proc.crash()
    assert proc.group is None and any(c is consumer for c in proc.wl.abandoned_clients)
    # A rebalance served late by that close (librdkafka can assign, then revoke, while
    # leaving) belongs to no op: no start without a group in the next op's meta.
    proc._on_assign(consumer, [TopicPartition(TOPIC, 1, 0)])  # type: ignore[arg-type]
    assert proc.starts == {} and proc.rebalances == []
    consumer.release.set()
    assert consumer.closed.wait(5)
    assert all(o.meta.group is not None or not o.meta.starts for o in ops(history))


def test_a_consumer_closed_in_time_is_not_abandoned() -> None:
    consumer = FakeConsumer()
    proc, _ = process(consumer)
    proc.crash()
    assert consumer.closed.is_set() and proc.wl.abandoned_clients == []
