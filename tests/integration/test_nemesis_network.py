"""Network faults through Toxiproxy on the real cluster: each is observable by a client that
bootstraps through the proxies, and gone afterwards (the ``nemesis`` fixture fails the test
unless every broker is up, every ISR full and every proxy clean).

The duplicate test is the one that matters most: with idempotence off, a produce whose answer
is stalled is retried and the broker appends it again. Whether it really did is read from
the broker's own segment files, on every replica, not inferred from the client.
"""

from __future__ import annotations

import contextlib
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kmon.local.cluster import LocalCluster
from kmon.local.toxiproxy import LocalToxiproxy
from kmon.nemesis import NetworkFault, Target, health, segments
from kmon.nemesis.fixtures import nemesis, toxiproxy  # noqa: F401  (pytest fixtures)
from kmon.nemesis.runner import Nemesis


def _producer(bootstrap: str, **settings: object) -> Producer:
    return Producer({
        "bootstrap.servers": bootstrap,
        "linger.ms": 0,  # one request per record: round trips are what we measure
        **settings,
    })


def _round_trip(producer: Producer, topic: str) -> float:
    """Seconds from produce to delivery report of one record; fails on a delivery error."""
    errors: list[KafkaError] = []
    started = time.monotonic()
    producer.produce(topic, b"x", on_delivery=lambda err, _msg: err and errors.append(err))
    assert producer.flush(30) == 0 and not errors, errors
    return time.monotonic() - started


