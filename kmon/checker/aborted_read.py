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
from kmon.checker.flags import VISIBLE_DONE
from kmon.checker.records import PendingRead
from kmon.checker.sink import Sink, TxnFact
from kmon.checker.state import KeyState, ValueWriter


def judge_read(
    st: KeyState, code: int, off: int, reader: int, process: Any, time: int, deadline: int,
    ok: bool, sink: Sink,
) -> None:
    """A poll by op ``reader`` read ``code`` at ``off``: aborted? atomicity fact? or wait."""
    w = st.writer_of(code)
    if not w.completed():
        waiting = PendingRead(reader, off, deadline, process, ok)
        st.pending_reads.setdefault(code, []).append(waiting)
        return
    _judge(st, code, off, w, reader, time, ok, sink)


def judge_read_at(
    st: KeyState, i: int, code: int, off: int, reader: int, process: Any, time: int,
    deadline: int, ok: bool, sink: Sink,
) -> None:
    """``judge_read`` for a value just read in slot ``i``: usually its home, so no lookup."""
    if not st.completed(i) or st.find(code) != st.base + i:
        judge_read(st, code, off, reader, process, time, deadline, ok, sink)
        return
    _judge(st, code, off, st.writer_at(i), reader, time, ok, sink)


def _judge(st: KeyState, code: int, off: int, w: ValueWriter, reader: int, time: int, ok: bool,
           sink: Sink) -> None:
    if w.failed() and w.op != reader:
        sink.anomaly(G1A, {"key": st.key, "value": st.value(code), "offset": off,
                           "writer": w.op, "reader": reader})
    if ok and w.multi() and not w.marked(VISIBLE_DONE):
        # read by a committed op: the writer's effects were visible (and it committed)
        sink.facts.append(TxnFact("visible", w.op, st.key, st.value(code), off, w.outcome(),
                                  time))
        w.mark(VISIBLE_DONE)


def writer_known(st: KeyState, code: int, time: int, sink: Sink) -> None:
    """The writer of ``code`` completed: settle reads that were waiting for it."""
    waiting = st.pending_reads.pop(code, None)
    if waiting is None:
        return
    w = st.writer_of(code)
    for r in waiting:
        _judge(st, code, r.offset, w, r.reader, time, r.ok, sink)


def precommitted(st: KeyState, op: int, values: list[Any], sink: Sink) -> None:
    sink.anomaly(PRECOMMITTED_READ, {"key": st.key, "op": op, "value": values[0],
                                     "values": values})
