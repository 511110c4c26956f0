"""A share process's ops without a cluster: what a share poll and its acknowledgement record
for each way they can end, the order of an ack's invocation and the client's acknowledge
calls, and the share group's settings the probe sets and checks."""

from __future__ import annotations

import io
import random
import threading
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, KafkaError, KafkaException, TopicPartition
from prometheus_client import CollectorRegistry

from kmon.history import Op, iter_jsonl
from kmon.probes import config
from kmon.probes import share as S
from kmon.probes.metrics import ProbeMetrics
from kmon.probes.recorder import Recorder
from tests.unit.probes.fakes import TOPIC, FakeMessage, OneTopicKeys


def msg(partition: int, offset: int, value: int, count: int) -> FakeMessage:
    """A share consumer's record, delivered ``count`` times (leader epoch 3)."""
    return FakeMessage(partition, offset, value, count, epoch=3)


class FakeShareConsumer:
    """``poll`` returns ``batch`` (or raises it); ``commit_sync`` answers ``errors`` per
    partition (or raises it). Each acknowledge call notes how many ops the history held."""

    def __init__(self, history: io.StringIO, batch: Any = (), errors: Any = None) -> None:
        self.history, self.batch, self.errors = history, batch, errors
        self.acked: list[tuple[int, int, Any, int]] = []
        self.closed = threading.Event()

    def subscribe(self, topics: list[str]) -> None:
        self.topics = topics

    def poll(self, timeout: float) -> Any:
        if isinstance(self.batch, BaseException):
            raise self.batch
        return list(self.batch)

    def acknowledge(self, m: FakeMessage, ack_type: Any) -> None:
        lines = len(self.history.getvalue().splitlines())
        self.acked.append((m.partition(), m.offset(), ack_type, lines))

    def commit_sync(self, timeout: float) -> dict[TopicPartition, Any]:
        if isinstance(self.errors, BaseException):
            raise self.errors
        errors = self.errors or {}
        parts = sorted({p for p, _, _, _ in self.acked})
        return {TopicPartition(TOPIC, p): (KafkaException(KafkaError(errors[p]))
                                           if p in errors else None) for p in parts}

    def close(self) -> None:
        self.closed.set()


def share_process(consumer_factory: Any, **settings: str) -> tuple[S.ShareProcess, io.StringIO]:
    cfg = config.load(env={}, overrides={"kafka.bootstrap.servers": "127.0.0.1:1", "name": "t",
                                         "op_timeout": "0.2", "close_timeout": "1",
                                         "share.processes": "1", **settings})
    history = io.StringIO()
    pids = iter(range(100))
    wl = SimpleNamespace(cfg=cfg, recorder=Recorder(cfg.probe_id, ProbeMetrics(
        CollectorRegistry()), history=history), keyspace=OneTopicKeys(), new_pid=lambda: next(pids),
        abandoned_clients=[], count_error=lambda err: None, stopping=threading.Event())
    proc = S.ShareProcess(5, wl, random.Random(0))  # type: ignore[arg-type]
    proc.leaders_at = float("inf")  # no metadata refresh: no admin client
    proc.consumer, proc.group = consumer_factory(history), S.share_group(cfg)
    proc.share_keys, proc.keys_version = [0, 1], 0
    return proc, history


def ops(history: io.StringIO) -> list[Op]:
    return list(iter_jsonl(history.getvalue().splitlines()))


def test_a_poll_lists_every_key_with_its_records_and_counts() -> None:
    batch = [msg(0, 4, 40, 1), msg(0, 5, 50, 2)]
    proc, history = share_process(lambda h: FakeShareConsumer(h, batch))
    proc.step()
    poll_invoke, poll_ok, ack_invoke, ack_ok = ops(history)
    assert poll_invoke.f == "share-poll" and poll_invoke.value == [
        ("share-read", 0, None), ("share-read", 1, None)]
    assert poll_ok.type == "ok" and poll_ok.value == [
        ("share-read", 0, [(4, 40, 1), (5, 50, 2)]), ("share-read", 1, [])]
    assert poll_ok.meta.group == "kmon-probe-t-share"
    assert ack_invoke.f == "ack" and [m[:3] for m in ack_invoke.value] == [("ack", 0, 4),
                                                                           ("ack", 0, 5)]
    assert ack_ok.type == "ok" and ack_ok.meta.group == "kmon-probe-t-share"


