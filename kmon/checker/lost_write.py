"""Lost writes: acknowledged values that readers went past without ever seeing.

``lost-write``: a value in the version order (an ok send reported its offset, or some poll read
it) that no committed (ok) poll ever read, although an ok poll read a higher offset of the key.
Consumers read a partition in order from a committed position, so reading past an offset means
everything visible below it should have been consumed by someone. Only ok writers count here
(and ``info`` ones proven committed, via the transaction stage); a value read only by aborted
transactions was never consumed.
Example (Bufstream #5): ``ok send 12 [662 663]``; polls read ``[661 662]`` then ``[664 665]``;
nobody ever reads 663.

Absence needs patience online: when reads first pass an unread value it becomes a *candidate*
with a deadline (grace period after that read); if by the watermark's passing the deadline still
nobody read it, the verdict is emitted, once. Offline the deadline is the end of the history.

Writes of ops that wrote two or more values also yield ``invisible`` facts at that point, whatever
the writer's outcome, so the transaction stage can find torn transactions, and lost writes of
``info`` writers that another of their writes proves committed.

Record: ``{key, value, offset, writer, reader, max-read-offset}`` (``reader``: the op whose read
went past the value).
"""

from __future__ import annotations

from typing import Final

from librt.vecs import vec
from mypy_extensions import i64

from kmon.checker.anomaly import LOST_WRITE
from kmon.checker.sink import Sink, TxnFact
from kmon.checker.state import (
    CAND,
    DECIDED,
    FLAG_OUTCOME,
    MULTI,
    OCCUPIED,
    READ_OK,
    SENT,
    VER,
    W_ANY,
    W_FAIL,
    W_INFO,
    W_OK,
    Consumed,
    KeyState,
)

_DONE: Final = READ_OK | CAND | DECIDED


def _matters(f: int) -> bool:
    """Does this unconsumed slot's absence prove something? (a lost or an invisible write)

    An info or failed write of a multi-write op counts where its offset is known: from its ack
    (SENT) or from a poll that read it without committing (VER): the transaction stage then
    learns it is invisible, and reports it lost if another of its writes proves the commit.
    """
    if f & W_OK and f & VER:
        return True
    return bool(f & MULTI) and bool(f & (SENT | VER)) and bool(f & (W_INFO | W_FAIL))


def reads_reached(st: KeyState, hi: int, reader: int, deadline: int) -> None:
    """Committed polls have now read offset ``hi``: unconsumed values below it are candidates."""
    lo = st.frontier
    if hi <= lo:
        return
    st.frontier = hi
    st.frontier_op = reader
    flg, base = st.flg, st.base
    start = lo + 1 - base if lo + 1 > base else 0
    end = hi - base if hi - base < len(flg) else len(flg)
    for i in range(start, end):
        f = flg[i]
        if f & OCCUPIED and not f & _DONE and _matters(f):
            flg[i] = f | CAND
            st.add_cand(deadline, base + i, reader)


def sent_below_reads(st: KeyState, i: int, deadline: int) -> None:
    """A send completed at an offset readers have already passed."""
    f = st.flg[i]
    if st.base + i < st.frontier and not f & _DONE and _matters(f):
        st.flg[i] = f | CAND
        st.add_cand(deadline, st.base + i, st.frontier_op)


def due_by_offset(st: KeyState, watermark: int) -> dict[int, int]:
    """Offset -> deadline of the candidates ``decide(st, watermark)`` will judge."""
    return {o: d for d, o in zip(st.cand_due, st.cand_offset, strict=True) if d <= watermark}


def decide(st: KeyState, watermark: int, sink: Sink) -> None:
    """Emit verdicts for candidates whose deadline the watermark has passed."""
    due, offs, readers = st.cand_due, st.cand_offset, st.cand_reader
    if not len(due):
        return
    st.cand_due, st.cand_offset, st.cand_reader = vec[i64](), vec[i64](), vec[i64]()
    consumed = Consumed(st)
    for j in range(len(due)):
        if due[j] > watermark:
            st.add_cand(due[j], offs[j], readers[j])
        else:
            _verdict(st, offs[j], readers[j], consumed, sink)


def _verdict(st: KeyState, off: int, reader: int, consumed: Consumed, sink: Sink) -> None:
    i = off - st.base
    f = st.flg[i]
    st.flg[i] = (f & ~CAND) | DECIDED
    code = st.val[i]
    home = st.find(code)
    if f & READ_OK or (home >= 0 and st.flg[home - st.base] & READ_OK):
        return
    if code in consumed:  # consumed where it really is (its ack named another offset)
        return
    value, writer = st.value(code), st.writer(i)
    if f & VER and f & W_OK:
        sink.anomaly(LOST_WRITE, {"key": st.key, "value": value, "offset": off,
                                  "writer": writer, "reader": reader,
                                  "max-read-offset": st.frontier})
    if f & MULTI:  # part of a multi-write op: the transaction stage judges its atomicity
        sink.facts.append(TxnFact("invisible", writer, st.key, value, off,
                                  FLAG_OUTCOME[f & W_ANY], st.max_time, reader, st.frontier))
