"""The driver's Kafka clients: the outputs producer, the output topics' creation, the events
topic's partitions and their offsets."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, NamedTuple

from kmon.streaming.config import MonitorConfig

log = logging.getLogger("kmon.monitor")

# Output topics the monitor creates when they are missing (the events topic is the probes').
OUTPUT_PARTITIONS = 3


def producer_config(cfg: MonitorConfig) -> dict[str, Any]:
    return {
        # No duplicates from the producer's own retries; implies acks=all.
        "enable.idempotence": True,
        # A micro-batch's outputs go out together: wait briefly to fill batches.
        "linger.ms": 5,
        # Fail a micro-batch (to retry it) rather than wait the default five minutes.
        "message.timeout.ms": 120_000,
        # The monitor's outputs are few; a full queue means Kafka is unreachable.
        "queue.buffering.max.messages": 200_000,
        **cfg.producer(),  # the user's settings (bootstrap, security) win
    }


def make_producer(cfg: MonitorConfig) -> Any:
    from confluent_kafka import Producer

    return Producer(producer_config(cfg))


def _client_settings(cfg: MonitorConfig) -> dict[str, Any]:
    """Where the cluster is and how to log in: what an admin client or a consumer needs."""
    return {k: v for k, v in producer_config(cfg).items()
            if k in ("bootstrap.servers",) or k.startswith(("security.", "sasl.", "ssl."))}


def events_partitions(cfg: MonitorConfig, stop: threading.Event | None = None,
                      timeout: float = 30.0, wait: bool = True) -> list[int]:
    """The events topic's partitions. The monitor may start before the probes create the
    topic: then this waits for it (logging each minute) until ``stop`` is set. ``wait``
    False: one look, [] if the topic cannot be seen."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    with AdminClient(_client_settings(cfg)) as admin:
        stop = stop or threading.Event()
        next_log = 0.0
        while True:
            try:
                # All topics, not just this one: asking for one may auto-create it.
                meta = admin.list_topics(timeout=timeout).topics.get(cfg.events_topic)
                if meta is not None and meta.error is None and meta.partitions:
                    return sorted(meta.partitions)
            except KafkaException as e:
                log.warning("could not list topics: %s", e)
            if not wait:
                return []
            if time.monotonic() >= next_log:
                next_log = time.monotonic() + 60
                log.info("waiting for the events topic %s (the probes create it)",
                         cfg.events_topic)
            if stop.wait(2.0):
                raise InterruptedError("stopped while waiting for the events topic")


class TopicReplicas(NamedTuple):
    """An output topic's replica count as the cluster's metadata shows it (the fewest of any
    partition's), and the cluster's broker count."""

    topic: str
    replicas: int
    brokers: int

    @property
    def single_copy(self) -> bool:
        """Its data lives on one broker although the cluster could hold more copies."""
        return self.replicas == 1 and self.brokers > 1


def ensure_topics(cfg: MonitorConfig, timeout: float = 30.0) -> list[TopicReplicas]:
    """Create the anomalies, facts and dead-letter topics if they do not exist yet, with the
    configured replication factor, ``min.insync.replicas`` and retention, and return each
    output topic's replicas (after creation). Existing topics are left as they are; one with
    a single replica on a cluster of several brokers is logged as a warning.

    Creation may be forbidden (ACLs) where an operator made them: that is only logged. More
    replicas asked for than there are brokers raises ``ConfigError`` (nothing is created).
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    with AdminClient(_client_settings(cfg)) as admin:
        try:
            meta = admin.list_topics(timeout=timeout)
        except KafkaException as e:
            log.warning("could not list topics (%s); not creating output topics", e)
            return []
        brokers = len(meta.brokers)
        replicas = cfg.output.replicas_for(brokers)
        cfg.output.min_insync_for(replicas)  # fails before anything is created
        wanted = [t for t in _output_names(cfg) if t not in meta.topics]
        if wanted:
            _create(admin, cfg, wanted, replicas, timeout)
            meta = _metadata_with(admin, wanted, timeout) or meta
        found = [TopicReplicas(t, _replicas(meta.topics[t]), brokers)
                 for t in _output_names(cfg) if t in meta.topics]
    for t in found:
        if t.single_copy:
            log.warning("output topic %s has a single replica on a cluster of %d brokers: its "
                        "records are lost with that broker's disk (raise its replication "
                        "factor with kafka-reassign-partitions)", t.topic, t.brokers)
    return found


def check_replication(cfg: MonitorConfig, timeout: float = 10.0) -> None:
    """Raise ``ConfigError`` if ``topics.replication.factor`` asks for more replicas than the
    cluster has brokers, or ``topics.min.insync.replicas`` for more than the replicas: called
    before Spark starts, so a bad value fails at once. An unreachable cluster is not an error
    here (``ensure_topics`` tries again)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    if cfg.output.replication_factor is None and cfg.output.min_insync_replicas is None:
        return
    with AdminClient(_client_settings(cfg)) as admin:
        try:
            brokers = len(admin.list_topics(timeout=timeout).brokers)
        except KafkaException as e:
            log.warning("could not read the cluster's brokers (%s)", e)
            return
    cfg.output.min_insync_for(cfg.output.replicas_for(brokers))


