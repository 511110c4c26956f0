"""The version order of a key, and the two anomalies its construction reveals.

Every completed poll (ok, info or fail: a poller's records are supposed to be real whatever its
transaction's fate) and every send whose ``ok`` completion reported an offset places a value at
an offset. Sends that failed or whose outcome is unknown only record who wrote what, where:
their values enter the order once some poll reads them.

- ``inconsistent-offsets``: two different values in the version order at one offset.
  Example: ``ok send k [3 a]``, then ``ok poll {k [[3 b]]}``: offset 3 holds both a and b.
- ``duplicate``: one value in the version order at two offsets (values are unique per key).
  Example (Bufstream #3, spurious zero offsets): ``ok send 6 [0 26]``; pollers read 26 at 25.

Records: ``{"key", "offset", "values"}`` and ``{"key", "value", "offsets", "count"}``.
"""

from __future__ import annotations

from kmon.checker.anomaly import DUPLICATE, INCONSISTENT_OFFSETS
from kmon.checker.fragment import Fragment
from kmon.checker.poll_skip import skip_from_gap
from kmon.checker.sink import Sink
from kmon.checker.state import (
    GAP,
    MULTI,
    OCCUPIED,
    READ,
    SENT,
    VER,
    W_ANY,
    W_OK,
    KeyState,
)

_WRITER_BITS = W_ANY | MULTI


def inconsistent(st: KeyState, off: int, held: int, new: int, sink: Sink) -> None:
    sink.anomaly(
        INCONSISTENT_OFFSETS,
        {"key": st.key, "offset": off, "values": [st.value(held), st.value(new)]},
    )


def duplicate(st: KeyState, code: int, first: int, second: int, sink: Sink) -> None:
    offsets = sorted((first, second))
    sink.anomaly(
        DUPLICATE, {"key": st.key, "value": st.value(code), "offsets": offsets, "count": 2}
    )


def _fill(st: KeyState, i: int, code: int, flags: int, writer: int, ack: int) -> None:
    st.val[i] = code
    st.flg[i] = flags
    st.set_writer(i, writer)
    st.atime[i] = 0
    if ack > 0:
        st.set_ack(i, ack)


def _displace(st: KeyState, i: int) -> None:
    """Move the (not yet visible) value out of slot ``i`` so a visible one can take it."""
    ack = st.ack_ns(i)
    st.loose[st.val[i]] = [st.base + i, st.flg[i], st.writer(i), max(ack, 0), st.max_time]


def place_read(st: KeyState, off: int, code: int, fr: Fragment, sink: Sink) -> int:
    """A poll read ``code`` at ``off``. Returns the slot, or -1 if ``off`` was compacted."""
    i = st.slot(off)
    if i < 0:
        st.late += 1
        home = st.find(code)
        if home >= 0:
            st.flg[home - st.base] |= READ
        return -1
    st.touch(i, fr.time)
    f = st.flg[i]
    if f & OCCUPIED:
        held = st.val[i]
        if held == code:
            if not f & READ:
                _first_read(st, st.ack_ns(i), fr.time, sink)
            st.flg[i] = f | VER | READ
            return i
        if f & VER:
            _conflicting_read(st, i, off, code, fr, sink)
            return i
        _displace(st, i)
    elif f & GAP:
        skip_from_gap(st, i, code, sink)
    _settle_read(st, i, off, code, fr.time, sink)
    return i


def _conflicting_read(
    st: KeyState, i: int, off: int, code: int, fr: Fragment, sink: Sink
) -> None:
    rec = st.loose.get(code)
    if rec is not None and rec[0] == off:
        rec[1] |= VER | READ  # this conflict was already reported
        return
    inconsistent(st, off, st.val[i], code, sink)
    home = st.find(code)
    if home >= 0:
        st.flg[home - st.base] |= READ
        if st.flg[home - st.base] & VER:
            duplicate(st, code, home, off, sink)
    flags, writer, ack = (rec[1], rec[2], rec[3]) if rec is not None else (0, -1, 0)
    st.loose[code] = [off, flags | VER | READ, writer, ack, fr.time]


def _first_read(st: KeyState, ack: int, t: int, sink: Sink) -> None:
    if ack > 0:
        sink.e2e.append((st.key, max(0, t - ack)))


