"""The Kafka protocol proxy on the suite's cluster, without Spark: it binds loopback only,
forwards unchanged when no fault is on, and each fault does to real clients what it says.

Each test writes to a topic of its own, switches a fault on for its topic prefix only, and
releases it at the end (``kafka_proxy.reset``). Nothing here is timed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from kmon.nemesis.fixtures import kafka_proxy  # noqa: F401  (pytest fixture)


@pytest.fixture
def proxy(kafka_proxy: Any) -> Iterator[Any]:  # noqa: F811
    kafka_proxy.reset()
    yield kafka_proxy
    kafka_proxy.reset()


def _topic(cluster: Any, partitions: int = 1) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"kp-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions,
                                  replication_factor=3)])[name].result(60)
    return name


def _produce(bootstrap: str, topic: str, values: range) -> list[tuple[int, str]]:
    """(acknowledged offset, value) of each value, one produce at a time."""
    from confluent_kafka import Producer

    acks: list[tuple[int, str]] = []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 0})

    def report(err: Any, msg: Any) -> None:
        assert err is None, err
        acks.append((msg.offset(), msg.value().decode()))

    for v in values:
        producer.produce(topic, str(v).encode(), on_delivery=report)
        assert producer.flush(60) == 0
    return acks


def _poll_committed(bootstrap: str, topic: str, partition: int,
                    done: Callable[[Any, list[tuple[int, str]]], bool],
                    ) -> tuple[list[tuple[int, str]], bool]:
    """Every (offset, value) a read_committed consumer of one partition gets until
    ``done(consumer, got)``, for at most 60 s; and whether ``done`` came."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    c.assign([TopicPartition(topic, partition, 0)])
    got: list[tuple[int, str]] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if done(c, got):
                return got, True
            msg = c.poll(0.5)
            if msg is not None and not msg.error():
                got.append((msg.offset(), msg.value().decode()))
        return got, done(c, got)
    finally:
        c.close()


def _read(bootstrap: str, topic: str, until_offset: int,
          partition: int = 0) -> list[tuple[int, str]]:
    """Every (offset, value) a read_committed consumer gets, up to ``until_offset``."""
    got, _ = _poll_committed(bootstrap, topic, partition,
                             lambda c, got: bool(got) and got[-1][0] >= until_offset)
    return got


def _read_to_end(bootstrap: str, topic: str, partition: int,
                 cluster: Any) -> list[tuple[int, str]]:
    """Every (offset, value) a read_committed consumer through ``bootstrap`` gets until its
    position reaches the partition's end on ``cluster``. Only a fetch answer that carries the
    last transaction marker moves the position over it, so a proxy in between has then seen
    that marker: reading up to the last value can stop one answer short of it (the torn
    tests' first tear then waited for a later marker; CI, 2026-12-07)."""
    from confluent_kafka import TopicPartition

    end = _end(cluster.bootstrap, topic, partition)
    got, reached = _poll_committed(
        bootstrap, topic, partition,
        lambda c, got: c.position([TopicPartition(topic, partition)])[0].offset >= end)
    assert reached, f"{topic}/{partition} not read to its end {end} in 60 s: {got}"
    return got


def _end(bootstrap: str, topic: str, partition: int) -> int:
    """The partition's high watermark."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex})
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)[1])
    finally:
        c.close()


class _Write(NamedTuple):
    partition: int
    offset: int  # as acknowledged
    value: str


def _transactions(producer: Any, topic: str, first: int, count: int,
                  commit: bool = True) -> list[_Write]:
    """``count`` committed (or aborted) transactions, each writing partition 0 and then
    partition 1, in a produce request each (only the second write of a transaction may be
    torn)."""
    writes: list[_Write] = []

    def report(err: Any, msg: Any) -> None:
        assert err is None, err
        writes.append(_Write(msg.partition(), msg.offset(), msg.value().decode()))

    for n in range(first, first + count):
        producer.begin_transaction()
        for p in (0, 1):
            producer.produce(topic, f"{n}/{p}".encode(), partition=p, on_delivery=report)
            assert producer.flush(60) == 0
        if commit:
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)
    return writes


def _transactional_topic(proxy: Any, cluster: Any) -> tuple[str, Any, list[_Write]]:
    """A two-partition topic, a transactional producer through the proxy, and the writes of
    one committed transaction, read back through the proxy (which so learns a marker)."""
    from confluent_kafka import Producer

    topic = _topic(cluster, partitions=2)
    producer = Producer({"bootstrap.servers": proxy.bootstrap, "linger.ms": 0,
                         "transactional.id": f"kp-txn-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(60)
    first = _transactions(producer, topic, 0, 1)
    assert _read_to_end(proxy.bootstrap, topic, 1, cluster)  # the proxy sees its marker
    return topic, producer, first


def _stored_values(cluster: Any, topic: str) -> set[str]:
    """Every committed value the brokers hold in the topic's two partitions."""
    return {v for p in (0, 1) for _, v in _read_to_end(cluster.bootstrap, topic, p, cluster)}


