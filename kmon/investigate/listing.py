"""`kmon evidence`: the evidence records of a time window, filtered, found in seconds.

Each partition of the anomalies topic is read only over the offsets the broker's time index
(``offsets_for_times``) gives for the window, and each record read is kept if its timestamp lies
in the window and it passes the filters. Records written before ``cluster`` and ``broker`` were
fields (or with a null ``broker``: the leader was not known) have them unknown: a filter on them
lets such records through, marked ``?``, except ``--broker unknown``, which keeps only those.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kmon.investigate.sources import TopicReader
from kmon.investigate.timewindow import TimeWindow, format_time

UNKNOWN = "unknown"
SUMMARY_WIDTH = 48


@dataclass(frozen=True)
class Filters:
    """What to keep; None keeps everything. ``broker`` is a broker id or ``unknown``."""

    cluster: str | None = None
    anomaly: str | None = None
    topic: str | None = None
    partition: int | None = None
    broker: int | str | None = None

    def keep(self, record: Mapping[str, Any]) -> bool:
        return (_same(self.anomaly, record.get("anomaly"))
                and _same(self.topic, record.get("topic"))
                and _same(self.partition, record.get("partition"))
                and _unknown_passes(self.cluster, record.get("cluster"))
                and self._broker_ok(record.get("broker")))

    def _broker_ok(self, broker: Any) -> bool:
        if self.broker == UNKNOWN:
            return broker is None
        return _unknown_passes(self.broker, broker)


def _same(want: Any, have: Any) -> bool:
    return want is None or (have is not None and str(have) == str(want))


def _unknown_passes(want: Any, have: Any) -> bool:
    """A filter on a field the record may not carry: a missing (unknown) value passes."""
    return want is None or have is None or str(have) == str(want)


@dataclass(frozen=True)
class Row:
    """One evidence record as listed."""

    id: str
    emitted: float  # unix seconds: the record's detected_at, else its Kafka timestamp
    anomaly: str
    cluster: str | None
    topic: str | None
    partition: int | None
    broker: int | None
    probe: str | None
    summary: str
    record: dict[str, Any]

    @classmethod
    def of(cls, record: dict[str, Any], timestamp_ms: int) -> Row:
        detected = record.get("detected_at")
        emitted = detected / 1e9 if isinstance(detected, int) else timestamp_ms / 1000
        return cls(id=str(record.get("id")), emitted=emitted,
                   anomaly=str(record.get("anomaly", "?")), cluster=record.get("cluster"),
                   topic=record.get("topic"), partition=record.get("partition"),
                   broker=record.get("broker"), probe=record.get("probe"),
                   summary=summarize(record), record=record)


def summarize(record: Mapping[str, Any]) -> str:
    """A short line: the offsets, values and ops the record names."""
    parts = []
    for label, field in (("offsets", "offsets"), ("values", "values")):
        items = record.get(field) or []
        if items:
            parts.append(f"{label} {_few(items)}")
    ops = [o.get("index") if isinstance(o, Mapping) else o for o in record.get("ops") or []]
    if ops:
        parts.append(f"ops {_few(ops)}")
    if record.get("update"):
        parts.append("(update)")
    text = " ".join(parts) or "-"
    return text if len(text) <= SUMMARY_WIDTH else text[:SUMMARY_WIDTH - 3] + "..."


def _few(items: list[Any]) -> str:
    shown = ",".join(str(x) for x in items[:3])
    return shown + (f",+{len(items) - 3}" if len(items) > 3 else "")


@dataclass
class Listing:
    """The rows of one window and filters, streamed; ``read`` counts the records read."""

    reader: TopicReader
    window: TimeWindow
    filters: Filters
    read: int = 0
    undecodable: int = 0

    def rows(self) -> Iterator[Row]:
        """Matching rows as read (each partition in offset order)."""
        spans = self.reader.spans_between(self.window.start_ms, self.window.end_ms)
        for msg in self.reader.read(spans):
            self.read += 1
            ts = msg.timestamp()[1]
            if not self.window.contains_ms(ts):
                continue
            record = _decode(msg.value())
            if record is None:
                self.undecodable += 1
            elif self.filters.keep(record):
                yield Row.of(record, ts)


def _decode(value: bytes | None) -> dict[str, Any] | None:
    try:
        record = json.loads(value or b"")
    except (TypeError, ValueError):
        return None
    return record if isinstance(record, dict) else None


COLUMNS = (("ID", 32), ("EMITTED", 20), ("ANOMALY", 21), ("CLUSTER", 12), ("TOPIC/PART", 20),
           ("BROKER", 6), ("PROBE", 12), ("SUMMARY", 0))


def header() -> str:
    return _line([name for name, _ in COLUMNS])


def table_line(row: Row) -> str:
    """One fixed-width table line (rows print as they are found)."""
    where = f"{row.topic if row.topic is not None else '?'}/" \
            f"{row.partition if row.partition is not None else '?'}"
    return _line([row.id, format_time(row.emitted), row.anomaly, _or_unknown(row.cluster),
                  where, _or_unknown(row.broker), row.probe or "?", row.summary])


def _or_unknown(x: Any) -> str:
    return "?" if x is None else str(x)


def _line(cells: list[str]) -> str:
    return "  ".join(c.ljust(w) for c, (_, w) in zip(cells, COLUMNS, strict=True)).rstrip()
