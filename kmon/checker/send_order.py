"""Sends whose offsets go backwards or skip, per process and within one op.

- ``nonmonotonic-send``: a process's ok send to a key lands at or before the offset its
  previous ok send to that key got (or its previous info send, once that value is in the
  version order). Other producers interleave, so only going backwards (or staying put) is
  wrong between ops.
  Example: ``ok send k [5 a]`` then, same process, ``ok send k [4 b]``.
- ``int-nonmonotonic-send``: within one op, a later send to a key gets an offset at or before an
  earlier one's.
- ``int-send-skip``: within one op, version-order values land between two successive sends to
  a key: another producer's records interleaved with this transaction's (Kafka allows it; the
  policy says so).

Records: ``{key, process, ops, offsets, values, delta}`` and ``{key, op, offsets, values,
skipped?, delta}``.
"""

from __future__ import annotations

import itertools
from typing import Any

from kmon.checker.anomaly import INT_NONMONOTONIC_SEND, INT_SEND_SKIP, NONMONOTONIC_SEND
from kmon.checker.poll_skip import count_versions, crossing
from kmon.checker.records import ProcPos
from kmon.checker.sink import Sink
from kmon.checker.state import KeyState

# (offset, value) of each send of one op to one key whose offset is known, in op order
Placed = list[tuple[int, Any]]


def within_op(st: KeyState, placed: Placed, op: int, process: Any, sink: Sink) -> None:
    for (o1, v1), (o2, v2) in itertools.pairwise(placed):
        if o2 <= o1:
            sink.anomaly(INT_NONMONOTONIC_SEND, {
                "key": st.key, "op": op, "offsets": [o1, o2], "values": [v1, v2],
                "delta": -count_versions(st, o2, o1),
            })
        elif o2 > o1 + 1:
            skipped = crossing(st, o1, o2, op, op, process, send=True)
            if skipped:
                sink.anomaly(INT_SEND_SKIP, {
                    "key": st.key, "op": op, "offsets": [o1, o2], "values": [v1, v2],
                    "skipped": skipped, "delta": len(skipped) + 1,
                })


def between_ops(
    st: KeyState, pp: ProcPos, placed: Placed, op: int, process: Any, offline: bool, sink: Sink
) -> None:
    """Check an ok op's first send against the process's previous ok or info send; then
    advance.

    The previous send counts only if its value is in the version order (an info send's may
    never have happened; Jepsen's rule). Online that is decided now: a value read later
    is a check missed, never a false alarm. Offline the record is kept, and
    ``Checker.finish`` drops it unless the whole history puts the value there.
    """
    first_off, first_val = placed[0]
    if (pp.send_off is not None and first_off <= pp.send_off
            and (offline or in_version_order(st, pp.send_off, pp.send_val))):
        sink.anomaly(NONMONOTONIC_SEND, {
            "key": st.key, "process": process, "ops": [pp.send_op, op],
            "offsets": [pp.send_off, first_off], "values": [pp.send_val, first_val],
            "delta": -count_versions(st, first_off, pp.send_off),
        })
    pp.send_off, pp.send_val = placed[-1]
    pp.send_op = op


def in_version_order(st: KeyState, off: int, v: Any) -> bool:
    """Is ``v`` in the version order at ``off`` (read there, or an ok send's ack)? Held in
    the slot, or beside it as a loose record when another value took the offset's slot first
    (which one did depends on the order events arrived in)."""
    i = off - st.base
    code = st.code(v)
    if 0 <= i < len(st.flg) and st.in_version_order(i) and st.val[i] == code:
        return True
    rec = st.loose.get(code) if st.loose else None
    return rec is not None and rec.offset == off and rec.in_version_order()