def _settle_read(st: KeyState, i: int, off: int, code: int, t: int, sink: Sink) -> None:
    """Put a freshly read value into empty slot ``i``, inheriting what we know of its writer."""
    home = st.find(code)
    if home >= 0:  # already held at another offset
        j = home - st.base
        if st.flg[j] & VER:
            duplicate(st, code, home, off, sink)
        if not st.flg[j] & READ:
            _first_read(st, st.ack_ns(j), t, sink)
        st.flg[j] |= READ
        _fill(st, i, code, VER | READ | (st.flg[j] & _WRITER_BITS), st.writer(j), 0)
        return
    rec = st.loose.get(code)
    if rec is not None and rec[0] is None:  # invoked, or completed without an offset
        del st.loose[code]
        _first_read(st, rec[3], t, sink)
        _fill(st, i, code, VER | READ | (rec[1] & (_WRITER_BITS | SENT)), rec[2], rec[3])
    elif rec is not None:  # displaced from a conflicting offset, now read here too
        rec[1] |= READ
        if rec[1] & VER:
            duplicate(st, code, rec[0], off, sink)
        _fill(st, i, code, VER | READ | (rec[1] & _WRITER_BITS), rec[2], 0)
    else:
        _fill(st, i, code, VER | READ, -1, 0)
    st.index_add(off, code)


def place_send(
    st: KeyState, off: int | None, code: int, wflags: int, fr: Fragment, sink: Sink
) -> int:
    """A send of ``code`` completed with outcome/MULTI bits ``wflags`` and offset ``off``.

    Returns the slot holding the value (-1 if none).
    """
    ok = bool(wflags & W_OK)
    ack = fr.time if ok else 0
    if off is None:
        return _send_without_offset(st, code, wflags, fr.op, ack, fr.time)
    i = st.slot(off)
    if i < 0:
        st.late += 1
        home = st.find(code)
        if home >= 0:
            _teach_writer(st, home - st.base, wflags, fr.op, ack)
            if ok and st.flg[home - st.base] & VER:
                duplicate(st, code, home, off, sink)
        return -1
    st.touch(i, fr.time)
    f = st.flg[i]
    if f & OCCUPIED:
        held = st.val[i]
        if held == code:
            _teach_writer(st, i, wflags | SENT | (VER if ok else 0), fr.op, ack)
            return i
        if not (ok and not f & VER):
            _conflicting_send(st, i, off, code, wflags, fr, sink)
            return i
        _displace(st, i)
    elif f & GAP and ok:
        skip_from_gap(st, i, code, sink)
    return _settle_send(st, i, off, code, wflags, fr, sink)


def _teach_writer(st: KeyState, i: int, wflags: int, writer: int, ack: int) -> None:
    st.flg[i] = (st.flg[i] & ~W_ANY) | wflags
    st.set_writer(i, writer)
    if ack and not st.atime[i]:
        st.set_ack(i, ack)


def _send_without_offset(
    st: KeyState, code: int, wflags: int, writer: int, ack: int, t: int
) -> int:
    home = st.find(code)
    if home >= 0:
        _teach_writer(st, home - st.base, wflags, writer, ack)
        return home - st.base
    rec = st.loose.get(code)
    if rec is None:
        st.loose[code] = [None, wflags, writer, ack, t]
    else:
        rec[1] = (rec[1] & ~W_ANY) | wflags
        rec[2], rec[3], rec[4] = writer, ack, t
    return -1


def _conflicting_send(
    st: KeyState, i: int, off: int, code: int, wflags: int, fr: Fragment, sink: Sink
) -> None:
    ok = wflags & W_OK
    rec = st.loose.get(code)
    if ok and not (rec is not None and rec[0] == off and rec[1] & VER):
        inconsistent(st, off, st.val[i], code, sink)
    flags = wflags | SENT | (VER if ok else 0) | (rec[1] & READ if rec is not None else 0)
    st.loose[code] = [off, flags, fr.op, fr.time if ok else 0, fr.time]


def _settle_send(
    st: KeyState, i: int, off: int, code: int, wflags: int, fr: Fragment, sink: Sink
) -> int:
    ok = wflags & W_OK
    flags = wflags | SENT | (VER if ok else 0)
    ack = fr.time if ok else 0
    home = st.find(code)
    if home >= 0:  # read (or sent) at another offset before
        j = home - st.base
        if ok and st.flg[j] & VER:
            duplicate(st, code, home, off, sink)
        _teach_writer(st, j, wflags, fr.op, 0)
        _fill(st, i, code, flags | (st.flg[j] & READ), fr.op, ack)
        return i
    rec = st.loose.pop(code, None)
    if rec is not None and rec[0] is not None:  # displaced elsewhere: keep that record
        st.loose[code] = rec
        rec = None
    _fill(st, i, code, flags | (rec[1] & READ if rec is not None else 0), fr.op, ack)
    st.index_add(off, code)
    return i
