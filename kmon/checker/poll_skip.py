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

from typing import Any, Final

from kmon.checker.anomaly import (
    INT_NONMONOTONIC_POLL,
    INT_POLL_SKIP,
    INT_SEND_SKIP,
    NONMONOTONIC_POLL,
    POLL_SKIP,
)
from kmon.checker.sink import Sink
from kmon.checker.state import GAP, GAP_INT, GAP_SEND, OCCUPIED, VER, KeyState

_GAP_BITS: Final = GAP | GAP_SEND | GAP_INT


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
    flg, val = st.flg, st.val
    if end > len(val):
        end = len(val)
    mark = -1  # what an empty offset remembers; worked out at the first one
    for i in range(start, end):
        f = flg[i]
        if f & VER:
            skipped.append(st.value(val[i]))
        elif not f & OCCUPIED:
            if mark < 0:
                within = op_a == op_b
                mark = GAP | (GAP_SEND if send else 0) | (GAP_INT if within else 0)
                first = lo if within else op_a
                # the third field: how far the crossing within one op went, else the process
                third = hi - lo if within else (process if type(process) is int else -1)
            flg[i] = (f & ~_GAP_BITS) | mark
            val[i] = first
            st.set_writer(i, op_b)
            st.set_small(i, third)
    return skipped


def _value_at(st: KeyState, off: int) -> Any:
    i = off - st.base
    if 0 <= i < len(st.val) and st.flg[i] & OCCUPIED:
        return st.value(st.val[i])
    return None


def count_versions(st: KeyState, lo: int, hi: int) -> int:
    """Number of version-order values with offsets in (lo, hi]."""
    start = max(lo + 1, st.base) - st.base
    end = min(hi + 1 - st.base, len(st.val))
    flg = st.flg
    return sum(1 for i in range(start, end) if flg[i] & VER)


def skip_from_gap(st: KeyState, i: int, code: int, sink: Sink) -> None:
    """A version-order value landed on an offset that some op had already read across.

    The report merges it with the crossing's own record when there is one.
    """
    f = st.flg[i]
    first, op_b, third = st.val[i], st.writer(i), st.ack(i)
    st.flg[i] = f & ~_GAP_BITS
    skipped = [st.value(code)]
    if f & GAP_INT:
        kind = INT_SEND_SKIP if f & GAP_SEND else INT_POLL_SKIP
        hi = first + third
        sink.anomaly(kind, {"key": st.key, "op": op_b, "offsets": [first, hi],
                            "values": [_value_at(st, first), _value_at(st, hi)],
                            "skipped": skipped, "delta": 2})
    else:
        op_a = first
        rec = {"key": st.key, "process": third if third >= 0 else None, "ops": [op_a, op_b],
               "skipped": skipped, "delta": 2}
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
