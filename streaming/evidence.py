"""Evidence records: what the monitor tells the anomalies topic about each verdict.

Pure Python (no Spark), shared by both stateful stages and the driver.

- Every record gets a deterministic ``id``: a hash of the probe, anomaly type and the checker's
  record. A micro-batch replayed after a crash folds the same fragments into the same state,
  so it re-creates the same ids, and a consumer drops records whose id it has seen.
- The fold may learn one anomaly in pieces (a third value at an inconsistent offset, a torn
  transaction's second invisible write). ``Verdicts`` remembers, per key, which anomalies it
  already reported (``kmon.checker.report.merge_key``): the first piece is a new verdict
  (``update`` false, counted by ``kmon_anomalies_total``), later pieces are updates that name
  it in ``verdict`` and count nothing. The memory is bounded (oldest forgotten first).
- The record carries what on-call needs without other tools: anomaly type (the checker's
  name), the monitor's ``cluster`` setting, probe, key, topic, partition, ``broker`` (the key's
  leader broker id when the verdict was decided, as the probes' metadata knew it; null when
  no event said), the offsets and values involved, the ops involved
  (index, and process and time when the stage saw that op), the event time of the deciding
  evidence and when the monitor emitted the verdict; plus the checker's record verbatim.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from kmon.checker.anomaly import Anomaly
from kmon.checker.report import merge_key

UNSEEN = "unseen"  # not an anomaly type: the unseen verdict (kmon.checker.anomaly.UNSEEN)
UNKNOWN_TOPIC = "unknown"  # topic label of a key whose events carried no placement

_OP_FIELDS = ("writer", "reader", "op")  # record fields naming one op
_OFFSET_FIELDS = ("offset", "offsets", "max-read-offset")
_VALUE_FIELDS = ("value", "values", "skipped")


def _canonical(x: Any) -> str:
    return json.dumps(x, sort_keys=True, separators=(",", ":"), default=str)


def evidence_id(probe: str, type: str, record: dict[str, Any]) -> str:
    """Deterministic id of one evidence record (hex, 128 bits)."""
    text = _canonical([probe, type, record])
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def ops_of(record: dict[str, Any]) -> list[int]:
    """Indices of the ops a checker record names, in first-mention order."""
    out: list[int] = []
    for f in _OP_FIELDS:
        x = record.get(f)
        if isinstance(x, int) and x >= 0 and x not in out:
            out.append(x)
    for x in record.get("ops") or ():
        if isinstance(x, int) and x >= 0 and x not in out:
            out.append(x)
    return out


def offsets_values(record: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """The offsets and the values a checker record mentions (torn transactions: every write)."""
    offsets: list[Any] = []
    values: list[Any] = []

    def add(dst: list[Any], x: Any) -> None:
        if x is not None and x not in dst:
            dst.append(x)

    for f in _OFFSET_FIELDS:
        x = record.get(f)
        for y in x if isinstance(x, list) else [x]:
            add(offsets, y)
    for f in _VALUE_FIELDS:
        x = record.get(f)
        for y in x if isinstance(x, list) else [x]:
            add(values, y)
    for f in ("visible", "invisible"):
        for item in record.get(f) or ():  # [key, value, offset]
            add(values, item[1])
            add(offsets, item[2])
    return offsets, values


class Verdicts:
    """Which anomalies one state (a key, or a bucket of writers) has already reported.

    ``classify`` gives an evidence record's ``(id, verdict id, is update)``. Bounded: the
    oldest ``limit``-th entry is forgotten, so an anomaly that keeps growing for longer than
    ``limit`` other anomalies is counted again (never silently lost).
    """

    __slots__ = ("limit", "seen")

    def __init__(self, limit: int = 1024) -> None:
        self.limit = limit
        self.seen: OrderedDict[tuple, str] = OrderedDict()

    def classify(self, probe: str, a: Anomaly) -> tuple[str, str, bool]:
        rid = evidence_id(probe, a.type, a.record)
        mk = merge_key(a)
        if mk is None:
            return rid, rid, False
        mk = tuple(_hashable(x) for x in mk)
        first = self.seen.get(mk)
        if first is not None:
            self.seen.move_to_end(mk)
            return rid, first, True
        self.seen[mk] = rid
        if len(self.seen) > self.limit:
            self.seen.popitem(last=False)
        return rid, rid, False

    def to_state(self) -> list[tuple[tuple, str]]:
        return list(self.seen.items())

    @classmethod
    def from_state(cls, items: list[tuple[tuple, str]], limit: int = 1024) -> Verdicts:
        v = cls(limit)
        v.seen = OrderedDict((tuple(k), i) for k, i in items)
        return v


def _hashable(x: Any) -> Any:
    if isinstance(x, list):
        return tuple(_hashable(y) for y in x)
    return x


def evidence(
    *, rid: str, verdict: str, update: bool, type: str, cluster: str, probe: str, key: Any,
    topic: str, partition: int | None, broker: int | None, record: dict[str, Any],
    decided_ns: int, ops: Mapping[int, tuple[Any, int]] | None = None, stage: str = "key",
    decider: int | None = None,
) -> dict[str, Any]:
    """The evidence record (without ``detected_at``, which the driver stamps on emission).
    ``cluster`` and ``broker`` are not part of ``rid`` (``evidence_id``): the same verdict has
    the same id whatever the leader or the setting.

    ``ops``: op index -> (process, time) for ops the stage saw in this batch; ``decider``: the
    op whose fragment revealed the anomaly, listed with the ops the record names.
    """
    offsets, values = offsets_values(record)
    known = ops if ops is not None else {}
    involved = ops_of(record)
    if decider is not None and decider not in involved:
        involved.append(decider)
    return {
        "id": rid,
        "verdict": verdict,
        "update": update,
        "anomaly": type,
        "cluster": cluster,
        "probe": probe,
        "key": key,
        "topic": topic,
        "partition": partition,
        "broker": broker,
        "offsets": offsets,
        "values": values,
        "ops": [{"index": i, "process": known[i][0] if i in known else None,
                 "time": known[i][1] if i in known else None} for i in involved],
        "decided_time": decided_ns,
        "stage": stage,
        "record": record,
    }


def to_json(x: Any) -> str:
    return json.dumps(x, separators=(",", ":"), default=str)
