"""Evidence records (what the monitor writes to the anomalies topic), read in one place.

The monitor engineer owns the record's format; this module assumes only: a JSON object with
``id``, ``anomaly``, ``key``, ``topic``, ``partition`` and any of ``offset``/``offsets``,
``value``/``values``, ``ops`` (op indices, or objects ``{index, process, time}``). The checker's
own record fields are read too, at the top level or nested under ``record``/``evidence``
(``op``, ``writer``, ``reader``, ``cycle``, ``skipped``, ``visible``/``invisible``), since the
monitor may pass the checker's record through. ``parse_evidence`` is the only function that
knows any of this: when the format settles, only it changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class EvidenceError(ValueError):
    """Not an evidence record kmon investigate can use; the message says what is missing."""


@dataclass(frozen=True)
class OpRef:
    """An op the evidence points at: its index, and when known its process and time."""

    index: int
    process: Any = None
    time: int | None = None


@dataclass
class Evidence:
    anomaly: str | None
    key: Any
    id: str | None = None
    topic: str | None = None
    partition: int | None = None
    offsets: list[int] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)
    ops: list[OpRef] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def op_indices(self) -> set[int]:
        return {o.index for o in self.ops}


def _list(x: Any) -> list[Any]:
    if x is None:
        return []
    return list(x) if isinstance(x, list | tuple) else [x]


def parse_evidence(record: Mapping[str, Any]) -> Evidence:
    """An evidence record (a decoded JSON object) as ``Evidence``; EvidenceError if unusable."""
    if not isinstance(record, Mapping):
        raise EvidenceError(f"an evidence record is a JSON object, got {type(record).__name__}")
    flat: dict[str, Any] = {}
    for nested in ("record", "evidence"):
        if isinstance(record.get(nested), Mapping):
            flat.update(record[nested])
    flat.update({k: v for k, v in record.items() if k not in ("record", "evidence")})
    anomaly = flat.get("anomaly", flat.get("type"))
    key = flat.get("key")
    if key is None:
        raise EvidenceError(f"evidence record {flat.get('id')!r} has no key")
    offsets = [o for o in _list(flat.get("offset")) + _list(flat.get("offsets"))
               if isinstance(o, int)]
    values = _list(flat.get("value")) + _list(flat.get("values")) + _list(flat.get("skipped"))
    ops: list[OpRef] = []
    for raw in _list(flat.get("ops")) + _list(flat.get("op")) + _list(flat.get("writer")) \
            + _list(flat.get("reader")) + _list(flat.get("cycle")):
        if isinstance(raw, Mapping) and isinstance(raw.get("index"), int):
            ops.append(OpRef(raw["index"], raw.get("process"), raw.get("time")))
        elif isinstance(raw, int) and raw >= 0:
            ops.append(OpRef(raw))
    for kvo in _list(flat.get("visible")) + _list(flat.get("invisible")):
        # torn-transaction: [key, value, offset] triples; keep those of this key
        if isinstance(kvo, list | tuple) and len(kvo) >= 3 and str(kvo[0]) == str(key):
            values.append(kvo[1])
            if isinstance(kvo[2], int):
                offsets.append(kvo[2])
    partition = flat.get("partition")
    return Evidence(
        anomaly=str(anomaly) if anomaly is not None else None,
        key=key,
        id=str(flat["id"]) if flat.get("id") is not None else None,
        topic=flat.get("topic"),
        partition=int(partition) if isinstance(partition, int | str) and str(partition).isdigit()
        else None,
        offsets=sorted(set(offsets)),
        values=list(dict.fromkeys(v for v in values if v is not None)),
        ops=list(dict.fromkeys(ops)),
        record=dict(record),
    )


WALL_CLOCK_NS = 10**17  # op times from a probe are wall-clock ns (1973 onward); synthetic are not


def wall_times(ev: Evidence) -> list[float]:
    """Unix seconds of the wall-clock times the record names: its ops' times, the time it was
    decided (``decided_time``) and, for an unseen verdict, the write's ``ack-time``."""
    flat = ev.record.get("record") if isinstance(ev.record.get("record"), Mapping) else {}
    raw = [o.time for o in ev.ops] + [ev.record.get("decided_time"), flat.get("ack-time")]
    return [t / 1e9 for t in raw if isinstance(t, int) and t >= WALL_CLOCK_NS]
