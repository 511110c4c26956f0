"""Share groups through the monitor's per-key stage (``KeyFold``) without Spark: their verdicts'
deadlines become the key's timers, the monitor's share settings reach the fold, and the stage
gives the verdicts `kmon check` gives over the same history."""

from __future__ import annotations

from typing import Any

from kmon.checker.anomaly import (
    SHARE_CONCURRENT_DELIVERY,
    SHARE_LOST,
)
from kmon.history.events import event_of
from kmon.history.fragment import Fragment
from kmon.history.model import RELEASE, Op
from kmon.streaming.keyfold import ANOMALY, KeyFold, timer_to_keep
from tests.checker.test_share import History, K
from tests.unit.streaming.online import SECOND, settings

LOCK_AND_SKEW = 31 * SECOND  # the default share.lock and share.skew


def _frags(ops: list[Op]) -> list[Fragment]:
    """Every op's fragments as the monitor's event reader splits them (invokes included: a
    share poll or an ack may take effect from its invocation on)."""
    return [fr for op in ops for fr in event_of(op).frags]


def _timers_only(ops: list[Op], grace: int, step: int = SECOND // 2,
                 until: int = 120 * SECOND) -> list[tuple[int, dict[str, Any]]]:
    """The key's events in one micro-batch at watermark 0, then no more events: the
    watermark moves ``step`` a batch (other keys' events) and the key is woken only when it
    passes the key's timer, as Spark fires it. (watermark, anomaly row) of each verdict."""
    s = settings(grace=grace)
    kf = KeyFold("p", K, s)
    found = [(0, r) for r in kf.batch(_frags(ops), None, 0) if r["kind"] == ANOMALY]
    kf.timer_ms = timer_to_keep(None, kf.next_timer_ms(0), 0)
    wm = 0
    while wm < until and kf.timer_ms is not None:
        wm += step
        if kf.timer_ms * 1_000_000 > wm:
            continue
        kf = KeyFold.from_bytes("p", kf.to_bytes(), s)  # the state store's round trip
        found += [(wm, r) for r in kf.wake(wm) if r["kind"] == ANOMALY]
        kf.timer_ms = timer_to_keep(None, kf.next_timer_ms(wm), wm)
    return found


def test_a_share_lost_verdict_comes_when_its_timer_is_due() -> None:
    # 5 is passed over at 2.1 s: lost once that delivery is a lock and the skew old, and the
    # grace period behind the watermark. Only a timer can say so: no event comes after 2.1 s.
    h = History()
    h.write([4, 5, 6], 0)
    h.poll(1, 1, 1.1, [(4, 1)])
    h.poll(2, 2, 2.1, [(6, 1)])
    grace = 10 * SECOND  # the monitor's default
    due = int(2.1 * SECOND) + LOCK_AND_SKEW + grace
    found = _timers_only(h.ops, grace)
    assert [r["atype"] for _, r in found] == [SHARE_LOST]
    (wm, row), = found
    # at its deadline (the timer's millisecond and the next step of the watermark), not up to a
    # grace period later, when a timer set one grace period on happened to fire past it
    assert due <= wm < due + SECOND // 2 + 1_000_000, (wm - due) / SECOND
    assert row["decided"] == wm


def test_a_share_verdict_on_a_compacted_key_comes_from_its_timer() -> None:
    # 256 records (a whole chunk of the key's window), all delivered: the window is compacted
    # once the grace has passed, and no process is left to keep the key awake. Offset 255 was
    # delivered twice within one lock (p2 at 10 s, p1's lock runs to 31 s); p1's release at
    # 20 s touches the record, so its verdict is due at 20.1 s plus the grace.
    h = History()
    h.write(list(range(256)), 0)
    h.poll(1, 1, 1.1, [(o, 1) for o in range(256)])
    h.poll(2, 10, 10.1, [(255, 2)])
    h.ack(1, 20, 20.1, [(255, RELEASE)])
    grace = SECOND
    found = _timers_only(h.ops, grace)
    assert [(r["atype"]) for _, r in found] == [SHARE_CONCURRENT_DELIVERY]
    (wm, _), = found
    assert int(20.1 * SECOND) + grace <= wm < int(20.1 * SECOND) + grace + SECOND
