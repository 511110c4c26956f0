"""Stand-ins shared by the probe's unit tests."""

from __future__ import annotations

import io
import random
from types import SimpleNamespace
from typing import Any

TOPIC = "kmon-probe-t.0"


class OneTopicKeys:
    """The probe's key space as one topic with two partitions: key k is partition k."""

    version = 0

    def topic_partition(self, key: int) -> tuple[str, int]:
        return TOPIC, key

    def key(self, topic: str, partition: int) -> int | None:
        return partition if topic == TOPIC else None

    def readable_topics(self) -> list[str]:
        return [TOPIC]

    def readable_keys(self) -> list[int]:
        return [0, 1]

    def keys_of(self, topics: list[str]) -> list[int]:
        return [0, 1] if TOPIC in topics else []


class FakeMessage:
    """A record of ``TOPIC`` as a consumer returns it (``value`` as the probe encodes it)."""

    def __init__(self, partition: int, offset: int, value: int, delivery_count: int = 1,
                 epoch: int = 0) -> None:
        self._p, self._o, self._v = partition, offset, value
        self._count, self._epoch = delivery_count, epoch

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return TOPIC

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def value(self) -> bytes:
        return str(self._v).encode()

    def delivery_count(self) -> int:
        return self._count

    def leader_epoch(self) -> int:
        return self._epoch


def fake_process(**overrides: str) -> tuple[Any, io.StringIO]:
    """A probe ``Process`` on a stand-in workload (keys: ``OneTopicKeys``), recording its
    history into the returned StringIO; ``overrides`` are probe settings."""
    from prometheus_client import CollectorRegistry

    from kmon.probes import config
    from kmon.probes.metrics import ProbeMetrics
    from kmon.probes.process import Process
    from kmon.probes.recorder import Recorder

    cfg = config.load(env={}, overrides={"kafka.bootstrap.servers": "127.0.0.1:1", "name": "t",
                                         "op_timeout": "0.2", "close_timeout": "1", **overrides})
    history = io.StringIO()
    pids = iter(range(100))
    rebalances = SimpleNamespace(labels=lambda kind: SimpleNamespace(inc=lambda: None))
    wl = SimpleNamespace(cfg=cfg, recorder=Recorder(cfg.probe_id, ProbeMetrics(
        CollectorRegistry()), history=history), keyspace=OneTopicKeys(), new_pid=lambda: next(pids),
        abandoned_clients=[], count_error=lambda err: None,
        metrics=SimpleNamespace(rebalances=rebalances))
    return Process(0, wl, random.Random(0)), history
