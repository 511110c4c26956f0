"""Share groups (KIP-932) on the real cluster: the probe's share mode is healthy, and what
librdkafka 2.16's share consumer does when its application stops polling.

The local cluster lets a share group's acquisition lock be as short as 1 s
(``group.share.min.record.lock.duration.ms``), so stalls past the lock take seconds.
"""

from __future__ import annotations

import io
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient

from kmon.checker import CheckConfig, check
from kmon.checker.policy import invalidating
from kmon.history import Op, OpMeta, loads
from kmon.history.model import share_read
from kmon.probes import config as probe_config
from kmon.probes.metrics import ProbeMetrics
from kmon.probes.share import alter_group
from kmon.probes.workload import running

pytestmark = pytest.mark.timeout(240)

LOCK_S = 3.0


def share_config(lock_s: float) -> CheckConfig:
    return CheckConfig(share_lock_ns=int(lock_s * 1e9))


def counts(report: Any) -> dict[str, int]:
    return {t: len(recs) for t, recs in report.errors.items()}


def test_healthy_share_run_reports_nothing(kafka_bootstrap: str) -> None:
    """Two share consumers beside the usual workload, acknowledging a seeded mix and stalling
    past the lock now and then: every share rule holds, and the run exercised them."""
    history = io.StringIO()
    cfg = probe_config.load(env={}, overrides={
        "kafka.bootstrap.servers": kafka_bootstrap, "name": f"sh{uuid.uuid4().hex[:6]}",
        "events.enabled": "false", "history": "unused", "metrics.port": "0",
        "seed": "7", "rate": "20", "share.processes": "2", "share.lock": str(LOCK_S),
        "share.stall_share": "0.1", "share.release_share": "0.2", "share.reject_share": "0.1"})
    with running(cfg, history=history, metrics=ProbeMetrics()) as wl:
        wl.run(30.0)
    ops = loads(history.getvalue(), "jsonl")
    report = check(ops, share_config(LOCK_S))
    assert invalidating(list(report.errors)) == [], counts(report)  # G0 is Kafka's normal
    assert not any(t.startswith("share-") for t in report.errors), counts(report)
    assert report.valid, report.unseen_counts
    deliveries = [c for op in ops if op.type == "ok"
                  for rs in op.share_reads().values() for _, _, c in rs]
    outcomes = {m[3] for op in ops if op.f == "ack" and op.type == "ok" for m in op.value}
    assert len(deliveries) > 50 and max(deliveries) >= 2, deliveries  # redelivered too
    assert outcomes == {"accept", "release", "reject"}


# -- librdkafka 2.16's share consumer keeps fetching while the application does not poll ------


@pytest.fixture
def share_topic(kafka_bootstrap: str) -> Iterator[tuple[str, str]]:
    """A one-partition topic and a share group on it reading from the start, lock LOCK_S."""
    from confluent_kafka.admin import NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    topic = f"share-{uuid.uuid4().hex[:10]}"
    group = f"g-{topic}"
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    alter_group(admin, group, {"share.auto.offset.reset": "earliest",
                               "share.record.lock.duration.ms": str(int(LOCK_S * 1000))}, 30)
    time.sleep(2)  # every broker sees the group's configs
    yield topic, group
    admin.delete_topics([topic], request_timeout=30)


class Recorder:
    """Share polls as kmon ops (one process per consumer), for the checker."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.lock = threading.Lock()

    def poll(self, process: int, group: str, consumer: ShareConsumer) -> list[Any]:
        meta = OpMeta(group=group)
        start = time.time_ns()
        msgs = [m for m in consumer.poll(0.5) or () if m.error() is None]
        end = time.time_ns()
        records = [(m.offset(), int(m.value()), m.delivery_count()) for m in msgs]
        with self.lock:
            self.ops.append(Op(index=len(self.ops), time=start, process=process,
                               type="invoke", f="share-poll", value=[share_read(0)],
                               meta=meta))
            self.ops.append(Op(index=len(self.ops), time=end, process=process, type="ok",
                               f="share-poll", value=[share_read(0, records)], meta=meta))
        for m in msgs:
            consumer.acknowledge(m, AcknowledgeType.ACCEPT)
        if msgs:
            consumer.commit_sync(10)
        return records


def test_librdkafka_delivers_a_record_whose_lock_expired(
        kafka_bootstrap: str, share_topic: tuple[str, str]) -> None:
    """A finding (docs/share-groups.md): a share consumer that stops polling keeps fetching,
    acquiring records it does not return; their lock expires, the group delivers them to
    another consumer (count 2), and the idle one's next poll still returns its stale copy
    (count 1), which the checker reports as ``share-delivery-count``.

    librdkafka 2.16.0 did this in every run here. If this test fails, the client changed:
    update the finding in docs/share-groups.md."""
    topic, group = share_topic
    rec, stop = Recorder(), threading.Event()
    stale: list[tuple[int, int]] = []

    def produce() -> None:
        p = Producer({"bootstrap.servers": kafka_bootstrap})
        n = 0
        while not stop.is_set():
            p.produce(topic, value=str(n).encode(), partition=0)
            p.flush(5)
            n += 1
            time.sleep(0.2)

    def consume(process: int, idle_at: float | None) -> None:
        c = ShareConsumer({"bootstrap.servers": kafka_bootstrap, "group.id": group,
                           "share.acknowledgement.mode": "explicit"})
        c.subscribe([topic])
        began = time.monotonic()
        while not stop.is_set():
            if idle_at is not None and time.monotonic() - began > idle_at:
                stop.wait(3 * LOCK_S)  # holding nothing; librdkafka fetches on
                idle_at = None
            for off, _, count in rec.poll(process, group, c):
                if process == 0 and count == 1 and idle_at is None:
                    stale.append((off, count))
        c.close()

    threads = [threading.Thread(target=produce), threading.Thread(target=consume, args=(0, 4.0)),
               threading.Thread(target=consume, args=(1, None))]
    for t in threads:
        t.start()
    time.sleep(4.0 + 3 * LOCK_S + 6.0)
    stop.set()
    for t in threads:
        t.join(30)
    report = check(rec.ops, share_config(LOCK_S))
    print(report.errors.get("share-delivery-count", [])[:3])  # the finding's evidence
    found = counts(report)
    assert found.get("share-delivery-count", 0) >= 1, (found, stale[:5])
    assert set(found) <= {"share-delivery-count", "share-concurrent-delivery"}, found
