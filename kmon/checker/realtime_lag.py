"""Realtime lag: how long a consumer has been behind the end of a key's log.

For each ok poll or txn op and each key the process tracks (keys it was assigned, polled or sent
to in a transaction), the lag is a conservative lower bound: the op's invocation time minus the
earliest moment the offset the process had caught up to stopped being the last one, i.e. the
earliest completion of an ok or info op that sent or read any higher offset. Zero when nothing
higher was known before the op began.
Example: ``ok send x [0 a]`` at t=1, poll at t=2 reads 0; ``ok send x [1 b]`` at t=3; a poll
invoked at t=4 returns nothing: its lag is 4 - 3 = 1.

Sample: ``{time, process, key, lag}`` (nanoseconds; ``time`` is the poll's invocation).
"""

from __future__ import annotations

from typing import Any

from kmon.checker.sink import Sink
from kmon.checker.state import BLOCK_BITS, CHUNK, CHUNK_BITS, INF, KeyState


def first_ack_after(st: KeyState, pos: int) -> int:
    """Earliest reveal of any offset above ``pos`` in the window, in ``atime`` units (INF: none).

    Scans at most one partial block, then per-block minima to the chunk's end, then per-chunk
    minima: exact, and cheap however far behind the consumer is.
    """
    if pos >= st.last_revealed:
        return INF  # caught up with everything known to exist
    n = len(st.val)
    start = pos + 1 - st.base
    if start < 0:
        start = 0
    if start >= n:
        return INF
    best = INF
    block_end = ((start >> BLOCK_BITS) + 1) << BLOCK_BITS
    for i in range(start, block_end if block_end < n else n):
        a = st.ack(i)
        if a and a < best and st.occupied(i):
            best = a
    chunk_end = block_end
    if block_end & (CHUNK - 1):
        chunk_end = ((block_end >> CHUNK_BITS) + 1) << CHUNK_BITS
    bmin = st.bmin
    for b in range(block_end >> BLOCK_BITS, min(chunk_end >> BLOCK_BITS, len(bmin))):
        if bmin[b] < best:
            best = bmin[b]
    amin = st.amin
    for c in range(chunk_end >> CHUNK_BITS, len(amin)):
        if amin[c] < best:
            best = amin[c]
    return best


def sample(st: KeyState, pos: int, invoke_time: int, process: Any, sink: Sink) -> None:
    units = first_ack_after(st, pos)
    behind_since = st.ns(units) if units < INF else INF
    lag = invoke_time - behind_since if behind_since < invoke_time else 0
    sink.lags.append((invoke_time, process, st.key, lag))
