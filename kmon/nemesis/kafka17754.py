"""KAFKA-17754 read from a local cluster's log segments: a write of a transaction landing in a
partition outside that transaction.

Jepsen's Bufstream analysis (``../shared/reference/004_*``, section 5.4) found Kafka's
transaction protocol itself losing writes and tearing transactions when messages of one
producer reorder across its connections; Kafka's fix is KIP-890's epoch bump on every
transaction (transaction version 2), which needs the client's support too. librdkafka 2.16
keeps one producer epoch across transactions, and ``kmon nemesis chaos`` caught it live on
Kafka 4.4 (seed 12, the probe behind Toxiproxy): a produce of the next transaction reached a
partition just after the previous transaction's COMMIT marker there, at the same epoch, so the
broker appended it although the coordinator never added that partition to the new
transaction; the coordinator committed the transaction's other partitions, and this write
stayed open until the producer's next epoch aborted it. The checker reports what it does to
the history: ``lost-write`` and ``torn-transaction``.

``signature`` recognises that trail in the partition's batches, so a chaos run can tell this
known upstream bug from a loss nobody has explained: the write's batch is transactional, the
producer's previous batch there is a marker at the same epoch (no other write of the
producer between them), and the producer's next marker there is an ABORT.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ISSUE = "KAFKA-17754"
_HEADER = struct.Struct(">qi")  # baseOffset, batchLength
# partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta, baseTimestamp, maxTimestamp,
# producerId, producerEpoch, baseSequence, recordsCount (Kafka's record batch v2)
_BATCH = struct.Struct(">ibIhiqqqhii")
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_MARKERS = {0: "abort", 1: "commit"}


@dataclass(frozen=True)
class Batch:
    base: int
    last: int
    producer_id: int
    epoch: int
    transactional: bool
    marker: str | None  # "commit" / "abort" for a control batch, else None


def read_batches(path: Path) -> Iterator[Batch]:
    """The record batches of one ``.log`` segment (magic 2), in offset order."""
    data = path.read_bytes()
    pos = 0
    while pos + _HEADER.size + _BATCH.size <= len(data):
        base, length = _HEADER.unpack_from(data, pos)
        if length <= 0:
            return
        fields = _BATCH.unpack_from(data, pos + _HEADER.size)
        attrs, delta, pid, epoch = fields[3], fields[4], fields[7], fields[8]
        marker = None
        if attrs & _CONTROL:
            marker = _marker(data, pos + _HEADER.size + _BATCH.size)
        yield Batch(base, base + delta, pid, epoch, bool(attrs & _TRANSACTIONAL), marker)
        pos += _HEADER.size + length


def _marker(data: bytes, pos: int) -> str:
    """A control record's type, from its key (version int16, type int16)."""
    pos = _skip_varint(data, pos)  # the record's length
    pos += 1  # its attributes
    pos = _skip_varint(data, pos)  # timestamp delta
    pos = _skip_varint(data, pos)  # offset delta
    pos = _skip_varint(data, pos)  # key length
    kind = struct.unpack_from(">h", data, pos + 2)[0]
    return _MARKERS.get(kind, f"control-{kind}")


def _skip_varint(data: bytes, pos: int) -> int:
    while data[pos] & 0x80:
        pos += 1
    return pos + 1


def partition_batches(data_dirs: list[Path], topic: str, partition: int) -> list[Batch]:
    """The partition's batches from the first replica found among ``data_dirs``."""
    for d in data_dirs:
        segments = sorted((d / f"{topic}-{partition}").glob("*.log"))
        if segments:
            return [b for s in segments for b in read_batches(s)]
    return []


def signature(batches: list[Batch], offset: int) -> dict[str, Any] | None:
    """KAFKA-17754's trail around the write at ``offset``, or None if it is not there."""
    at = next((i for i, b in enumerate(batches) if b.base <= offset <= b.last), None)
    if at is None or not batches[at].transactional or batches[at].marker is not None:
        return None
    write = batches[at]
    mine = [b for b in batches if b.producer_id == write.producer_id]
    k = mine.index(write)
    before = mine[k - 1] if k > 0 else None
    after = next((b for b in mine[k + 1:] if b.marker is not None), None)
    if (before is None or before.marker is None or before.epoch != write.epoch
            or after is None or after.marker != "abort"):
        return None
    return {"issue": ISSUE, "offset": offset, "producer-id": write.producer_id,
            "epoch": write.epoch, "after-marker": [before.base, before.marker],
            "aborted-at": [after.base, after.epoch]}


@dataclass
class Explained:
    """What of a history's losses KAFKA-17754's trail explains: ``counts`` per anomaly type
    (records whose every invisible write shows the trail), ``trails`` the trails found."""

    counts: dict[str, int]
    trails: list[dict[str, Any]]


def explain(ops: list[Any], errors: dict[str, list[dict[str, Any]]],
            data_dirs: list[Path]) -> Explained:
    """Check each ``lost-write`` and ``torn-transaction`` record of ``kmon check``'s ``errors``
    on ``ops`` (a probe's history) against the partitions' batches in ``data_dirs``."""
    where = {k: (p.topic, p.partition) for o in ops if o.meta is not None
             for k, p in o.meta.placements.items()}
    cache: dict[tuple[str, int], list[Batch]] = {}
    trails: dict[tuple[Any, int], dict[str, Any] | None] = {}

    def trail(key: Any, offset: int | None) -> dict[str, Any] | None:
        if offset is None or key not in where:
            return None
        if (key, offset) not in trails:
            tp = where[key]
            if tp not in cache:
                cache[tp] = partition_batches(data_dirs, *tp)
            found = signature(cache[tp], offset)
            trails[(key, offset)] = found and {"topic": tp[0], "partition": tp[1], **found}
        return trails[(key, offset)]

    counts = {"lost-write": sum(1 for r in errors.get("lost-write", ())
                                if trail(r["key"], r["offset"]) is not None),
              "torn-transaction": sum(1 for r in errors.get("torn-transaction", ())
                                      if all(trail(k, off) is not None
                                             for k, _, off in r["invisible"]))}
    return Explained({t: n for t, n in counts.items() if n},
                     [t for t in trails.values() if t is not None])
