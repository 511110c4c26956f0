"""KAFKA-17754's trail in log segments (kmon.nemesis.kafka17754), on segments written here in
Kafka's record batch v2 layout."""

from __future__ import annotations

import struct
from pathlib import Path
from types import SimpleNamespace

from kmon.nemesis.chaos_run import ProbeSlot, _judge_slot
from kmon.nemesis.kafka17754 import Explained, explain, partition_batches, signature

TOPIC = "kmon-t.0"


def batch(base: int, pid: int, epoch: int, *, tx: bool = True, marker: str | None = None) -> bytes:
    """One single-record batch; a control one carries its marker's key (version 0, type)."""
    attrs = (0x10 if tx else 0) | (0x20 if marker else 0)
    record = b""
    if marker:
        key = struct.pack(">hh", 0, {"abort": 0, "commit": 1}[marker])
        body = b"\x00" + b"\x00" + b"\x00" + bytes([len(key) * 2]) + key + b"\x00" + b"\x00"
        record = bytes([len(body) * 2]) + body
    rest = struct.pack(">ibIhiqqqhii", 0, 2, 0, attrs, 0, 0, 0, pid, epoch, 0, 1) + record
    return struct.pack(">qi", base, len(rest)) + rest


def segment(tmp_path: Path, *batches: bytes, partition: int = 0) -> list[Path]:
    d = tmp_path / "broker-1" / f"{TOPIC}-{partition}"
    d.mkdir(parents=True)
    (d / "00000000000000000000.log").write_bytes(b"".join(batches))
    return [tmp_path / "broker-0", tmp_path / "broker-1"]  # the first holds no replica


def test_a_write_after_its_producers_commit_at_the_same_epoch_then_aborted(tmp_path: Path) -> None:
    # Chaos seed 12 at proxied.0/0: 423 and 424 end one transaction; 425, the next one's write,
    # came after the COMMIT at the same epoch; the producer's next epoch aborted it (429).
    dirs = segment(tmp_path, batch(423, 1002, 9), batch(424, 1002, 9, marker="commit"),
                   batch(425, 1002, 9), batch(426, 8002, 0, tx=False),
                   batch(429, 1002, 10, marker="abort"))
    batches = partition_batches(dirs, TOPIC, 0)
    assert [(b.base, b.marker) for b in batches][1] == (424, "commit")
    assert signature(batches, 425) == {
        "issue": "KAFKA-17754", "offset": 425, "producer-id": 1002, "epoch": 9,
        "after-marker": [424, "commit"], "aborted-at": [429, 10]}
    assert signature(batches, 423) is None  # its transaction committed
    assert signature(batches, 426) is None  # not transactional


def test_an_ordinary_aborted_transaction_is_not_the_trail(tmp_path: Path) -> None:
    dirs = segment(tmp_path, batch(10, 7, 3, marker="commit"), batch(11, 7, 4),
                   batch(12, 7, 4, marker="abort"),  # a new epoch: a transaction of its own
                   batch(13, 7, 4), batch(14, 8, 0), batch(15, 7, 4),
                   batch(16, 7, 4, marker="commit"))
    batches = partition_batches(dirs, TOPIC, 0)
    assert signature(batches, 11) is None and signature(batches, 13) is None
    assert signature(batches, 99) is None


def test_explain_counts_only_records_whose_every_invisible_write_shows_it(tmp_path: Path) -> None:
    dirs = segment(tmp_path, batch(4, 1, 9, marker="commit"), batch(5, 1, 9), batch(6, 2, 0),
                   batch(7, 1, 10, marker="abort"))
    placement = SimpleNamespace(topic=TOPIC, partition=0)
    ops = [SimpleNamespace(meta=SimpleNamespace(placements={"k": placement}))]
    errors = {"lost-write": [{"key": "k", "offset": 5}, {"key": "k", "offset": 6}],
              "torn-transaction": [{"invisible": [["k", 50, 5]]},
                                   {"invisible": [["k", 50, 5], ["other", 1, 3]]}]}
    found = explain(ops, errors, dirs)
    assert found.counts == {"lost-write": 1, "torn-transaction": 1}
    assert [t["offset"] for t in found.trails] == [5]


def test_a_safe_probe_whose_losses_are_a_known_bug_passes_only_for_those() -> None:
    slot = ProbeSlot("proxied", "proxied", "t-proxied")
    slot.ids.append("p1")
    known = {"p1": Explained({"lost-write": 2, "torn-transaction": 1}, [])}
    counts = {"p1": {"lost-write": 2, "torn-transaction": 1}}
    assert _judge_slot(slot, counts, counts, known) == []
    more = {"p1": {"lost-write": 3, "torn-transaction": 1}}
    assert _judge_slot(slot, more, more, known) == [
        "false alarm from the monitor on p1 (proxied): {'lost-write': 1}",
        "kmon check finds {'lost-write': 1} in p1 (proxied)"]