def _output_names(cfg: MonitorConfig) -> tuple[str, str, str]:
    return (cfg.anomalies_topic, cfg.facts_topic, cfg.dead_letter_topic)


def topic_settings(cfg: MonitorConfig, topic: str, replicas: int) -> dict[str, str]:
    """The topic configs an output topic is created with."""
    out = {"min.insync.replicas": str(cfg.output.min_insync_for(replicas))}
    if topic in cfg.output.retention_ms:
        out["retention.ms"] = str(cfg.output.retention_ms[topic])
    return out


def _create(admin: Any, cfg: MonitorConfig, topics: list[str], replicas: int,
            timeout: float) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    new = [NewTopic(t, num_partitions=OUTPUT_PARTITIONS, replication_factor=replicas,
                    config=topic_settings(cfg, t, replicas)) for t in topics]
    for topic, fut in admin.create_topics(new, request_timeout=timeout).items():
        try:
            fut.result(timeout + 5)
            log.info("created topic %s (%d replicas, %s)", topic, replicas,
                     topic_settings(cfg, topic, replicas))
        except KafkaException as e:
            log.warning("could not create topic %s: %s", topic, e)


def _metadata_with(admin: Any, topics: list[str], timeout: float) -> Any:
    """Metadata once it shows ``topics`` (a new topic's partitions appear a moment later);
    None if it still does not after a few tries."""
    from confluent_kafka import KafkaException

    for _ in range(10):
        try:
            meta = admin.list_topics(timeout=timeout)
        except KafkaException:
            meta = None
        if meta is not None and all(meta.topics.get(t) is not None
                                    and meta.topics[t].partitions for t in topics):
            return meta
        time.sleep(0.5)
    return None


def _replicas(topic_meta: Any) -> int:
    parts = topic_meta.partitions.values()
    return min((len(p.replicas) for p in parts), default=0)


def end_offsets(cfg: MonitorConfig, topic: str, timeout: float = 30.0) -> str:
    """``topic``'s current end offsets as a Spark ``startingOffsets`` JSON map."""
    import json

    ranges = partition_ranges(cfg, topic, None, timeout)
    return json.dumps({topic: {str(p): end for p, (_, end) in ranges.items()}})


def partition_ranges(cfg: MonitorConfig, topic: str, partitions: list[int] | None = None,
                     timeout: float = 30.0) -> dict[int, tuple[int, int]]:
    """Each of ``topic``'s ``partitions`` (None: all of them): its (first, end) offsets now."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**_client_settings(cfg), "group.id": "kmon-monitor-offsets",
                         "enable.auto.commit": False})  # reads nothing, commits nothing
    deadline = time.monotonic() + timeout
    try:
        if partitions is None:
            partitions = list(consumer.list_topics(topic, timeout=timeout)
                              .topics[topic].partitions)
        return {p: _watermarks(consumer, TopicPartition(topic, p), deadline) for p in partitions}
    finally:
        consumer.close()


def _watermarks(consumer: Any, tp: Any, deadline: float) -> tuple[int, int]:
    """A partition's first and end offsets, retried while the error is transient: just after
    a topic is created, or while leadership moves, a broker answers NOT_LEADER_FOR_PARTITION."""
    from confluent_kafka import KafkaError, KafkaException

    from kmon.probes.outcome import kafka_error

    # KafkaError.retriable() is False for plain error codes: name the transient ones. A
    # broker killed while the monitor starts answers _DESTROY_BROKER or _ALL_BROKERS_DOWN
    # (kmon nemesis chaos once killed a monitor at start that way).
    transient = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                 KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.REQUEST_TIMED_OUT,
                 KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._DESTROY_BROKER,
                 KafkaError._ALL_BROKERS_DOWN}
    while True:
        try:
            low, high = consumer.get_watermark_offsets(
                tp, timeout=max(1.0, deadline - time.monotonic()))
            return int(low), int(high)
        except KafkaException as e:
            err = kafka_error(e)
            code = err.code() if err is not None else None
            if code not in transient or time.monotonic() + 0.5 > deadline:
                raise
            log.info("offsets of %s[%d]: %s; retrying", tp.topic, tp.partition, err)
            time.sleep(0.5)
