"""The version order of a key, and the two anomalies its construction reveals.

Every completed poll (ok, info or fail: a poller's records are supposed to be real whatever its
transaction's fate) and every send whose ``ok`` completion reported an offset places a value at
an offset. Sends that failed or whose outcome is unknown only record who wrote what, where:
their values enter the order once some poll reads them.

Reads by ok and info ops are marked apart (``READ_OK``): only they count as consumed, for lost
writes and unseen values. An info op's reads are what its client returned (kmon's probes record
them; Jepsen's info ops carry none): a transaction that timed out at its commit had read the
value all the same, and with read_committed only committed values are read. (Chaos found it:
such a transaction's offset commit landed, its next consumer started past the value, and the
value, read once, was reported lost.) A failed op did not happen: its reads do not count.
Offsets an ok or info op sent or read are *revealed* (realtime lag).

- ``inconsistent-offsets``: two different values in the version order at one offset.
  Example: ``ok send k [3 a]``, then ``ok poll {k [[3 b]]}``: offset 3 holds both a and b.
- ``duplicate``: one value in the version order at two offsets (values are unique per key).
  Example (Bufstream #3, spurious zero offsets): ``ok send 6 [0 26]``; pollers read 26 at 25.

Records: ``{"key", "offset", "values"}`` and ``{"key", "value", "offsets", "count"}``.
"""

from __future__ import annotations

from typing import Final

from kmon.checker.anomaly import DUPLICATE, INCONSISTENT_OFFSETS
from kmon.checker.flags import (
    CAND,
    GAP,
    MULTI,
    OCCUPIED,
    READ,
    READ_OK,
    SENT,
    VER,
    W_ANY,
    W_FAIL,
    W_OK,
)
from kmon.checker.poll_skip import skip_from_gap
from kmon.checker.records import Loose
from kmon.checker.sink import Sink
from kmon.checker.state import KeyState
from kmon.history.fragment import Fragment

_WRITER_BITS: Final = W_ANY | MULTI
READ_BITS: Final = READ | READ_OK


def inconsistent(st: KeyState, off: int, held: int, new: int, sink: Sink) -> None:
    values = sorted((st.value(held), st.value(new)), key=_token)
    sink.anomaly(INCONSISTENT_OFFSETS, {"key": st.key, "offset": off, "values": values})


def _token(x: object) -> tuple[int, object]:
    return (0, x) if isinstance(x, int) else (1, str(x))


def duplicate(st: KeyState, code: int, first: int, second: int, sink: Sink) -> None:
    offsets = sorted((first, second))
    sink.anomaly(
        DUPLICATE, {"key": st.key, "value": st.value(code), "offsets": offsets, "count": 2}
    )


def read_bits(fr: Fragment) -> int:
    """What a read by this fragment's op marks: read, and consumed unless the op failed."""
    return READ if fr.type == "fail" else READ | READ_OK


def _fill(st: KeyState, i: int, code: int, flags: int, writer: int, revealed: int) -> None:
    st.val[i] = code
    st.flg[i] = flags
    st.set_writer(i, writer)
    st.set_ack(i, 0)
    if revealed > 0:
        st.reveal(i, revealed)


def _displace(st: KeyState, i: int) -> None:
    """Move the (not yet visible) value out of slot ``i`` so a visible one can take it."""
    revealed = st.revealed_ns(i)
    # (a pending absence verdict stays with the slot, for the value that takes it)
    st.loose[st.val[i]] = Loose(st.base + i, st.flg[i] & ~CAND, st.writer(i), max(revealed, 0),
                                st.max_time)


def place_read(st: KeyState, off: int, code: int, fr: Fragment, sink: Sink) -> int:
    """A poll read ``code`` at ``off``. Returns the slot, or -1 if ``off`` was compacted."""
    rb = read_bits(fr)
    i = st.slot(off)
    if i < 0:
        st.late += 1
        home = st.find(code)
        if home >= 0:
            st.flg[home - st.base] |= rb
        return -1
    st.touch(i, fr.time)
    f = st.flg[i]
    if f & OCCUPIED:
        held = st.val[i]
        if held == code:
            if not f & READ:
                _first_read(st, st.revealed_ns(i), fr.time, sink)
            st.flg[i] = f | VER | rb
            if fr.type != "fail":
                st.reveal(i, fr.time)
            return i
        if f & VER:
            _conflicting_read(st, i, off, code, fr, rb, sink)
            return i
        _displace(st, i)
    elif f & GAP:
        skip_from_gap(st, i, code, sink)
    _settle_read(st, i, off, code, fr.time, rb, sink)
    if fr.type != "fail":
        st.reveal(i, fr.time)
    return i


def _conflicting_read(
    st: KeyState, i: int, off: int, code: int, fr: Fragment, rb: int, sink: Sink
) -> None:
    rec = st.loose.get(code)
    if rec is not None and rec.offset == off:
        rec.flags |= VER | rb  # this conflict was already reported
        return
    inconsistent(st, off, st.val[i], code, sink)
    home = st.find(code)
    if home >= 0:
        st.flg[home - st.base] |= rb
        if st.flg[home - st.base] & VER:
            duplicate(st, code, home, off, sink)
    flags, writer, revealed = (rec.flags, rec.writer, rec.ack_time) if rec is not None else (
        0, -1, 0)
    st.loose[code] = Loose(off, flags | VER | rb, writer, revealed, fr.time)


def _first_read(st: KeyState, revealed: int, t: int, sink: Sink) -> None:
    """End-to-end delay: from when the value was first known to exist to its first read."""
    if revealed > 0:
        sink.e2e.append((st.key, max(0, t - revealed)))


