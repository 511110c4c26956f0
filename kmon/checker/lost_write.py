"""Lost writes: acknowledged values that readers went past without ever seeing.

``lost-write``: a value in the version order (an ok send reported its offset, or some poll read
it) that no ok or info poll ever read, although an ok poll read a higher offset of the key.
Consumers read a partition in order from a committed position, so reading past an offset means
everything visible below it should have been consumed by someone. Only ok writers count here
(and ``info`` ones proven committed, via the transaction stage); a value read only by aborted
transactions was never consumed, one read by a transaction whose commit timed out (info) was
(``version_order.read_bits``).
Example (Bufstream #5): ``ok send 12 [662 663]``; polls read ``[661 662]`` then ``[664 665]``;
nobody ever reads 663.

Absence needs patience online: when reads first pass an unread value it becomes a *candidate*
with a deadline (grace period after that read); if by the watermark's passing the deadline still
nobody read it, the verdict is emitted, once. Offline the deadline is the end of the history.

Writes of ops that wrote two or more values also yield ``invisible`` facts at that point, whatever
the writer's outcome, so the transaction stage can find torn transactions, and lost writes of
``info`` writers that another of their writes proves committed (``torn.judge``, with this
module's ``report``).

Record: ``{key, value, offset, writer, reader, max-read-offset}`` (``reader``: the op whose read
went past the value).
"""

from __future__ import annotations

from typing import Any

from librt.vecs import vec
from mypy_extensions import i64

from kmon.checker import unseen
from kmon.checker.anomaly import LOST_WRITE
from kmon.checker.flags import CAND, DECIDED
from kmon.checker.sink import Sink, TxnFact
from kmon.checker.state import Consumed, KeyState


def _candidate(st: KeyState, i: int) -> bool:
    """Is occupied slot ``i``, below what committed polls have read, a candidate: a value that,
    never consumed, proves something (a lost or an invisible write), not judged yet?

    An ok writer's value in the version order is lost if nobody consumes it. An info or failed
    write of a multi-write op counts too (its offset is known: from its ack or from a poll that
    read it without committing): the transaction stage then learns it is invisible, and
    reports it lost if another of its writes proves the commit.
    """
    if st.consumed(i) or st.marked(i, CAND | DECIDED):
        return False
    if st.acked(i) and st.in_version_order(i):
        return True
    return st.multi_write(i) and st.occupied(i) and st.completed(i) and not st.acked(i)


def reads_reached(st: KeyState, hi: int, reader: int, committed: bool, deadline: int) -> None:
    """A poll by ``reader`` read up to offset ``hi``. If it committed and went further than any
    before, values that nobody consumed become candidates, judged at ``deadline`` (only
    committed polls count: an aborted transaction's reads consumed nothing).

    From the previous frontier ``lo`` itself: a poll read offset ``lo``, but where two values
    were acknowledged at one offset (an unclean election) the one it read may not be the
    one the slot holds, which is passed now."""
    lo = st.frontier
    if not committed or hi <= lo:
        return
    st.frontier = hi
    st.frontier_op = reader
    base = st.base
    start = lo - base if lo > base else 0
    end = hi - base if hi - base < len(st.flg) else len(st.flg)
    for i in range(start, end):
        if st.occupied(i) and _candidate(st, i):
            st.mark(i, CAND)
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
    off = rec.offset
    if (off is not None and lo <= off < hi and not rec.consumed()
            and not rec.marked(CAND | DECIDED) and rec.acked() and rec.in_version_order()):
        rec.mark(CAND)
        st.add_cand(deadline, off, reader)


def loose_sent_below_reads(st: KeyState, code: int, off: int, acked: bool,
                           deadline: int) -> None:
    """A send of ``code`` completed at ``off``: if it was acknowledged, conflicted with the
    offset's holder (it is loose) and lies at or below the readers' frontier (at it: the
    value the readers read there was another), a candidate at once."""
    if acked and off <= st.frontier and st.loose and code in st.loose:
        _loose_candidate(st, code, -1, st.frontier + 1, st.frontier_op, deadline)


def sent_below_reads(st: KeyState, i: int, deadline: int) -> None:
    """A send completed into slot ``i``: a candidate at once if readers already went past it."""
    if st.base + i < st.frontier and _candidate(st, i):
        st.mark(i, CAND)
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
    if st.loose:
        _loose_verdicts(st, off, reader, consumed, sink)
    if not (0 <= i < len(st.flg) and st.marked(i, CAND)):
        return  # the candidate was a loose value's
    st.decided(i)
    code = st.val[i]
    home = st.find(code)
    if st.consumed(i) or (home >= 0 and st.consumed(home - st.base)):
        return
    if code in consumed:  # consumed where it really is (its ack named another offset)
        return
    value, writer = st.value(code), st.writer(i)
    if st.in_version_order(i) and st.acked(i):
        report(sink, st.key, value, off, writer, reader, st.frontier)
    if st.multi_write(i):  # part of a multi-write op: the transaction stage judges its atomicity
        sink.facts.append(TxnFact("invisible", writer, st.key, value, off, st.outcome(i),
                                  st.max_time, reader, st.frontier))


def report(sink: Sink, key: Any, value: Any, offset: int | None, writer: int, reader: int,
           max_read: int) -> None:
    """The evidence record of a lost write: ``reader`` is the committed poll that read past
    the value, ``max-read-offset`` the highest offset polls had read then (both left out
    when not known: -1, from stage-2 state saved before they were kept)."""
    record = {"key": key, "value": value, "offset": offset, "writer": writer}
    if reader >= 0:
        record["reader"], record["max-read-offset"] = reader, max_read
    sink.anomaly(LOST_WRITE, record)


def _loose_verdicts(st: KeyState, off: int, reader: int, consumed: Consumed,
                    sink: Sink) -> None:
    """The pending loose values at ``off`` (see ``_loose_candidate``), decided together: a
    second candidate at one offset is rare (both values unread where readers passed)."""
    for code, rec in st.loose.items():
        if rec.offset != off or not rec.marked(CAND) or not (rec.acked()
                                                              and rec.in_version_order()):
            continue  # (a value displaced from a slot may carry the slot's candidacy)
        rec.decided()
        if unseen.read_ok_anywhere(st, code, consumed):
            continue
        report(sink, st.key, st.value(code), off, rec.writer, reader, st.frontier)
