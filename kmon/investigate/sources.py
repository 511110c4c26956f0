"""Where investigate reads from: a history file, the events topic, the anomalies topic.

Topics are read whole, from the beginning to the end they had when reading started (each
partition's high watermark), with a plain consumer outside any group: investigating commits no
offsets and disturbs no one.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from kmon.history import iter_ops
from kmon.history.avro import DecodeError, decode_event
from kmon.history.model import Op


class SourceError(RuntimeError):
    """A topic could not be read (unreachable cluster, missing topic, timeout)."""


def ops_from_history(path: str | Path) -> Iterator[tuple[str, Op]]:
    """The ops of a history file ``kmon check`` reads, as ("", op) pairs."""
    for op in iter_ops(path):
        yield "", op


def read_properties(path: str | Path) -> dict[str, str]:
    """A librdkafka ``.properties`` file (the chart's KMON_KAFKA_CONFIG)."""
    out = {}
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def client_config(bootstrap: str, config_file: str | None = None,
                  overrides: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Consumer settings: the properties file, SASL credentials from the environment (as the
    chart provides them), explicit overrides last."""
    conf: dict[str, Any] = {}
    if config_file:
        conf.update(read_properties(config_file))
    if os.environ.get("KMON_SASL_USERNAME"):
        conf["sasl.username"] = os.environ["KMON_SASL_USERNAME"]
        conf["sasl.password"] = os.environ.get("KMON_SASL_PASSWORD", "")
    conf.update(overrides or {})
    conf["bootstrap.servers"] = bootstrap
    return conf


def read_topic(conf: Mapping[str, Any], topic: str, timeout: float = 60.0) -> Iterator[Any]:
    """Every record of ``topic`` up to its end when reading started (confluent-kafka Messages)."""
    from confluent_kafka import (
        OFFSET_BEGINNING,
        Consumer,
        KafkaError,
        KafkaException,
        TopicPartition,
    )

    settings = {
        **conf,
        # Not a member of any group: assign() below, and nothing is committed.
        "group.id": "kmon-investigate",
        "enable.auto.commit": False,  # never move anyone's committed offsets
        "enable.partition.eof": True,  # know when a partition is read to its end
        "isolation.level": "read_uncommitted",  # the evidence is whatever was written
    }
    deadline = time.monotonic() + timeout
    consumer = Consumer(settings)
    try:
        try:
            meta = consumer.list_topics(topic, timeout=min(timeout, 30.0))
        except KafkaException as e:
            raise SourceError(f"cannot reach {conf.get('bootstrap.servers')}: {e}") from e
        tmeta = meta.topics.get(topic)
        if tmeta is None or tmeta.error is not None or not tmeta.partitions:
            raise SourceError(f"topic {topic!r} not found on {conf.get('bootstrap.servers')}")
        ends: dict[int, int] = {}
        for p in tmeta.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            if high > low:
                ends[p] = high
        if not ends:
            return
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        while ends:
            if time.monotonic() > deadline:
                raise SourceError(f"reading {topic!r} took longer than {timeout:.0f}s; "
                                  "raise --timeout")
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    ends.pop(msg.partition(), None)
                    continue
                raise SourceError(f"reading {topic!r}: {msg.error()}")
            if msg.offset() >= ends.get(msg.partition(), -1):
                ends.pop(msg.partition(), None)
                continue
            yield msg
            if msg.offset() + 1 >= ends.get(msg.partition(), 0):
                ends.pop(msg.partition(), None)
    finally:
        consumer.close()


def ops_from_events(conf: Mapping[str, Any], topic: str, timeout: float = 60.0,
                    skipped: list[str] | None = None) -> Iterator[tuple[str, Op]]:
    """(probe id, op) of every op event on the events topic; undecodable events are noted in
    ``skipped`` (they are the monitor's dead letters) and passed over."""
    for msg in read_topic(conf, topic, timeout):
        try:
            op = decode_event(msg.value(), msg.headers())
        except DecodeError as e:
            if skipped is not None:
                skipped.append(f"{topic}[{msg.partition()}]@{msg.offset()}: {e}")
            continue
        yield (op.meta.probe if op.meta is not None else ""), op


def find_evidence(conf: Mapping[str, Any], topic: str, anomaly_id: str,
                  timeout: float = 60.0) -> dict[str, Any]:
    """The evidence record with ``id`` ``anomaly_id`` on the anomalies topic (the last one wins,
    should the monitor have written it twice)."""
    found = None
    for msg in read_topic(conf, topic, timeout):
        try:
            record = json.loads(msg.value())
        except (TypeError, ValueError):
            continue
        if isinstance(record, dict) and str(record.get("id")) == anomaly_id:
            found = record
    if found is None:
        raise SourceError(f"no evidence record with id {anomaly_id!r} on {topic!r}")
    return found
