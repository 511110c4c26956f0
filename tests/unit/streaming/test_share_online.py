"""Share groups through the monitor's per-key stage (``KeyFold``) without Spark: their verdicts'
deadlines become the key's timers, the monitor's share settings reach the fold, and the stage
gives the verdicts `kmon check` gives over the same history."""

from __future__ import annotations

from typing import Any

import pytest

from kmon.checker import CheckConfig, Checker
from kmon.checker.anomaly import (
    SHARE_ANOMALY_TYPES,
    SHARE_CONCURRENT_DELIVERY,
    SHARE_DELIVERY_COUNT,
    SHARE_LOST,
    Anomaly,
)
from kmon.checker.report import merge_anomalies
from kmon.history.events import event_of
from kmon.history.fragment import Fragment
from kmon.history.model import ACCEPT, REJECT, RELEASE, Op
from kmon.streaming.keyfold import ANOMALY, FoldSettings, KeyFold, timer_to_keep
from tests.checker.test_share import History, K, simulate
from tests.unit.streaming.online import SECOND, run_online, settings

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


# -- online and offline agree ----------------------------------------------------------------


def _examples() -> dict[str, list[Op]]:
    """Each share anomaly and its healthy twins (as in tests/checker/test_share.py)."""
    out: dict[str, list[Op]] = {}

    def new(name: str) -> History:
        h = History()
        out[name] = h.ops
        return h

    h = new("healthy")
    h.write([0, 1, 2], 0)
    h.poll(1, 1, 1.1, [(0, 1), (1, 1)])
    h.poll(2, 1.2, 1.3, [(2, 1)])
    h.ack(1, 2, 2.1, [(0, ACCEPT), (1, RELEASE)])
    h.ack(2, 2.2, 2.3, [(2, REJECT)])
    h.poll(2, 3, 3.1, [(1, 2)])
    h.ack(2, 4, 4.1, [(1, ACCEPT)])
    h.poll(1, 40, 40.1, [])
    for name, late, blind in (("lost", 40, False), ("lost-early", None, False),
                              ("lost-blind", 40, True)):
        h = new(name)
        h.write([4, 5, 6], 0)
        h.poll(1, 1, 1.1, [(4, 1)])
        if blind:
            h.poll(3, 1.5, 1.6, None, ty="info")
        h.poll(2, 2, 2.1, [(6, 1)])
        if late is not None:
            h.poll(1, late, late + 0.1, [])
    h = new("lost-below")
    h.write([4, 5, 6], 0)
    h.poll(1, 1, 1.1, [(6, 1)])
    h.poll(1, 40, 40.1, [])
    for name, ty in (("double-accept", "ok"), ("double-accept-twin", "fail")):
        h = new(name)
        h.write([0], 0)
        h.poll(1, 1, 1.1, [(0, 1)])
        h.poll(2, 40, 40.1, [(0, 2)])
        h.ack(2, 41, 41.1, [(0, ACCEPT)])
        h.ack(1, 42, 42.1, [(0, ACCEPT)], ty=ty)
    for outcome in (ACCEPT, REJECT):
        h = new(f"redelivered-{outcome}")
        h.write([0], 0)
        h.poll(1, 1, 1.1, [(0, 1)])
        h.ack(1, 2, 2.1, [(0, outcome)])
        h.poll(2, 40, 40.1, [(0, 2)])
    h = new("redelivered-twin")
    h.write([0], 0)
    h.poll(1, 1, 1.1, [(0, 1)])
    h.ack(1, 2, 2.1, [(0, RELEASE)])
    h.poll(2, 3, 3.1, [(0, 2)])
    h.ack(2, 4, 4.1, [(0, ACCEPT)], ty="fail")
    h.poll(3, 40, 40.1, [(0, 3)])
    for name, second, release in (("concurrent", 10, False), ("concurrent-late", 31, False),
                                  ("concurrent-released", 10, True)):
        h = new(name)
        h.write([0], 0)
        h.poll(1, 1, 1.1, [(0, 1)])
        if release:
            h.ack(1, 5, 5.1, [(0, RELEASE)])
        h.poll(2, second, second + 0.1, [(0, 2)])
    for name, first, again in (("count-same", 2, 2), ("count-gap", 1, 3)):
        h = new(name)
        h.write([0], 0)
        h.poll(1, 1, 1.1, [(0, first)])
        h.ack(1, 2, 2.1, [(0, RELEASE)])
        h.poll(2, 3, 3.1, [(0, again)])
    h = new("count-beyond")
    h.write([0], 0)
    h.poll(1, 1, 1.1, [(0, 6)])
    for bug in ("lose", "concurrent", "count", "redeliver", "double", None):
        for seed in range(4):
            out[f"simulated-{bug}-{seed}"] = simulate(seed, bug)[0]
    return out


EXAMPLES = _examples()
GRACE = 5 * SECOND


def _online(ops: list[Op], batch: int, s: FoldSettings) -> dict[str, list[dict]]:
    """The monitor's per-key path (``KeyFold``, state through bytes between micro-batches), the
    watermark ending at the history's last event plus the grace, as `kmon check` ends it."""
    end = max(op.time for op in ops) + GRACE
    evidence = run_online(ops, batch=batch, grace=GRACE, end=end, s=s)["evidence"]
    return merge_anomalies(Anomaly(e["anomaly"], e["record"]) for e in evidence
                           if e["anomaly"] != "unseen")


def _counts(errors: dict[str, list[dict]]) -> dict[str, int]:
    return {t: len(recs) for t, recs in errors.items()}


@pytest.mark.parametrize("batch", [1, 3, 1000])
def test_the_monitor_and_kmon_check_agree_on_share_histories(batch: int) -> None:
    found: set[str] = set()
    for name, ops in EXAMPLES.items():
        offline = Checker(CheckConfig(cycles=False)).run(ops).errors
        online = _online(ops, batch, settings(grace=GRACE))
        assert _counts(online) == _counts(offline), name
        assert online == offline, name
        found.update(offline)
    assert set(SHARE_ANOMALY_TYPES) <= found  # every share anomaly was compared
    assert not Checker(CheckConfig(cycles=False)).run(EXAMPLES["healthy"]).errors


@pytest.mark.parametrize(("name", "lock", "limit", "expected"), [
    ("concurrent", 30, 5, {SHARE_CONCURRENT_DELIVERY}),
    ("concurrent", 5, 5, set()),  # a 5 s lock had expired at 10 s
    ("count-gap", 30, 5, set()),
    ("count-gap", 30, 2, {SHARE_DELIVERY_COUNT}),  # 3 is past a limit of 2
    ("lost", 30, 5, {SHARE_LOST}),
])
def test_they_agree_under_the_groups_settings(name: str, lock: int, limit: int,
                                              expected: set[str]) -> None:
    ops = EXAMPLES[name]
    offline = Checker(CheckConfig(cycles=False, share_lock_ns=lock * SECOND,
                                  share_delivery_limit=limit)).run(ops).errors
    s = settings(grace=GRACE, share_lock_ns=lock * SECOND, share_delivery_limit=limit)
    assert set(offline) == expected
    assert _online(ops, 3, s) == offline
