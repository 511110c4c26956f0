"""Small histories, one per anomaly the monitor reports online (from tests/checker).

Each case is (anomaly type, history). Histories use the checker tests' builders: an invoke
before each completion, times 10 apart. The monitor tests give every case its own probe id and
placements on a topic named after the case, so their verdicts and metrics stay apart.
"""

from __future__ import annotations

from kmon.history.model import Op
from kmon.streaming.replay import with_placements
from tests.checker.helpers import history, poll, send

_WRITES = [(0, "ok", "send", [send(1, v, off)]) for off, v in enumerate("abcd")]

CASES: dict[str, tuple[str, list[Op]]] = {
    # offset 3 holds both a and b
    "inconsistent-offsets": ("inconsistent-offsets", history(
        (0, "ok", "send", [send(1, "a", 3)]), (1, "ok", "poll", [poll({1: [(3, "b")]})]))),
    # Bufstream #3, spurious zero offsets: 26 acknowledged at 0, read at 25
    "duplicate": ("duplicate", history(
        (0, "ok", "send", [send(6, 26, 0)]), (1, "ok", "poll", [poll({6: [(25, 26)]})]))),
    # Bufstream #5: readers went past 663, nobody read it
    "lost-write": ("lost-write", history(
        (0, "ok", "send", [send(12, 662, 662)]), (0, "ok", "send", [send(12, 663, 663)]),
        (1, "ok", "poll", [poll({12: [(661, 661), (662, 662)]})]),
        (1, "ok", "poll", [poll({12: [(664, 664), (665, 665)]})]))),
    "G1a": ("G1a", history(
        (0, "fail", "send", [send(1, 5, 0)]), (1, "ok", "poll", [poll({1: [(0, 5)]})]))),
    "precommitted-read": ("precommitted-read", history(
        (0, "ok", "txn", [send(1, 5, 0), poll({1: [(0, 5)]})]))),
    "poll-skip": ("poll-skip", history(
        *_WRITES, (1, "ok", "poll", [poll({1: [(0, "a")]})]),
        (1, "ok", "poll", [poll({1: [(2, "c")]})]))),
    "nonmonotonic-poll": ("nonmonotonic-poll", history(
        *_WRITES, (1, "ok", "poll", [poll({1: [(2, "c")]})]),
        (1, "ok", "poll", [poll({1: [(1, "b")]})]))),
    "nonmonotonic-send": ("nonmonotonic-send", history(
        (0, "ok", "send", [send(1, 1, 5)]), (0, "ok", "send", [send(1, 2, 4)]))),
    "int-poll-skip": ("int-poll-skip", history(
        *_WRITES, (1, "ok", "poll", [poll({1: [(0, "a"), (2, "c")]})]))),
    "int-nonmonotonic-poll": ("int-nonmonotonic-poll", history(
        *_WRITES, (1, "ok", "poll", [poll({1: [(3, "d")]}), poll({1: [(1, "b")]})]))),
    "int-send-skip": ("int-send-skip", history(
        (0, "ok", "txn", [send(1, 1, 0), send(1, 2, 2)]), (1, "ok", "send", [send(1, 3, 1)]))),
    "int-nonmonotonic-send": ("int-nonmonotonic-send", history(
        (0, "ok", "txn", [send(1, 1, 5), send(1, 2, 5)]))),
    # a committed transaction half visible: key 2's write was passed over, never read
    "torn-transaction": ("torn-transaction", history(
        (0, "ok", "txn", [send(1, 1, 0), send(2, 2, 0)]),
        (1, "ok", "poll", [poll({1: [(0, 1)], 2: [(1, 3)]})]))),
    # an info transaction, proven committed by the read of its write to key 1: its write to
    # key 2, passed over, was lost (decided across keys, by the transaction stage)
    "lost-write-info": ("lost-write", history(
        (0, "info", "txn", [send(1, 1, 0), send(2, 2, 0)]),
        (1, "ok", "poll", [poll({1: [(0, 1)], 2: [(1, 3)]})]))),
}


def placed(ops: list[Op], topic: str, leader: int | None = None) -> list[Op]:
    """``ops`` with every key placed on partition ``key`` (or 0) of ``topic``, led by broker
    ``leader``."""
    return list(with_placements(ops, topic, leader))