def _delivers_again(producer: Producer, topic: str, within: float) -> bool:
    """True once a record is delivered again (each try bounded by message.timeout.ms)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with contextlib.suppress(AssertionError):
            _round_trip(producer, topic)
            return True
    return False


def _topic(cluster: LocalCluster, replication_factor: int = 3) -> str:
    name = f"nem-{uuid.uuid4().hex[:10]}"
    cluster.create_topic(name, partitions=1, replication_factor=replication_factor)
    return name


def test_clients_through_the_proxies_are_handed_proxy_addresses(
    local_cluster: LocalCluster, nemesis: Nemesis  # noqa: F811
) -> None:
    metadata = AdminClient({"bootstrap.servers": local_cluster.proxied_bootstrap}).list_topics(
        timeout=10
    )
    advertised = sorted(f"{b.host}:{b.port}" for b in metadata.brokers.values())
    assert ",".join(advertised) == local_cluster.proxied_bootstrap
    # ... while clients of the plain listener keep being handed the plain addresses.
    plain = AdminClient({"bootstrap.servers": local_cluster.bootstrap}).list_topics(timeout=10)
    assert ",".join(sorted(f"{b.host}:{b.port}" for b in plain.brokers.values())) == (
        local_cluster.bootstrap
    )


def test_latency_is_felt_by_proxied_clients_only_and_removed(
    local_cluster: LocalCluster, nemesis: Nemesis  # noqa: F811
) -> None:
    topic = _topic(local_cluster)
    proxied = _producer(local_cluster.proxied_bootstrap, acks="all")
    direct = _producer(local_cluster.bootstrap, acks="all")
    _round_trip(proxied, topic), _round_trip(direct, topic)  # connections and metadata
    before = min(_round_trip(proxied, topic) for _ in range(3))

    # No threshold on how fast a round trip is (2 shared cores): the latency is large, the one
    # bound is the one the fault guarantees (during >= latency), and the rest is compared with
    # that measurement: a round trip without the toxic is faster by well over half of it.
    latency = 1.5
    fault = NetworkFault(nemesis.proxy, "latency",  # type: ignore[arg-type]
                         latency_ms=int(latency * 1000))
    with nemesis.active(fault) as record:
        during = min(_round_trip(proxied, topic) for _ in range(3))
        unaffected = min(_round_trip(direct, topic) for _ in range(3))
    after = min(_round_trip(proxied, topic) for _ in range(3))

    assert during >= latency, (before, during)  # the answer crossed the proxy once, late
    assert max(before, after) < during - latency / 2, (before, during, after)
    assert unaffected < during - latency / 2, (unaffected, during)
    assert record.info["nodes"] == [1, 2, 3] and record.healthy_at is not None
    assert health.problems(local_cluster, nemesis.proxy) == []


@pytest.mark.parametrize("kind", ["timeout", "down", "reset"])
def test_cut_proxies_fail_proxied_produces_until_the_fault_ends(
    local_cluster: LocalCluster, nemesis: Nemesis, kind: str  # noqa: F811
) -> None:
    topic = _topic(local_cluster)
    producer = _producer(
        local_cluster.proxied_bootstrap, acks="all",
        # Give up on a record after 2 s (default 300 s): the fault must show as a failure.
        **{"message.timeout.ms": 2000, "request.timeout.ms": 1000,
           # Retry refused connections every second at most (default: backing off to
           # 10 s), so the client notices the proxy is back within the test's patience.
           "reconnect.backoff.max.ms": 1000},
    )
    direct = _producer(local_cluster.bootstrap, acks="all")
    _round_trip(producer, topic)
    # Every proxy: under load a leader can move for a moment (a broker that misses its
    # heartbeats is fenced), and a client of the new leader would not be cut off at all.
    fault = NetworkFault(nemesis.proxy, kind)  # type: ignore[arg-type]
    with nemesis.active(fault) as record:
        errors: list[KafkaError] = []
        producer.produce(topic, b"cut", on_delivery=lambda err, _m: err and errors.append(err))
        producer.flush(10)
        assert [e.code() for e in errors] == [KafkaError._MSG_TIMED_OUT], errors
        assert _round_trip(direct, topic) < 5.0  # the brokers themselves are fine
    assert record.info["nodes"] == [1, 2, 3]
    assert _delivers_again(producer, topic, within=20.0)  # reconnected through clean proxies


def test_a_fault_on_a_partition_hits_its_leaders_proxy_only(
    local_cluster: LocalCluster, nemesis: Nemesis  # noqa: F811
) -> None:
    topic = _topic(local_cluster)
    fault = NetworkFault(nemesis.proxy, "latency", [Target(topic=topic)],  # type: ignore[arg-type]
                         cluster=local_cluster, latency_ms=50)
    with nemesis.active(fault) as record:
        [node] = record.info["nodes"]  # the leader when the fault started
        toxic = {name: [t.name for t in p.toxics]
                 for name, p in nemesis.proxy.proxies().items()}  # type: ignore[union-attr]
    assert node in local_cluster.describe_topic(topic)[0].replicas
    assert toxic == {f"broker-{n}": (["kmon-latency-downstream"] if n == node else [])
                     for n in (1, 2, 3)}


@pytest.mark.parametrize("idempotent", [False, True], ids=["idempotence-off", "idempotent"])
def test_retries_under_a_stalled_answer_duplicate_only_without_idempotence(
    local_cluster: LocalCluster, nemesis: Nemesis, idempotent: bool  # noqa: F811
) -> None:
    topic = _topic(local_cluster)
    acked: dict[bytes, int] = {}

    def report(err: KafkaError | None, msg: object) -> None:
        assert err is None, err
        acked[msg.value()] = msg.offset()  # type: ignore[attr-defined]

    producer = _producer(local_cluster.proxied_bootstrap, **{
        "acks": "all",  # durable: a duplicate, not a loss, is the question
        "enable.idempotence": idempotent,  # the setting under test
        "retries": 2147483647,  # retry until delivered (librdkafka's default, explicit)
        "request.timeout.ms": 1000,  # a stalled answer counts as lost after 1 s, then retried
        "message.timeout.ms": 60000,  # but the record itself is not given up
    })
    for i in range(3):
        producer.produce(topic, f"pre-{i}".encode(), on_delivery=report)
    assert producer.flush(10) == 0
    values = [f"v-{i}".encode() for i in range(5)]
    # Answers stall (requests still reach the broker and are appended) for 3 s. On every
    # proxy: whichever broker leads meanwhile, its answers are lost.
    fault = NetworkFault(nemesis.proxy, "timeout")  # type: ignore[arg-type]
    with nemesis.active(fault):
        for v in values:
            producer.produce(topic, v, on_delivery=report)
            producer.poll(0)
        time.sleep(3.0)
    assert producer.flush(60) == 0 and set(values) <= set(acked)

    # The broker's log, read back over the network ...
    consumer = Consumer({
        "bootstrap.servers": local_cluster.bootstrap,
        "group.id": f"nem-{uuid.uuid4().hex[:8]}",  # required; offsets are never committed
        "enable.auto.commit": False,  # assigned reads from the start: nothing to commit
    })
    read: dict[bytes, list[int]] = {}
    consumer.assign([TopicPartition(topic, 0, 0)])
    deadline = time.monotonic() + 15
    while sum(map(len, read.values())) < len(values) + 3 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            read.setdefault(msg.value(), []).append(msg.offset())
    time.sleep(1.0)  # anything beyond the expected count would arrive now
    while (msg := consumer.poll(0.5)) is not None:
        if not msg.error():
            read.setdefault(msg.value(), []).append(msg.offset())
    consumer.close()
    # ... and from every replica's segment files on disk.
    on_disk = {
        node: segments.offsets_by_value(segments.read_log(
            segments.partition_dir(local_cluster.data_dir(node), topic, 0)))
        for node in local_cluster.describe_topic(topic)[0].replicas
    }
    read_dups = {v: o for v, o in read.items() if len(o) > 1}
    for node, log in on_disk.items():
        assert log == read, f"broker {node}'s disk differs from what consumers read"
    if idempotent:
        assert read_dups == {}  # retried, deduplicated by the broker
    else:
        assert read_dups, f"no value appended twice: {read}"
        for value, offsets in read_dups.items():
            assert acked[value] in offsets  # the acknowledged copy is one of them


def test_the_nemesis_fixture_heals_leftovers(
    local_cluster: LocalCluster, nemesis: Nemesis  # noqa: F811
) -> None:
    # A fault left running and a broker left paused, as a crashed test would leave them.
    NetworkFault(nemesis.proxy, "bandwidth", rate_kbps=1).start()  # type: ignore[arg-type]
    local_cluster.pause(3)
    found = health.problems(local_cluster, nemesis.proxy)
    assert "broker 3 is paused" in found
    local_cluster.resume(3)
    assert any("has toxic kmon-bandwidth-downstream" in p
               for p in health.problems(local_cluster, nemesis.proxy))
    done = nemesis.heal()
    assert any(d.startswith("reset the proxies") for d in done)
    assert nemesis.proxy.problems() == []  # type: ignore[union-attr]


def test_the_toxiproxy_api_round_trip(toxiproxy: LocalToxiproxy) -> None:  # noqa: F811
    from kmon.local.toxiproxy import Toxic, ToxiproxyError

    toxiproxy.add_toxic(2, Toxic("probe", "slicer", "upstream", 0.5, {"average_size": 8}))
    proxy = toxiproxy.proxies()["broker-2"]
    assert [(t.name, t.type, t.stream, t.toxicity) for t in proxy.toxics] == [
        ("probe", "slicer", "upstream", 0.5)
    ]
    with pytest.raises(ToxiproxyError, match="HTTP 409"):  # the same name twice
        toxiproxy.add_toxic(2, Toxic("probe", "latency"))
    toxiproxy.remove_toxic(2, "probe")
    toxiproxy.remove_toxic(2, "probe")  # gone already: no error
    toxiproxy.set_enabled(1, False)
    assert toxiproxy.problems() == ["proxy broker-1 is disabled"]
    # A disabled proxy refuses clients: metadata through it alone fails.
    alone = AdminClient({"bootstrap.servers": f"127.0.0.1:{toxiproxy.ports.proxy(1)}"})
    with pytest.raises(KafkaException):
        alone.list_topics(timeout=2)
    toxiproxy.reset()
    assert toxiproxy.problems() == []
    assert alone.list_topics(timeout=10).brokers