def _settle_read(
    st: KeyState, i: int, off: int, code: int, t: int, rb: int, sink: Sink
) -> None:
    """Put a freshly read value into empty slot ``i``, inheriting what we know of its writer."""
    home = st.find(code)
    if home >= 0:  # already held at another offset
        j = home - st.base
        if st.flg[j] & VER:
            duplicate(st, code, home, off, sink)
        if not st.flg[j] & READ:
            _first_read(st, st.revealed_ns(j), t, sink)
        st.flg[j] |= rb
        st.twins += 1  # the value now sits at two slots: absence verdicts must look for both
        _fill(st, i, code, VER | rb | (st.flg[j] & _WRITER_BITS), st.writer(j), 0)
        return
    rec = st.loose.get(code)
    if rec is not None and rec.offset is None:  # completed without an offset
        del st.loose[code]
        _first_read(st, rec.ack_time, t, sink)
        flags = VER | rb | (rec.flags & (_WRITER_BITS | SENT | READ_BITS))
        _fill(st, i, code, flags, rec.writer, rec.ack_time)
    elif rec is not None and rec.offset is not None:  # displaced, now read here too
        rec.flags |= rb
        if rec.flags & VER:
            duplicate(st, code, rec.offset, off, sink)
        _fill(st, i, code, VER | rb | (rec.flags & _WRITER_BITS), rec.writer, 0)
    else:
        _fill(st, i, code, VER | rb, -1, 0)
    st.index_add(off, code)


def place_send(
    st: KeyState, off: int | None, code: int, wflags: int, fr: Fragment, sink: Sink
) -> int:
    """A send of ``code`` completed with outcome/MULTI bits ``wflags`` and offset ``off``.

    Returns the slot holding the value (-1 if none).
    """
    ok = bool(wflags & W_OK)
    revealed = 0 if wflags & W_FAIL else fr.time  # ok and info completions reveal offsets
    if off is None:
        return _send_without_offset(st, code, wflags, fr.op, fr.time if ok else 0, fr.time)
    i = st.slot(off)
    if i < 0:
        st.late += 1
        home = st.find(code)
        if home >= 0:
            _teach_writer(st, home - st.base, wflags, fr.op, 0)
            if ok and st.flg[home - st.base] & VER:
                duplicate(st, code, home, off, sink)
        return -1
    st.touch(i, fr.time)
    f = st.flg[i]
    if f & OCCUPIED:
        held = st.val[i]
        if held == code:
            _teach_writer(st, i, wflags | SENT | (VER if ok else 0), fr.op, revealed)
            return i
        if not (ok and not f & VER):
            _conflicting_send(st, i, off, code, wflags, fr, sink)
            return i
        _displace(st, i)
    elif f & GAP and ok:
        skip_from_gap(st, i, code, sink)
    return _settle_send(st, i, off, code, wflags, fr, revealed, sink)


def _teach_writer(st: KeyState, i: int, wflags: int, writer: int, revealed: int) -> None:
    st.flg[i] = (st.flg[i] & ~W_ANY) | wflags
    st.set_writer(i, writer)
    if revealed > 0:
        st.reveal(i, revealed)


def _send_without_offset(
    st: KeyState, code: int, wflags: int, writer: int, ack: int, t: int
) -> int:
    home = st.find(code)
    if home >= 0:
        _teach_writer(st, home - st.base, wflags, writer, 0)
        return home - st.base
    rec = st.loose.get(code)
    if rec is None:
        st.loose[code] = Loose(None, wflags, writer, ack, t)
    else:
        rec.flags = (rec.flags & ~W_ANY) | wflags
        rec.writer, rec.ack_time, rec.time = writer, ack, t
    return -1


def _conflicting_send(
    st: KeyState, i: int, off: int, code: int, wflags: int, fr: Fragment, sink: Sink
) -> None:
    ok = wflags & W_OK
    rec = st.loose.get(code)
    if ok and not (rec is not None and rec.offset == off and rec.flags & VER):
        inconsistent(st, off, st.val[i], code, sink)
    read = rec.flags & READ_BITS if rec is not None else 0
    home = st.find(code)
    if home >= 0:
        # Polled at its real offset before this ack claimed another (spurious zero offsets
        # with the poll first): the same duplicate, and the same reads, as in the other order.
        j = home - st.base
        if ok and st.flg[j] & VER:
            duplicate(st, code, home, off, sink)
        _teach_writer(st, j, wflags, fr.op, 0)
        read |= st.flg[j] & READ_BITS
    flags = wflags | SENT | (VER if ok else 0) | read
    st.loose[code] = Loose(off, flags, fr.op, fr.time if ok else 0, fr.time)


def _settle_send(
    st: KeyState, i: int, off: int, code: int, wflags: int, fr: Fragment, revealed: int,
    sink: Sink,
) -> int:
    ok = wflags & W_OK
    flags = wflags | SENT | (VER if ok else 0)
    home = st.find(code)
    if home >= 0:  # read (or sent) at another offset before
        j = home - st.base
        if ok and st.flg[j] & VER:
            duplicate(st, code, home, off, sink)
        _teach_writer(st, j, wflags, fr.op, 0)
        st.twins += 1  # the value now sits at two slots: absence verdicts must look for both
        _fill(st, i, code, flags | (st.flg[j] & READ_BITS), fr.op, revealed)
        return i
    rec = st.loose.pop(code, None)
    if rec is not None and rec.offset is not None:  # displaced elsewhere: keep that record
        st.loose[code] = rec
        rec = None
    _fill(st, i, code, flags | (rec.flags & READ_BITS if rec is not None else 0), fr.op, revealed)
    st.index_add(off, code)
    return i
