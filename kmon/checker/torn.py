"""The transaction stage: atomicity across keys, from facts the per-key folds send.

- ``torn-transaction`` (found by hand in Jepsen's Bufstream analysis, KAFKA-17754; Jepsen's
  checker does not detect it): an op that wrote two or more values, some of which became
  visible while others provably never will (readers went past them, the grace period ended).
  Whatever the op's outcome, it is not atomic.
  Example: ``fail txn [[send 5 [653 424]] [send 17 [1360 926]]]``; polls read 424 from key 5,
  and read key 17 past offset 1360 without ever seeing 926.
- ``lost-write`` of an ``info`` writer: an op whose outcome the client never learned, but one
  of whose values was read, must have committed; its other values that readers went past
  without seeing are lost. (An ``ok`` writer's lost writes are reported by its key's fold.)

Online this is a second stage keyed by the writer op, fed by per-key facts; offline the same
class runs in process. Record: ``{key, writer, visible: [[key, value, offset], ...],
invisible: [[key, value, offset], ...]}`` where ``key`` is the first invisible write's key.
"""

from __future__ import annotations

import itertools
from typing import Any

from kmon.checker import lost_write
from kmon.checker.anomaly import TORN_TRANSACTION
from kmon.checker.sink import Sink, TxnFact


class Write:
    """One write of a multi-write op, as one of its keys' facts told the stage: ``reader``
    and ``max_read`` are the poll that read past an invisible write and the highest offset read
    then (-1: not known, and always for a visible write)."""

    __slots__ = ("key", "max_read", "offset", "outcome", "reader", "value")

    def __init__(self, key: Any, value: Any, offset: int | None, outcome: str = "unknown",
                 reader: int = -1, max_read: int = -1) -> None:
        self.key = key
        self.value = value
        self.offset = offset
        self.outcome = outcome  # the writer's completion, as the fact's key saw it
        self.reader = reader
        self.max_read = max_read

    def where(self) -> list[Any]:
        """``[key, value, offset]``: how torn-transaction records list a write."""
        return [self.key, self.value, self.offset]

    def row(self) -> list[Any]:
        """As state stores keep it."""
        return [self.key, self.value, self.offset, self.outcome, self.reader, self.max_read]


def write_of(row: list[Any]) -> Write:
    """A ``Write`` from its ``row``, or from a row saved before rows had the outcome (a visible
    write: 3 fields) or the reader (4 fields)."""
    return Write(*row[:6])


class TxnState:
    __slots__ = ("invisible", "lost_reported", "time", "torn_reported", "visible")

    def __init__(self) -> None:
        self.visible: list[Write] = []
        self.invisible: list[Write] = []
        self.torn_reported = 0  # how many invisible writes the last torn record listed
        self.lost_reported = 0  # invisible info writes already reported lost
        self.time = 0


class TxnStage:
    """Per-writer atomicity state. ``grace_ns`` None: keep everything (offline).

    Online, a writer is kept ``retain_ns`` after its last fact (at least two grace periods):
    a transaction's visible half may be decided long before its invisible half, when the
    readers of its other keys lag behind, and a torn verdict needs both. ``max_writers``
    bounds the memory whatever the retention: past it the oldest writers are forgotten first.
    """

    def __init__(self, grace_ns: int | None = None, retain_ns: int | None = None,
                 max_writers: int | None = None) -> None:
        self.retain_ns = None if grace_ns is None else max(2 * grace_ns, retain_ns or 0)
        self.max_writers = max_writers
        self.txns: dict[Any, TxnState] = {}  # in order of first fact: oldest first

    def apply(self, fact: TxnFact, sink: Sink) -> None:
        ts = self.txns.get(fact.writer)
        if ts is None:
            ts = self.txns[fact.writer] = TxnState()
        ts.time = max(ts.time, fact.time)
        if fact.kind == "visible":
            ts.visible.append(Write(fact.key, fact.value, fact.offset))
        else:
            ts.invisible.append(Write(fact.key, fact.value, fact.offset, fact.outcome,
                                      fact.reader, fact.max_read))
        judge(fact.writer, ts, sink)

    def advance(self, watermark: int) -> None:
        if self.retain_ns is None:
            return
        horizon = watermark - self.retain_ns
        for w in [w for w, ts in self.txns.items() if ts.time <= horizon]:
            del self.txns[w]
        excess = len(self.txns) - (self.max_writers or len(self.txns))
        for w in list(itertools.islice(self.txns, max(0, excess))):
            del self.txns[w]


def judge(writer: Any, ts: TxnState, sink: Sink) -> None:
    """Report what the facts so far prove about ``writer``, each thing once."""
    if not ts.visible or not ts.invisible:
        return
    if len(ts.invisible) > ts.torn_reported:
        ts.torn_reported = len(ts.invisible)
        sink.anomaly(TORN_TRANSACTION, {
            "key": ts.invisible[0].key,
            "writer": writer,
            "visible": [w.where() for w in ts.visible],
            "invisible": [w.where() for w in ts.invisible],
        })
    # A visible write proves the op committed: its unseen writes were lost.
    for w in ts.invisible[ts.lost_reported:]:
        if w.outcome in ("info", "unknown"):
            lost_write.report(sink, w.key, w.value, w.offset, writer, w.reader, w.max_read)
    ts.lost_reported = len(ts.invisible)
