"""The driver's Kafka clients: the outputs producer, the output topics' creation, the events
topic's partitions."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

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


def ensure_topics(cfg: MonitorConfig, timeout: float = 30.0) -> None:
    """Create the anomalies, facts and dead-letter topics if they do not exist yet.

    Creation may be forbidden (ACLs) where an operator made them: that is only logged.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    with AdminClient(_client_settings(cfg)) as admin:
        try:
            existing = set(admin.list_topics(timeout=timeout).topics)
        except KafkaException as e:
            log.warning("could not list topics (%s); not creating output topics", e)
            return
        wanted = [t for t in (cfg.anomalies_topic, cfg.facts_topic, cfg.dead_letter_topic)
                  if t not in existing]
        if not wanted:
            return
        futures = admin.create_topics([NewTopic(t, num_partitions=OUTPUT_PARTITIONS)
                                       for t in wanted], request_timeout=timeout)
        for topic, fut in futures.items():
            try:
                fut.result(timeout + 5)
                log.info("created topic %s", topic)
            except KafkaException as e:
                log.warning("could not create topic %s: %s", topic, e)


def end_offsets(cfg: MonitorConfig, topic: str, timeout: float = 30.0) -> str:
    """``topic``'s current end offsets as a Spark ``startingOffsets`` JSON map."""
    import json

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**_client_settings(cfg), "group.id": "kmon-monitor-offsets",
                         "enable.auto.commit": False})  # reads nothing, commits nothing
    deadline = time.monotonic() + timeout
    try:
        parts = consumer.list_topics(topic, timeout=timeout).topics[topic].partitions
        ends = {str(p): _log_end(consumer, TopicPartition(topic, p), deadline)
                for p in parts}
    finally:
        consumer.close()
    return json.dumps({topic: ends})


def _log_end(consumer: Any, tp: Any, deadline: float) -> int:
    """A partition's log end offset, retried while the error is transient: just after a topic
    is created, or while leadership moves, a broker answers NOT_LEADER_FOR_PARTITION."""
    from confluent_kafka import KafkaError, KafkaException

    # KafkaError.retriable() is False for plain error codes: name the transient ones.
    transient = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                 KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.REQUEST_TIMED_OUT,
                 KafkaError._TIMED_OUT, KafkaError._TRANSPORT}
    while True:
        try:
            return int(consumer.get_watermark_offsets(
                tp, timeout=max(1.0, deadline - time.monotonic()))[1])
        except KafkaException as e:
            err = e.args[0] if e.args else None
            code = err.code() if isinstance(err, KafkaError) else None
            if code not in transient or time.monotonic() + 0.5 > deadline:
                raise
            log.info("end offset of %s[%d]: %s; retrying", tp.topic, tp.partition, err)
            time.sleep(0.5)
