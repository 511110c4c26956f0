"""Unseen values: acknowledged by the cluster, never read by a committed (ok) poll (yet).

Not an error by itself: the tail of a log is always briefly unseen, and a consumer may simply be
behind. Offline, ``kmon check`` reports the values still unseen at the end of the history, per
key. Online, a value unseen for longer than the unseen grace period gets one ``unseen`` verdict
(evidence for on-call), and the monitor exports counts as gauges.
Example: ``ok send k [4 x]`` and no poll of k ever returns x.
"""

from __future__ import annotations

from typing import Any

from kmon.checker.sink import Sink
from kmon.checker.state import OCCUPIED, READ_OK, UNSEEN_DONE, W_OK, Consumed, KeyState


def _acked_unread(f: int) -> bool:
    return bool(f & W_OK and f & OCCUPIED and not f & READ_OK)


def unseen_values(st: KeyState) -> list[tuple[Any, int | None]]:
    """(value, offset) of every acknowledged value not read, in offset order."""
    out: list[tuple[Any, int | None]] = []
    seen: set[int] = set()
    flg, val, base = st.flg, st.val, st.base
    consumed = Consumed(st)
    for i in range(len(flg)):
        f = flg[i]
        if _acked_unread(f) and val[i] not in seen and st.find(val[i]) == base + i:
            if read_ok_anywhere(st, val[i], consumed):
                continue
            seen.add(val[i])
            out.append((st.value(val[i]), base + i))
    for code, rec in st.loose.items():
        if rec[1] & W_OK and not read_ok_anywhere(st, code, consumed) and code not in seen:
            out.append((st.value(code), rec[0]))
    return out


def read_ok_anywhere(st: KeyState, code: int, consumed: Consumed) -> bool:
    """Whether a committed poll consumed the value somewhere: at a conflicting offset (its
    loose record), at its home slot (a committed poll after an uncommitted one reads it where
    it really is, which a loose record does not hear of), or at any other slot."""
    rec = st.loose.get(code) if st.loose else None
    if rec is not None and rec[1] & READ_OK:
        return True
    home = st.find(code)
    j = home - st.base
    if home >= 0 and 0 <= j < len(st.flg) and st.flg[j] & READ_OK:
        return True
    return code in consumed


def unseen_count(st: KeyState) -> int:
    return len(unseen_values(st)) + st.unseen_decided


def decide(st: KeyState, watermark: int, grace: int, sink: Sink) -> None:
    """Give one ``unseen`` verdict to values acknowledged more than ``grace`` ago, still unread."""
    flg = st.flg
    horizon = watermark - grace
    limit = st.units(horizon)
    start = st.unseen_from - st.base if st.unseen_from > st.base else 0
    settled = True  # everything scanned so far is read, judged, or not acknowledged
    consumed = Consumed(st)
    for i in range(start, len(flg)):
        f = flg[i]
        if _acked_unread(f) and not f & UNSEEN_DONE:
            if 0 < st.ack(i) <= limit:
                flg[i] = f | UNSEEN_DONE
                if read_ok_anywhere(st, st.val[i], consumed):
                    continue
                sink.unseen.append((st.key, st.value(st.val[i]), st.base + i,
                                    st.revealed_ns(i)))
            elif settled:
                settled = False
                st.unseen_from = st.base + i
    if settled:
        st.unseen_from = st.base + len(flg)
    for code, rec in st.loose.items():  # acknowledged without an offset
        f = rec[1]
        if (f & W_OK and not f & UNSEEN_DONE and 0 < rec[3] <= horizon
                and not read_ok_anywhere(st, code, consumed)):
            rec[1] = f | UNSEEN_DONE
            sink.unseen.append((st.key, st.value(code), rec[0], rec[3]))
