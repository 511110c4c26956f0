"""Unseen values: acknowledged by the cluster, never read by a committed (ok) poll (yet).

Not an error by itself: the tail of a log is always briefly unseen, and a consumer may simply be
behind. Offline, ``kmon check`` reports the values still unseen at the end of the history, per
key. Online, a value unseen for longer than the unseen grace period gets one ``unseen`` verdict
(evidence for on-call), and the monitor exports counts as gauges.
Example: ``ok send k [4 x]`` and no poll of k ever returns x.
"""

from __future__ import annotations

from typing import Any

from kmon.checker.flags import UNSEEN_DONE
from kmon.checker.records import Loose
from kmon.checker.sink import Sink
from kmon.checker.state import INF, Consumed, KeyState


def _waiting(st: KeyState, i: int) -> bool:
    """Slot ``i`` holds an acknowledged value not consumed and not given its verdict yet."""
    return st.acked_unread(i) and not st.marked(i, UNSEEN_DONE)


def _loose_waiting(rec: Loose) -> bool:
    return rec.acked() and not rec.consumed() and not rec.marked(UNSEEN_DONE)


def unseen_values(st: KeyState) -> list[tuple[Any, int | None]]:
    """(value, offset) of every acknowledged value not read, in offset order."""
    out: list[tuple[Any, int | None]] = []
    seen: set[int] = set()
    val, base = st.val, st.base
    consumed = Consumed(st)
    for i in range(len(val)):
        if st.acked_unread(i) and val[i] not in seen and st.find(val[i]) == base + i:
            if read_ok_anywhere(st, val[i], consumed):
                continue
            seen.add(val[i])
            out.append((st.value(val[i]), base + i))
    for code, rec in st.loose.items():
        if rec.acked() and not read_ok_anywhere(st, code, consumed) and code not in seen:
            out.append((st.value(code), rec.offset))
    return out


def read_ok_anywhere(st: KeyState, code: int, consumed: Consumed) -> bool:
    """Whether a committed poll consumed the value somewhere: at a conflicting offset (its
    loose record), at its home slot (a committed poll after an uncommitted one reads it where
    it really is, which a loose record does not hear of), or at any other slot."""
    rec = st.loose.get(code) if st.loose else None
    if rec is not None and rec.consumed():
        return True
    home = st.find(code)
    j = home - st.base
    if home >= 0 and 0 <= j < len(st.flg) and st.consumed(j):
        return True
    return code in consumed


def unseen_count(st: KeyState) -> int:
    return len(unseen_values(st)) + st.unseen_decided


def decide(st: KeyState, watermark: int, grace: int, sink: Sink) -> None:
    """Give one ``unseen`` verdict to values acknowledged more than ``grace`` ago, still unread."""
    horizon = watermark - grace
    limit = st.units(horizon)
    start = st.unseen_from - st.base if st.unseen_from > st.base else 0
    settled = True  # everything scanned so far is read, judged, or not acknowledged
    consumed = Consumed(st)
    for i in range(start, len(st.flg)):
        if _waiting(st, i):
            if 0 < st.ack(i) <= limit:
                st.mark(i, UNSEEN_DONE)
                if read_ok_anywhere(st, st.val[i], consumed):
                    continue
                sink.unseen.append((st.key, st.value(st.val[i]), st.base + i,
                                    st.revealed_ns(i)))
            elif settled:
                settled = False
                st.unseen_from = st.base + i
    if settled:
        st.unseen_from = st.base + len(st.flg)
    for code, rec in st.loose.items():  # acknowledged without an offset
        if (_loose_waiting(rec) and 0 < rec.ack_time <= horizon
                and not read_ok_anywhere(st, code, consumed)):
            rec.mark(UNSEEN_DONE)
            sink.unseen.append((st.key, st.value(code), rec.offset, rec.ack_time))


def next_deadline(st: KeyState, grace: int) -> int:
    """When ``decide`` next has a verdict to give (INF: none pending): the earliest reveal of
    an acknowledged, unread value not judged yet, plus ``grace``."""
    due = INF
    for i in range(max(0, st.unseen_from - st.base), len(st.flg)):
        if _waiting(st, i):
            t = st.revealed_ns(i)
            if t >= 0 and t + grace < due:
                due = t + grace
    for rec in st.loose.values():
        if _loose_waiting(rec) and rec.ack_time and rec.ack_time + grace < due:
            due = rec.ack_time + grace
    return due
