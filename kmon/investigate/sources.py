"""Where investigate reads from: a history file, the events topic, the anomalies topic.

Topics are read with a plain consumer outside any group (investigating commits no offsets and
disturbs no one), never past the end they had when reading started (each partition's high
watermark), and where a time is known only over the offsets the broker's time index gives for
it (``offsets_for_times``): an evidence record is looked for backwards from the end in growing
time windows, op events only around the times the record names.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kmon.history import iter_ops
from kmon.history.avro import DecodeError, decode_event
from kmon.history.model import Op
from kmon.investigate.timewindow import TimeWindow


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


@dataclass(frozen=True)
class Span:
    """Offsets ``start`` (inclusive) to ``end`` (exclusive) of one partition, to be read."""

    partition: int
    start: int
    end: int


class TopicReader:
    """One plain consumer on one topic, outside any group (assign only, commits nothing),
    reading spans of offsets: the whole topic, or what ``offsets_for_times`` finds for a time
    window. ``read`` counts the records it returns in ``records_read``."""

    def __init__(self, conf: Mapping[str, Any], topic: str, timeout: float = 60.0) -> None:
        self.conf, self.topic, self.timeout = conf, topic, timeout
        self.deadline = time.monotonic() + timeout
        self.records_read = 0
        self.low: dict[int, int] = {}
        self.high: dict[int, int] = {}  # each partition's end when reading started
        self._consumer: Any = None

    def __enter__(self) -> TopicReader:
        from confluent_kafka import Consumer

        self._consumer = Consumer({
            # Reading history, where each fetch finds data at once: a long-poll fetch would
            # only delay the next seek (offsets_for_times, assign) by up to its wait.
            "fetch.wait.max.ms": 10,
            **self.conf,
            "group.id": "kmon-investigate",  # never joined: assign() only
            "enable.auto.commit": False,  # never move anyone's committed offsets
            "enable.partition.eof": True,  # know when a partition is read to its end
            "isolation.level": "read_uncommitted",  # the evidence is whatever was written
        })
        try:
            self._watermarks()
        except BaseException:
            self._consumer.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._consumer.close()

    def _watermarks(self) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        servers = self.conf.get("bootstrap.servers")
        try:
            meta = self._consumer.list_topics(self.topic, timeout=min(self.timeout, 30.0))
        except KafkaException as e:
            raise SourceError(f"cannot reach {servers}: {e}") from e
        tmeta = meta.topics.get(self.topic)
        if tmeta is None or tmeta.error is not None or not tmeta.partitions:
            raise SourceError(f"topic {self.topic!r} not found on {servers}")
        for p in sorted(tmeta.partitions):
            low, high = self._consumer.get_watermark_offsets(
                TopicPartition(self.topic, p), timeout=min(self.timeout, 30.0))
            self.low[p], self.high[p] = low, high

    def whole(self) -> list[Span]:
        """The whole topic, up to its end when reading started."""
        return [Span(p, self.low[p], self.high[p]) for p in self.high]

    def offsets_at(self, ts_ms: int) -> dict[int, int]:
        """Per partition, the first offset with a timestamp at or after ``ts_ms`` (the
        partition's end when there is none), by the broker's time index."""
        from confluent_kafka import KafkaException, TopicPartition

        query = [TopicPartition(self.topic, p, max(ts_ms, 0)) for p in self.high]
        try:
            found = self._consumer.offsets_for_times(query, timeout=self._left(30.0))
        except KafkaException as e:
            raise SourceError(f"offsets_for_times on {self.topic!r}: {e}") from e
        out = {}
        for tp in found:
            off = tp.offset if tp.offset >= 0 else self.high[tp.partition]
            out[tp.partition] = min(max(off, self.low[tp.partition]), self.high[tp.partition])
        return out

    def spans_between(self, start_ms: int, end_ms: int) -> list[Span]:
        """The offsets whose records' timestamps lie in ``start_ms .. end_ms`` (by the time
        index; records read still need their own timestamps checked)."""
        first, after = self.offsets_at(start_ms), self.offsets_at(end_ms + 1)
        return [Span(p, first[p], after[p]) for p in self.high if after[p] > first[p]]

    def backwards(self, first_step: float = 900.0, max_step: float = 6 * 3600.0,
                  now: float | None = None) -> Iterator[list[Span]]:
        """The topic from its end back to its beginning in time windows of growing length
        (15 min, 30 min, 1 h, ... up to 6 h): each yield is the spans of one window, newest
        first, never overlapping, together covering every offset (out-of-order timestamps
        included)."""
        end = dict(self.high)
        t_ms, step_ms = int((time.time() if now is None else now) * 1000), first_step * 1000
        while any(end[p] > self.low[p] for p in end):
            t_ms -= int(step_ms)
            start = self.offsets_at(t_ms)
            start = {p: min(start[p], end[p]) for p in end}
            spans = [Span(p, start[p], end[p]) for p in end if end[p] > start[p]]
            if spans:
                yield spans
            end, step_ms = start, min(step_ms * 2, max_step * 1000)

    def _left(self, cap: float) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise SourceError(f"reading {self.topic!r} took longer than {self.timeout:.0f}s; "
                              "raise --timeout")
        return min(left, cap)

    def read(self, spans: Iterable[Span]) -> Iterator[Any]:
        """The records of ``spans`` (confluent-kafka Messages), each partition in order."""
        from confluent_kafka import KafkaError, TopicPartition

        ends = {s.partition: s.end for s in spans if s.end > s.start}
        if not ends:
            return
        tps = [TopicPartition(self.topic, s.partition, s.start) for s in spans
               if s.end > s.start]
        self._consumer.assign(tps)
        try:
            while ends:
                msg = self._consumer.poll(self._left(1.0))
                if msg is None:
                    continue
                p = msg.partition()
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        self._done(ends, p)
                        continue
                    raise SourceError(f"reading {self.topic!r}: {msg.error()}")
                if p not in ends:
                    continue
                if msg.offset() < ends[p]:
                    self.records_read += 1
                    yield msg
                if msg.offset() + 1 >= ends.get(p, 0):
                    self._done(ends, p)
        finally:
            self._consumer.unassign()

    def _done(self, ends: dict[int, int], partition: int) -> None:
        from confluent_kafka import TopicPartition

        # Stop fetching it (pause() would slow the next assign of it by a second).
        if ends.pop(partition, None) is not None:
            self._consumer.incremental_unassign([TopicPartition(self.topic, partition)])


def read_topic(conf: Mapping[str, Any], topic: str, timeout: float = 60.0) -> Iterator[Any]:
    """Every record of ``topic`` up to its end when reading started (confluent-kafka Messages)."""
    with TopicReader(conf, topic, timeout) as reader:
        yield from reader.read(reader.whole())


def read_window(conf: Mapping[str, Any], topic: str, window: TimeWindow | None,
                timeout: float = 60.0) -> Iterator[Any]:
    """The records of ``topic`` whose timestamps lie in ``window`` (the whole topic if None),
    reading only the offsets ``offsets_for_times`` finds for it."""
    with TopicReader(conf, topic, timeout) as reader:
        if window is None:
            yield from reader.read(reader.whole())
            return
        for msg in reader.read(reader.spans_between(window.start_ms, window.end_ms)):
            if window.contains_ms(msg.timestamp()[1]):
                yield msg


def ops_from_events(conf: Mapping[str, Any], topic: str, timeout: float = 60.0,
                    skipped: list[str] | None = None,
                    window: TimeWindow | None = None) -> Iterator[tuple[str, Op]]:
    """(probe id, op) of every op event on the events topic (only those with record timestamps
    in ``window``, when given); undecodable events are noted in ``skipped`` (they are the
    monitor's dead letters) and passed over."""
    for msg in read_window(conf, topic, window, timeout):
        try:
            op = decode_event(msg.value(), msg.headers())
        except DecodeError as e:
            if skipped is not None:
                skipped.append(f"{topic}[{msg.partition()}]@{msg.offset()}: {e}")
            continue
        yield (op.meta.probe if op.meta is not None else ""), op


@dataclass(frozen=True)
class FoundEvidence:
    """An evidence record as found on the anomalies topic, with its record timestamp."""

    record: dict[str, Any]
    timestamp_ms: int
    partition: int
    offset: int
    records_read: int = 0  # how many records of the topic were read to find it


def _with_id(messages: Iterable[Any], anomaly_id: str) -> FoundEvidence | None:
    """The last record (by timestamp, then offset) among ``messages`` with ``id`` ``anomaly_id``."""
    found: FoundEvidence | None = None
    for msg in messages:
        try:
            record = json.loads(msg.value())
        except (TypeError, ValueError):
            continue
        if not isinstance(record, dict) or str(record.get("id")) != anomaly_id:
            continue
        here = FoundEvidence(record, msg.timestamp()[1], msg.partition(), msg.offset())
        if found is None or (here.timestamp_ms, here.offset) >= (found.timestamp_ms,
                                                                  found.offset):
            found = here
    return found


def locate_evidence(conf: Mapping[str, Any], topic: str, anomaly_id: str,
                    timeout: float = 60.0, at: float | None = None,
                    around: float = 300.0) -> FoundEvidence:
    """The evidence record with ``id`` ``anomaly_id`` (the last one, should the monitor have
    written it twice). With ``at`` (unix seconds, e.g. its emitted time from ``kmon
    evidence``) only ``at`` +- ``around`` is read; without, the topic is read backwards from
    its end in growing time windows, stopping at the first window that holds the id (so the
    older the record, the more is read: ``at`` is the fast way)."""
    with TopicReader(conf, topic, timeout) as reader:
        if at is not None:
            win = TimeWindow(at - around, at + around)
            found = _with_id(reader.read(reader.spans_between(win.start_ms, win.end_ms)),
                             anomaly_id)
            where = f"between {win.describe()}"
        else:
            found, where = None, ""
            for spans in reader.backwards():
                found = _with_id(reader.read(spans), anomaly_id)
                if found is not None:
                    break
    if found is None:
        raise SourceError(f"no evidence record with id {anomaly_id!r} on {topic!r}"
                          + (f" {where}" if where else ""))
    return replace(found, records_read=reader.records_read)


def find_evidence(conf: Mapping[str, Any], topic: str, anomaly_id: str,
                  timeout: float = 60.0) -> dict[str, Any]:
    """The evidence record with ``id`` ``anomaly_id`` on the anomalies topic."""
    return locate_evidence(conf, topic, anomaly_id, timeout).record
