"""A broker's log for one partition, read straight from its segment files on disk.

Evidence that does not go through the broker: whether a record was really appended twice, or
really truncated away, is read from ``<data dir>/<topic>-<partition>/*.log`` (record batch
format v2, Kafka 0.11+). Uncompressed and gzip batches are decoded record by record; batches in
other codecs contribute their offsets only (``value`` None, ``decoded`` False).

The active segment is read while the broker writes it: a batch cut short at the end of a file
is ignored.
"""

from __future__ import annotations

import gzip
import struct
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_HEADER = struct.Struct(">qiibIhiqqqhii")  # up to and including the record count
_ATTR_COMPRESSION = 0x07
_ATTR_TRANSACTIONAL = 0x10
_ATTR_CONTROL = 0x20


@dataclass(frozen=True)
class LogRecord:
    offset: int
    key: bytes | None
    value: bytes | None
    producer_id: int  # -1: not an idempotent or transactional producer
    transactional: bool
    control: bool  # a transaction marker (commit/abort), not data
    leader_epoch: int
    decoded: bool = True


def partition_dir(data_dir: Path, topic: str, partition: int) -> Path:
    return Path(data_dir) / f"{topic}-{partition}"


def read_log(directory: Path) -> list[LogRecord]:
    """Every record in the partition directory's segments, in offset order."""
    out: list[LogRecord] = []
    for segment in sorted(Path(directory).glob("*.log")):
        out.extend(_read_segment(segment.read_bytes()))
    return out


def log_end_offset(directory: Path) -> int:
    """One past the last offset on disk (0 for an empty log)."""
    end = 0
    for segment in sorted(Path(directory).glob("*.log")):
        for base, last_delta, *_ in _batches(segment.read_bytes()):
            end = max(end, base + last_delta + 1)
    return end


def leader_epochs(directory: Path) -> list[tuple[int, int]]:
    """(epoch, start offset) pairs from the replica's ``leader-epoch-checkpoint``: where each
    leader's writes begin. A new leader's epoch starts at its log end when it was elected, so
    after an unclean election that entry is where the old and new logs part.
    """
    path = Path(directory) / "leader-epoch-checkpoint"
    try:
        lines = path.read_text().split("\n")
    except FileNotFoundError:
        return []
    count = int(lines[1]) if len(lines) > 1 and lines[1].strip() else 0
    out = []
    for line in lines[2 : 2 + count]:
        epoch, start = line.split()
        out.append((int(epoch), int(start)))
    return out


def offsets_by_value(records: list[LogRecord]) -> dict[bytes, list[int]]:
    """Data records' values -> the offsets each was appended at (control records left out)."""
    out: dict[bytes, list[int]] = defaultdict(list)
    for r in records:
        if not r.control and r.decoded and r.value is not None:
            out[r.value].append(r.offset)
    return dict(out)


def _batches(data: bytes) -> Iterator[tuple[int, int, int, int, int, bytes]]:
    """(base offset, last offset delta, attributes, producer id, leader epoch, records bytes)."""
    pos = 0
    while pos + _HEADER.size <= len(data):
        (base, length, epoch, magic, _crc, attrs, last_delta, _t0, _t1, pid, _pepoch, _seq,
         _count) = _HEADER.unpack_from(data, pos)
        end = pos + 12 + length  # baseOffset and batchLength are not counted in the length
        if length <= 0 or end > len(data):
            return  # the tail of a segment being written
        if magic != 2:
            raise ValueError(f"record batch at {pos}: magic {magic}, only v2 is supported")
        yield base, last_delta, attrs, pid, epoch, data[pos + _HEADER.size : end]
        pos = end


def _read_segment(data: bytes) -> Iterator[LogRecord]:
    for base, last_delta, attrs, pid, epoch, body in _batches(data):
        codec = attrs & _ATTR_COMPRESSION
        transactional = bool(attrs & _ATTR_TRANSACTIONAL)
        control = bool(attrs & _ATTR_CONTROL)
        if codec == 1:
            body = gzip.decompress(body)
        elif codec != 0:
            for delta in range(last_delta + 1):
                yield LogRecord(base + delta, None, None, pid, transactional, control, epoch,
                                decoded=False)
            continue
        pos = 0
        while pos < len(body):
            length, pos = _varint(body, pos)
            record_end = pos + length
            pos += 1  # attributes
            _ts, pos = _varint(body, pos)
            delta, pos = _varint(body, pos)
            key, pos = _bytes(body, pos)
            value, pos = _bytes(body, pos)
            pos = record_end  # headers: not needed
            yield LogRecord(base + delta, key, value, pid, transactional, control, epoch)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint (Kafka's record fields)."""
    shift = result = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
    return (result >> 1) ^ -(result & 1), pos


def _bytes(data: bytes, pos: int) -> tuple[bytes | None, int]:
    length, pos = _varint(data, pos)
    if length < 0:
        return None, pos
    return data[pos : pos + length], pos + length
