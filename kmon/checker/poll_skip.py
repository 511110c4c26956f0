"""Polls that skip over the log or go backwards.

Positions are compared in Jepsen's *dense index*: the key's version-order values numbered
0, 1, 2, ..., ignoring offsets that hold no visible value (transaction markers, aborted records).
Two reads are adjacent when no version-order value lies strictly between their offsets.

- ``poll-skip``: a process's ok poll of a key starts beyond the value right after where its
  previous ok poll of that key ended, skipping values.
  Example: ``ok poll {k [[1 a]]}``, ``ok poll {k [[3 c]]}``, and ``ok send k [2 b]``.
- ``nonmonotonic-poll``: it starts at or before where the previous one ended.
- ``int-poll-skip`` / ``int-nonmonotonic-poll``: the same between successive reads of one key
  within one op (any outcome: a poller's records are real whatever its transaction's fate).

Position rules: only ok ops move a process's position, so the reads of an aborted transaction
(which the client rewinds over) or of an op with unknown outcome neither advance nor get compared.
An ok or info assign/subscribe covering the key, or a rebalance of it, clears the position: the
consumer legitimately restarts from a committed offset (offline, one not covering the key drops
the position too, as in Jepsen: ``Checker._reassigned``; a failed one changes nothing). A
rebalance during an op exempts that op's own reads of the key and the next poll's (the
rebalance may have come before or after the reads).

A skipped value may become known only after the skip (its send's completion arrives late): the
crossed empty offsets remember the crossing, and a value landing there later reports it then.

Records: ``poll-skip``/``nonmonotonic-poll``: ``{key, process, ops, offsets, values?, skipped?,
delta}``; ``int-*``: ``{key, op, offsets, values, skipped?, delta}``. ``delta`` is the dense-index
distance from the first read to the second (1 = adjacent).
"""

from __future__ import annotations

from typing import Any

from kmon.checker.anomaly import (
    INT_NONMONOTONIC_POLL,
    INT_POLL_SKIP,
    INT_SEND_SKIP,
    NONMONOTONIC_POLL,
    POLL_SKIP,
)
from kmon.checker.records import Crossing
from kmon.checker.sink import Sink
from kmon.checker.state import KeyState


def crossing(
    st: KeyState, lo: int, hi: int, op_a: int, op_b: int, process: Any, send: bool
) -> list[Any]:
    """Values in the version order strictly between offsets ``lo`` and ``hi``.

    Empty offsets in between remember this crossing, for values that arrive there later.
    """
    skipped = []
    base = st.base
    start = lo + 1 - base if lo + 1 > base else 0
    end = hi - base
    if end > len(st.val):
        end = len(st.val)
    remembered: Crossing | None = None  # made at the first empty offset
    for i in range(start, end):
        if st.in_version_order(i):
            skipped.append(st.value(st.val[i]))
        elif not st.occupied(i):
            if remembered is None:
                within = op_a == op_b
                remembered = Crossing(op_b, send, within, op_a,
                                      process if type(process) is int else -1, lo, hi)
            st.set_crossing(i, remembered)
    return skipped


def _value_at(st: KeyState, off: int) -> Any:
    i = off - st.base
    if 0 <= i < len(st.val) and st.occupied(i):
        return st.value(st.val[i])
    return None


def count_versions(st: KeyState, lo: int, hi: int) -> int:
    """Number of version-order values with offsets in (lo, hi]."""
    start = max(lo + 1, st.base) - st.base
    end = min(hi + 1 - st.base, len(st.val))
    return sum(1 for i in range(start, end) if st.in_version_order(i))


def skip_from_gap(st: KeyState, i: int, code: int, sink: Sink) -> None:
    """A version-order value landed on an offset that some op had already read across.

    The report merges it with the crossing's own record when there is one.
    """
    c = st.crossing(i)
    if c is None:
        return
    st.clear_crossing(i)
    skipped = [st.value(code)]
    if c.within:
        kind = INT_SEND_SKIP if c.send else INT_POLL_SKIP
        sink.anomaly(kind, {"key": st.key, "op": c.op, "offsets": [c.lo, c.hi],
                            "values": [_value_at(st, c.lo), _value_at(st, c.hi)],
                            "skipped": skipped, "delta": 2})
    else:
        rec = {"key": st.key, "process": c.process if c.process >= 0 else None,
               "ops": [c.first_op, c.op], "skipped": skipped, "delta": 2}
        sink.anomaly(POLL_SKIP, rec)


def between_ops(
    st: KeyState, last_off: int, last_val: Any, last_op: int,
    first_off: int, first_val: Any, op: int, process: Any, sink: Sink,
) -> None:
    """Compare an ok poll's first read of the key with where the process's previous one ended."""
    if first_off <= last_off:
        sink.anomaly(NONMONOTONIC_POLL, {
            "key": st.key, "process": process, "ops": [last_op, op],
            "offsets": [last_off, first_off], "values": [last_val, first_val],
            "delta": -count_versions(st, first_off, last_off),
        })
    elif first_off > last_off + 1:
        skipped = crossing(st, last_off, first_off, last_op, op, process, send=False)
        if skipped:
            sink.anomaly(POLL_SKIP, {
                "key": st.key, "process": process, "ops": [last_op, op],
                "offsets": [last_off, first_off], "values": [last_val, first_val],
                "skipped": skipped, "delta": len(skipped) + 1,
            })


def within_op(
    st: KeyState, prev_off: int, prev_val: Any, off: int, v: Any, op: int, process: Any,
    sink: Sink,
) -> None:
    """Compare two successive reads of one key inside one op."""
    if off <= prev_off:
        sink.anomaly(INT_NONMONOTONIC_POLL, {
            "key": st.key, "op": op, "offsets": [prev_off, off], "values": [prev_val, v],
            "delta": -count_versions(st, off, prev_off),
        })
    elif off > prev_off + 1:
        skipped = crossing(st, prev_off, off, op, op, process, send=False)
        if skipped:
            sink.anomaly(INT_POLL_SKIP, {
                "key": st.key, "op": op, "offsets": [prev_off, off], "values": [prev_val, v],
                "skipped": skipped, "delta": len(skipped) + 1,
            })