def _listening(ports: set[int]) -> list[str]:
    """The local addresses (hex, as /proc/net/tcp* gives them) listening on ``ports``."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, port = local.rsplit(":", 1)
            if state == "0A" and int(port, 16) in ports:  # 0A: LISTEN
                out.append(addr)
    return out


def test_the_proxy_listens_on_loopback_only(proxy: Any) -> None:
    bound = _listening(set(proxy.ports.kafka_proxy_ports().values()))
    assert len(bound) >= 2, bound  # bootstrap and control, and one per broker
    # Never the wildcard address (0.0.0.0 or ::): 127.0.0.1, possibly v4-mapped in IPv6.
    assert all(addr.endswith("0100007F") for addr in bound), bound


def test_without_a_fault_the_proxy_changes_nothing(proxy: Any, local_cluster: Any) -> None:
    topic = _topic(local_cluster)
    acks = _produce(proxy.bootstrap, topic, range(20))
    assert [o for o, _ in acks] == list(range(20))
    assert _read(proxy.bootstrap, topic, 19) == acks == _read(local_cluster.bootstrap, topic, 19)


def test_spurious_offsets_acknowledge_at_zero(proxy: Any, local_cluster: Any) -> None:
    topic = _topic(local_cluster)
    _produce(proxy.bootstrap, topic, range(12))
    proxy.activate("spurious-offset", prefix=topic, rate=1.0, max_count=3, seconds=60)
    acks = _produce(proxy.bootstrap, topic, range(12, 20))
    assert [o for o, _ in acks] == [0, 0, 0, 15, 16, 17, 18, 19]
    stored = _read(local_cluster.bootstrap, topic, 19)
    assert stored[12:15] == [(12, "12"), (13, "13"), (14, "14")]  # stored where they belong


def test_server_side_filtering_hides_acknowledged_records(proxy: Any,
                                                          local_cluster: Any) -> None:
    topic = _topic(local_cluster)
    proxy.activate("server-side-filtering", prefix=topic, rate=1.0, max_count=2, seconds=60)
    acks = _produce(proxy.bootstrap, topic, range(10))
    through = _read(proxy.bootstrap, topic, 9)
    assert len(through) == 8 and through[-1] == (9, "9"), through
    assert [a for a in acks if a not in through] == acks[:2]  # the first two ever fetched
    assert _read(proxy.bootstrap, topic, 9) == through  # hidden from every answer
    assert _read(local_cluster.bootstrap, topic, 9) == acks  # the broker has them all


def test_duplicates_are_stored_twice_and_later_sends_still_go_through(
        proxy: Any, local_cluster: Any) -> None:
    topic = _topic(local_cluster)
    proxy.activate("duplicate", prefix=topic, rate=1.0, max_count=2, seconds=60)
    acks = _produce(proxy.bootstrap, topic, range(6))
    stored = [v for _, v in _read(local_cluster.bootstrap, topic, 7)]
    assert stored == ["0", "0", "1", "1", "2", "3", "4", "5"], stored
    assert [v for _, v in acks] == [str(v) for v in range(6)]  # the client saw no error


def test_torn_transactions_acknowledge_each_torn_write_at_a_marker_of_its_own(
        proxy: Any, local_cluster: Any) -> None:
    """A torn write is acknowledged at the partition's last transaction marker, which holds no
    value; a second one there would put two values at one offset (inconsistent-offsets, which
    the torn-transaction row forbids), so the marker serves one tear until readers pass a newer
    one."""
    topic, producer, first = _transactional_topic(proxy, local_cluster)
    proxy.activate("torn-transaction", prefix=topic, rate=1.0, max_count=10, seconds=60)
    writes = _transactions(producer, topic, 1, 3)
    _read_to_end(proxy.bootstrap, topic, 1, local_cluster)  # readers pass the newer markers
    writes += _transactions(producer, topic, 4, 1)

    stored = _stored_values(local_cluster, topic)
    torn = [w for w in writes if w.value not in stored]
    # One tear per marker, and only of a transaction's second write (its first went through).
    assert [w.value for w in torn] == ["1/1", "4/1"], (torn, stored)
    offsets = [w.offset for w in first + writes if w.partition == 1]
    assert len(set(offsets)) == len(offsets), offsets  # one value per acknowledged offset


def test_a_tear_in_a_transaction_that_aborts_is_handed_back(proxy: Any,
                                                           local_cluster: Any) -> None:
    """Dropping a write of a transaction that then aborts is no fault (none of its writes is
    ever to be read), so the proxy hands that injection back: a row's count and its budget are
    of committed transactions only. CI, 2026-12-07: all of a row's tears fell in the probe's
    deliberate aborts, and the row had nothing torn to detect."""
    from kmon.nemesis.protocol import counted

    topic, producer, _ = _transactional_topic(proxy, local_cluster)
    proxy.activate("torn-transaction", prefix=topic, rate=1.0, max_count=1, seconds=60)
    aborted = _transactions(producer, topic, 1, 1, commit=False)  # torn, then aborted
    assert proxy.activations()["torn-transaction"].injected == 0
    writes = _transactions(producer, topic, 2, 1)  # its marker is claimed: nothing torn
    _read_to_end(proxy.bootstrap, topic, 1, local_cluster)  # readers pass a newer marker
    writes += _transactions(producer, topic, 3, 1)  # the budget of one tear is still there

    stored = _stored_values(local_cluster, topic)
    assert not stored & {w.value for w in aborted}
    assert [w.value for w in writes if w.value not in stored] == ["3/1"], (writes, stored)
    assert proxy.activations()["torn-transaction"].injected == 1
    lines = [line for line in proxy.injections("torn-transaction")
             if line.startswith("torn-transaction: ") and topic in line]
    assert len(lines) == 3 and lines[1].endswith("aborted (not counted)"), lines
    assert counted(lines) == [lines[2]]
