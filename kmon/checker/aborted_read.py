"""Aborted reads (G1a) and precommitted reads, plus the visibility facts torn-transaction needs.

- ``G1a`` (aborted read): some poll returned a value whose writer failed: the send or
  transaction definitely did not commit, yet its write became visible. Reported per reading op
  (any outcome: a read_committed consumer must never see such a record).
  Example: ``fail txn [[send k 7]]`` (deliberately aborted), then ``ok poll {k [[3 7]]}``.
  A read may reach us before its writer's outcome does; it waits (``pending_reads``) until the
  outcome arrives or the grace period ends.
- ``precommitted-read``: a transaction read a value it wrote itself, before committing;
  Kafka's consumers must never see uncommitted records.
  Example: ``ok txn [[send k 1] [poll {k [[0 1]]}]]``.

Records: ``{key, value, offset, writer, reader}`` and ``{key, op, value, values}``.
"""

from __future__ import annotations

from typing import Any

from kmon.checker.anomaly import G1A, PRECOMMITTED_READ
from kmon.checker.sink import Sink, TxnFact
from kmon.checker.state import (
    FLAG_OUTCOME,
    MULTI,
    VISIBLE_DONE,
    W_ANY,
    W_FAIL,
    KeyState,
    Loose,
    PendingRead,
)


def _writer(st: KeyState, code: int) -> tuple[int, int, Loose | None, int]:
    """(flags, writer op, loose record or None, slot or -1) of the value ``code``."""
    i, rec = st.record_of(code)
    if i >= 0:
        return st.flg[i], st.writer(i), None, i
    if rec is not None:
        return rec.flags, rec.writer, rec, -1
    return 0, -1, None, -1


def _mark(st: KeyState, i: int, rec: Loose | None, bit: int) -> None:
    if i >= 0:
        st.flg[i] |= bit
    elif rec is not None:
        rec.flags |= bit


def judge_read(
    st: KeyState, code: int, off: int, reader: int, process: Any, time: int, deadline: int,
    ok: bool, sink: Sink,
) -> None:
    """A poll by op ``reader`` read ``code`` at ``off``: aborted? atomicity fact? or wait."""
    flags, writer, rec, i = _writer(st, code)
    if not flags & W_ANY:
        waiting = PendingRead(reader, off, deadline, process, ok)
        st.pending_reads.setdefault(code, []).append(waiting)
        return
    _judge(st, code, off, flags, writer, rec, i, reader, time, ok, sink)


def judge_read_at(
    st: KeyState, i: int, code: int, off: int, reader: int, process: Any, time: int,
    deadline: int, ok: bool, sink: Sink,
) -> None:
    """``judge_read`` for a value just read in slot ``i``: usually its home, so no lookup."""
    flags = st.flg[i]
    if not flags & W_ANY or st.find(code) != st.base + i:
        judge_read(st, code, off, reader, process, time, deadline, ok, sink)
        return
    _judge(st, code, off, flags, st.writer(i), None, i, reader, time, ok, sink)


def _judge(
    st: KeyState, code: int, off: int, flags: int, writer: int, rec: Loose | None, i: int,
    reader: int, time: int, ok: bool, sink: Sink,
) -> None:
    if flags & W_FAIL and writer != reader:
        sink.anomaly(G1A, {"key": st.key, "value": st.value(code), "offset": off,
                           "writer": writer, "reader": reader})
    if ok and flags & MULTI and not flags & VISIBLE_DONE:
        # read by a committed op: the writer's effects were visible (and it committed)
        sink.facts.append(TxnFact("visible", writer, st.key, st.value(code), off,
                                  FLAG_OUTCOME[flags & W_ANY], time))
        _mark(st, i, rec, VISIBLE_DONE)


def writer_known(st: KeyState, code: int, time: int, sink: Sink) -> None:
    """The writer of ``code`` completed: settle reads that were waiting for it."""
    waiting = st.pending_reads.pop(code, None)
    if waiting is None:
        return
    flags, writer, rec, i = _writer(st, code)
    for w in waiting:
        _judge(st, code, w.offset, flags, writer, rec, i, w.reader, time, w.ok, sink)


def precommitted(st: KeyState, op: int, values: list[Any], sink: Sink) -> None:
    sink.anomaly(PRECOMMITTED_READ, {"key": st.key, "op": op, "value": values[0],
                                     "values": values})
