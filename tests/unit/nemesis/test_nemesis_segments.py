"""Reading a partition's log from segment files: checked against batches encoded here, in
Kafka's record batch v2 layout (the integration tests read real brokers' files).
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

from kmon.nemesis import segments


def _varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = b""
    while True:
        byte = z & 0x7F
        z >>= 7
        if z:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def _record(delta: int, value: bytes | None, key: bytes | None = None) -> bytes:
    def field(b: bytes | None) -> bytes:
        return _varint(-1) if b is None else _varint(len(b)) + b

    body = b"\x00" + _varint(0) + _varint(delta) + field(key) + field(value) + _varint(0)
    return _varint(len(body)) + body


def batch(base: int, values: list[bytes | None], pid: int = -1, codec: int = 0,
          control: bool = False, epoch: int = 0) -> bytes:
    records = b"".join(_record(i, v) for i, v in enumerate(values))
    if codec == 1:
        records = gzip.compress(records)
    attrs = codec | (0x20 if control else 0) | (0x10 if control else 0)
    after_length = struct.pack(
        ">ibIhiqqqhii", epoch, 2, 0, attrs, len(values) - 1, 0, 0, pid, 0, 0, len(values)
    ) + records
    return struct.pack(">qi", base, len(after_length)) + after_length


def test_records_offsets_and_duplicates(tmp_path: Path) -> None:
    part = segments.partition_dir(tmp_path, "t", 0)
    part.mkdir()
    # Two segments; v1 appended twice (a non-idempotent retry), a control marker, a gzip batch.
    (part / "00000000000000000000.log").write_bytes(
        batch(0, [b"v0", b"v1"]) + batch(2, [b"v1"]) + batch(3, [b"\x00\x00"], control=True)
    )
    (part / "00000000000000000004.log").write_bytes(
        batch(4, [b"v2", None], pid=7, codec=1, epoch=3)
    )
    log = segments.read_log(part)
    assert [(r.offset, r.value) for r in log] == [
        (0, b"v0"), (1, b"v1"), (2, b"v1"), (3, b"\x00\x00"), (4, b"v2"), (5, None)
    ]
    assert log[3].control and log[4].producer_id == 7 and log[4].leader_epoch == 3
    assert segments.log_end_offset(part) == 6
    assert segments.offsets_by_value(log) == {b"v0": [0], b"v1": [1, 2], b"v2": [4]}


def test_a_batch_cut_short_is_ignored_and_other_codecs_give_offsets_only(tmp_path: Path) -> None:
    part = tmp_path / "t-1"
    part.mkdir()
    whole = batch(0, [b"a"]) + batch(1, [b"b", b"c"], codec=4)  # zstd: not decoded
    (part / "00000000000000000000.log").write_bytes(whole + batch(3, [b"d"])[:-3])
    log = segments.read_log(part)
    assert [(r.offset, r.value, r.decoded) for r in log] == [
        (0, b"a", True), (1, None, False), (2, None, False)
    ]
    assert segments.log_end_offset(part) == 3
    assert segments.offsets_by_value(log) == {b"a": [0]}


def test_an_empty_or_missing_log(tmp_path: Path) -> None:
    assert segments.read_log(tmp_path / "nope-0") == []
    assert segments.log_end_offset(tmp_path / "nope-0") == 0


def test_leader_epochs(tmp_path: Path) -> None:
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n2\n0 0\n1 1748\n")
    assert segments.leader_epochs(tmp_path) == [(0, 0), (1, 1748)]
    assert segments.leader_epochs(tmp_path / "missing") == []