def test_an_ack_is_invoked_before_the_client_is_told() -> None:
    """librdkafka may send acknowledgements with its next fetch: the op must already be in
    the history when acknowledge() is called."""
    proc, history = share_process(lambda h: FakeShareConsumer(h, [msg(1, 7, 70, 1)]))
    proc.step()
    (_, _, ack_type, lines_then), = proc.consumer.acked  # type: ignore[union-attr]
    assert lines_then == 3  # the poll's invoke and completion, and the ack's invoke
    outcome = ops(history)[2].value[0][3]
    assert S.ACK_TYPES[outcome] == ack_type


def test_outcomes_follow_the_configured_shares() -> None:
    batch = [msg(0, n, n, 1) for n in range(200)]
    proc, history = share_process(lambda h: FakeShareConsumer(h, batch),
                                  **{"share.release_share": "0.25", "share.reject_share": "0.25"})
    proc.step()
    outcomes = [m[3] for m in ops(history)[2].value]
    counts = {o: outcomes.count(o) for o in ("accept", "release", "reject")}
    assert all(30 < counts[o] < 70 for o in ("release", "reject")), counts
    assert counts["accept"] > 70, counts


def test_a_partition_refused_makes_the_ack_info_and_keeps_the_consumer() -> None:
    batch = [msg(0, 1, 10, 1), msg(1, 2, 20, 1)]
    proc, history = share_process(
        lambda h: FakeShareConsumer(h, batch, errors={1: KafkaError.INVALID_RECORD_STATE}))
    consumer, pid = proc.consumer, proc.pid
    proc.step()
    ack_done = ops(history)[3]
    assert ack_done.type == "info" and "INVALID_RECORD_STATE" in (ack_done.meta.error or "")
    assert proc.consumer is consumer and proc.pid == pid  # nothing of it is still in flight


def test_a_commit_that_raises_is_info() -> None:
    proc, history = share_process(lambda h: FakeShareConsumer(
        h, [msg(0, 1, 10, 1)], errors=KafkaException(KafkaError(KafkaError._TRANSPORT))))
    proc.step()
    assert ops(history)[3].type == "info"


def test_a_poll_that_raises_is_info_with_unknown_records_and_a_new_process() -> None:
    proc, history = share_process(
        lambda h: FakeShareConsumer(h, KafkaException(KafkaError(KafkaError._TRANSPORT))))
    consumer, pid = proc.consumer, proc.pid
    proc.step()
    _, done = ops(history)
    assert done.type == "info" and done.value == [("share-read", 0, None),
                                                  ("share-read", 1, None)]
    assert proc.pid != pid and proc.consumer is None
    assert consumer.closed.wait(2)  # type: ignore[union-attr]


def test_an_empty_poll_acknowledges_nothing() -> None:
    proc, history = share_process(lambda h: FakeShareConsumer(h, []))
    proc.step()
    assert [op.f for op in ops(history)] == ["share-poll", "share-poll"]


def test_the_group_is_set_to_what_the_checker_assumes() -> None:
    cfg = config.load(env={}, overrides={"kafka.bootstrap.servers": "127.0.0.1:1", "name": "t",
                                         "share.lock": "5", "share.delivery_limit": "3"})
    assert S.group_settings(cfg) == {
        "share.auto.offset.reset": "earliest",
        "share.record.lock.duration.ms": "5000",
        "share.delivery.count.limit": "3",
        "share.isolation.level": "read_committed",
    }


class FakeAdmin:
    def __init__(self, configs: dict[str, str]) -> None:
        self.configs = configs

    def describe_configs(self, resources: list[Any]) -> dict[Any, Any]:
        entries = {k: SimpleNamespace(value=v) for k, v in self.configs.items()}
        return {resources[0]: SimpleNamespace(result=lambda timeout: entries)}


def test_a_group_left_unconfigured_must_already_have_the_lock() -> None:
    cfg = config.load(env={}, overrides={"kafka.bootstrap.servers": "127.0.0.1:1", "name": "t",
                                         "share.configure_group": "false"})
    have = {**S.group_settings(cfg), "share.record.lock.duration.ms": "15000"}
    with pytest.raises(config.ConfigError) as e:
        S.configure_group(FakeAdmin(have), cfg)  # type: ignore[arg-type]
    assert e.value.setting == "share.lock" and "15000" in str(e.value)
    S.configure_group(FakeAdmin(S.group_settings(cfg)), cfg)  # type: ignore[arg-type]


def test_release_and_reject_shares_cannot_exceed_one() -> None:
    with pytest.raises(config.ConfigError) as e:
        config.load(env={}, overrides={"kafka.bootstrap.servers": "127.0.0.1:1",
                                       "share.release_share": "0.7",
                                       "share.reject_share": "0.5"})
    assert e.value.setting == "share.reject_share"


def test_ack_types_cover_every_outcome() -> None:
    assert set(S.ACK_TYPES.values()) == {AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE,
                                         AcknowledgeType.REJECT}
