"""A deposed group coordinator's stale answers, read from a local cluster's broker logs.

When the broker leading a group's ``__consumer_offsets`` partition is paused, the controller
fences it and another broker becomes the group's coordinator: it loads the group and accepts
commits. The paused broker, resumed, still holds the group in memory until it learns of the new
leader and unloads it, asynchronously (the window KAFKA-20634 describes for its writes). A
client that sent its OffsetFetch to it before the move (its coordinator cache is older than
the move) is answered from that stale state: the committed offset from before the new
coordinator's commits. The consumer restarts below an acknowledged commit, and the checker
rightly reports ``offset-commit-reread`` (seen in a chaos run: commit of 36 acknowledged by
the new coordinator at 05:05:20.790, the assign's lookup answered 30 by the resumed one at
22.389, which unloaded the group at 22.532).

``explain`` tells that trail from a reread nobody has explained: the broker logs show a broker
unloading the group's partition for epoch E after another broker had finished loading it at
epoch E, the commit was acknowledged inside that window and the lookup was sent and answered in
it. Both brokers' log lines name the same epoch, so a broker that was killed (it writes no
unload line) never makes a window.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from kmon.checker.anomaly import OFFSET_COMMIT_REREAD
from kmon.local.kafka_config import read_properties
from kmon.nemesis.kafka17754 import Explained

ISSUE = "deposed group coordinator (stale OffsetFetch)"
# log4j's timestamp, then the coordinator runtime's lines for a __consumer_offsets partition
_STAMP = r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] INFO \[GroupCoordinator id=(\d+)\] "
_LOADED = re.compile(_STAMP + r"Finished loading of metadata from __consumer_offsets-(\d+) "
                     r"with epoch (\d+)")
_UNLOADED = re.compile(_STAMP + r"Finished unloading metadata for __consumer_offsets-(\d+) "
                       r"with epoch OptionalInt\[(\d+)\]")
# The probe stamps an op's completion just after the answer arrives; the old coordinator logs
# its unload once the answer is out. Answers completed this long after the unload still count.
ANSWER_SLACK_S = 1.0
DEFAULT_OFFSETS_PARTITIONS = 50  # Kafka's offsets.topic.num.partitions


@dataclass(frozen=True)
class Window:
    """Two coordinators at once for one ``__consumer_offsets`` partition: ``new`` had loaded
    it at ``epoch`` (``start``, epoch seconds) and ``old`` unloaded it only at ``end``."""

    partition: int
    epoch: int
    old: int
    new: int
    start: float
    end: float


def group_partition(group: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of ``group``: Kafka's
    ``Utils.abs(groupId.hashCode()) % partitions``."""
    data = group.encode("utf-16-be")  # Java hashes UTF-16 code units
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    if h >= 1 << 31:
        h -= 1 << 32
    return 0 if h == -(1 << 31) else abs(h) % partitions


def _stamp(text: str) -> float:
    """A log4j timestamp (the broker's local time, this machine's) as epoch seconds."""
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def windows(lines: Iterable[str]) -> list[Window]:
    """The windows in the brokers' log lines (all brokers' lines, in any order)."""
    # (partition, epoch) -> [(at, node)]: a log spans every cluster the suite formatted, so
    # an epoch recurs; an unload pairs with the latest load of its epoch before it.
    loaded: dict[tuple[int, int], list[tuple[float, int]]] = {}
    unloaded: list[tuple[int, int, int, float]] = []  # (partition, epoch, node, at)
    for line in lines:
        if m := _LOADED.match(line):
            loaded.setdefault((int(m[3]), int(m[4])), []).append((_stamp(m[1]), int(m[2])))
        elif m := _UNLOADED.match(line):
            unloaded.append((int(m[3]), int(m[4]), int(m[2]), _stamp(m[1])))
    out = []
    for part, epoch, node, at in unloaded:
        before = [ld for ld in loaded.get((part, epoch), []) if ld[0] < at]
        if before:
            start, new = max(before)
            if new != node:
                out.append(Window(part, epoch, node, new, start, at))
    return out


def broker_logs(data_dirs: list[Path]) -> tuple[list[str], int]:
    """The brokers' ``server.log`` lines (beside each data directory) and the cluster's
    ``offsets.topic.num.partitions``."""
    lines: list[str] = []
    partitions = DEFAULT_OFFSETS_PARTITIONS
    for d in data_dirs:
        log = d.parent / "server.log"
        if log.exists():
            lines += log.read_text(errors="replace").splitlines()
        props = d.parent / "server.properties"
        if props.is_file():
            partitions = int(read_properties(props).get("offsets.topic.num.partitions",
                                                        partitions))
    return lines, partitions


def explain(ops: list[Any], errors: dict[str, list[dict[str, Any]]],
            data_dirs: list[Path]) -> Explained:
    """Check each ``offset-commit-reread`` record of ``kmon check``'s ``errors`` on ``ops`` (a
    probe's history) against the broker logs beside ``data_dirs``."""
    records = errors.get(OFFSET_COMMIT_REREAD, [])
    if not records:
        return Explained({}, [])
    lines, partitions = broker_logs(data_dirs)
    return explain_with(ops, records, windows(lines), partitions)


def explain_with(ops: list[Any], records: list[dict[str, Any]], found: list[Window],
                 partitions: int) -> Explained:
    by_index = {o.index: o for o in ops}
    trails = []
    for r in records:
        writer, reader = by_index.get(r.get("writer")), by_index.get(r.get("reader"))
        if writer is None or reader is None or r.get("group") is None:
            continue
        w = _window_of(found, group_partition(r["group"], partitions), writer, reader)
        if w is not None:
            trails.append({"issue": ISSUE, "group": r["group"], "key": r["key"],
                           "offset": r["offset"], "expected": r["expected"],
                           "partition": f"__consumer_offsets-{w.partition}", "epoch": w.epoch,
                           "old-coordinator": w.old, "new-coordinator": w.new,
                           "window": [w.start, w.end]})
    return Explained({OFFSET_COMMIT_REREAD: len(trails)} if trails else {}, trails)


def _window_of(found: list[Window], partition: int, writer: Any,
               reader: Any) -> Window | None:
    """The window in which the commit (``writer``) was acknowledged by the new coordinator
    while the lookup (``reader``) was sent to, and answered by, the old one."""
    acked = writer.time / 1e9
    sent = (reader.meta.invoke_time if reader.meta and reader.meta.invoke_time
            else reader.time) / 1e9
    answered = reader.time / 1e9
    for w in found:
        if (w.partition == partition and w.start <= acked <= w.end and sent <= w.end
                and answered <= w.end + ANSWER_SLACK_S):
            return w
    return None
