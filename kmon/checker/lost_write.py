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

from kmon.checker import unseen
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
    """Committed polls have now read offset ``hi``: unconsumed values below it are candidates.

    From the previous frontier ``lo`` itself: a poll read offset ``lo``, but where two values
    were acknowledged at one offset (an unclean election) the one it read may not be the
    one the slot holds, which is passed now."""
    lo = st.frontier
    if hi <= lo:
        return
    st.frontier = hi
    st.frontier_op = reader
    flg, base = st.flg, st.base
    start = lo - base if lo > base else 0
    end = hi - base if hi - base < len(flg) else len(flg)
    for i in range(start, end):
        f = flg[i]
        if f & OCCUPIED and not f & _DONE and _matters(f):
            flg[i] = f | CAND
            st.add_cand(deadline, base + i, reader)
    if st.loose:
        for code in st.loose:
            _loose_candidate(st, code, lo, hi, reader, deadline)


def _loose_candidate(st: KeyState, code: int, lo: int, hi: int, reader: int,
                     deadline: int) -> None:
    """An acknowledged value that lost its offset's slot to a conflicting one (two values at
    one offset: an unclean election gave the offset again) is judged like the slot's holder:
    which of the two holds the slot depends on which event arrived first, and a verdict must
    not (online, the events of different processes arrive in any order)."""
    rec = st.loose[code]
    off, f = rec[0], rec[1]
    if off is not None and lo <= off < hi and not f & _DONE and f & W_OK and f & VER:
        rec[1] = f | CAND
        st.add_cand(deadline, off, reader)


def loose_sent_below_reads(st: KeyState, code: int, deadline: int) -> None:
    """An acknowledged send that conflicted with its offset's holder, at or below the readers'
    frontier (at it: the value the readers read there was another)."""
    if st.loose and code in st.loose:
        _loose_candidate(st, code, -1, st.frontier + 1, st.frontier_op, deadline)


def sent_below_reads(st: KeyState, i: int, deadline: int) -> None:
    """A send completed at an offset readers have already passed."""
    f = st.flg[i]
    if st.base + i < st.frontier and not f & _DONE and _matters(f):
        st.flg[i] = f | CAND
        st.add_cand(deadline, st.base + i, st.frontier_op)


def decide(st: KeyState, watermark: int, sink: Sink) -> None:
    """Emit verdicts for candidates whose deadline the watermark has passed."""
    due, offs, readers = st.cdue, st.coff, st.cby
    if not len(due):
        return
    st.cdue, st.coff, st.cby = vec[i64](), vec[i64](), vec[i64]()
    consumed = Consumed(st)
    for j in range(len(due)):
        if due[j] > watermark:
            st.add_cand(due[j], offs[j], readers[j])
        else:
            _verdict(st, offs[j], readers[j], consumed, sink)


def _verdict(st: KeyState, off: int, reader: int, consumed: Consumed, sink: Sink) -> None:
    i = off - st.base
    if st.loose:
        _loose_verdicts(st, off, reader, consumed, sink)
    if not (0 <= i < len(st.flg) and st.flg[i] & CAND):
        return  # the candidate was a loose value's
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


def _loose_verdicts(st: KeyState, off: int, reader: int, consumed: Consumed,
                    sink: Sink) -> None:
    """The pending loose values at ``off`` (see ``_loose_candidate``), decided together: a
    second candidate at one offset is rare (both values unread where readers passed)."""
    for code, rec in st.loose.items():
        f = rec[1]
        if rec[0] != off or not f & CAND or not (f & W_OK and f & VER):
            continue  # (a value displaced from a slot may carry the slot's candidacy)
        rec[1] = (f & ~CAND) | DECIDED
        if unseen.read_ok_anywhere(st, code, consumed):
            continue
        sink.anomaly(LOST_WRITE, {"key": st.key, "value": st.value(code), "offset": off,
                                  "writer": rec[2], "reader": reader,
                                  "max-read-offset": st.frontier})
