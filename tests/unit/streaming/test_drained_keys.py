"""Keys that drained (settled, then no events for ``metrics.drained.after``) leave the gauges and
the zero series; counted anomaly series stay. Counted: 1,000 keys rotated through the driver."""

from __future__ import annotations

from typing import Any

from kmon.streaming.keyfold import STATS, Saved
from kmon.streaming.metrics import MonitorMetrics, registry_with
from kmon.streaming.outputs import KEYS
from kmon.streaming.rotation import Clock, outputs, rotate, stats
from kmon.streaming.state_pages import PageWrites

HOUR = 3600.0


def test_a_settled_key_is_dropped_after_the_idle_time_and_comes_back_with_events() -> None:
    clock = Clock()
    out = outputs(clock, HOUR)
    m = out.metrics
    out.handle(KEYS, 0, [stats(1, settled=False), stats(2, settled=False)])
    out.handle(KEYS, 1, [stats(1, settled=True)])  # key 1 has nothing left to judge
    clock.t += HOUR - 1
    out.handle(KEYS, 2, [stats(2, settled=False)])
    assert _gauge(m, 1) == 1  # not yet
    clock.t += 1
    out.handle(KEYS, 3, [stats(2, settled=False)])
    assert _gauge(m, 1) is None and _gauge(m, 2) == 1
    assert _zero(m, 1) is None and _zero(m, 2) == 0
    assert _e2e(m, 1) is None and _e2e(m, 2) == 3
    assert "p/1" not in out.key_state_bytes
    out.handle(KEYS, 4, [stats(1, settled=False)])  # the probe writes to it again
    assert _gauge(m, 1) == 1 and _zero(m, 1) == 0


def test_an_unsettled_key_is_never_dropped_however_quiet() -> None:
    clock = Clock()
    out = outputs(clock, HOUR)
    out.handle(KEYS, 0, [stats(1, settled=False)])
    clock.t += 100 * HOUR
    out.handle(KEYS, 1, [])
    assert _gauge(out.metrics, 1) == 1


def test_a_drained_key_keeps_its_counted_anomalies_without_zero_series() -> None:
    clock = Clock()
    out = outputs(clock, HOUR)
    m = out.metrics
    out.handle(KEYS, 0, [stats(1, settled=True)])
    m.anomaly("lost-write", "probe-1", "0", 0.5, broker="1")
    m.unseen_verdict("probe-1", "0", broker="1")
    clock.t += HOUR
    out.handle(KEYS, 1, [])
    labels = {"cluster": "local", "topic": "probe-1", "partition": "0", "broker": "1"}
    reg = registry_with(m)
    assert _gauge(m, 1) is None
    assert reg.get_sample_value("kmon_anomalies_total", {**labels, "anomaly": "G1a"}) is None
    assert reg.get_sample_value("kmon_anomalies_total", {**labels, "anomaly": "lost-write"}) == 1
    assert reg.get_sample_value("kmon_unseen_verdicts_total", labels) == 1
    assert reg.get_sample_value("kmon_anomaly_last_timestamp_seconds",
                                {**labels, "anomaly": "lost-write"}) is not None


def test_drain_state_survives_a_restart() -> None:
    clock = Clock()
    out = outputs(clock, HOUR)
    out.handle(KEYS, 0, [stats(1, settled=True), stats(2, settled=False)])
    out.metrics.anomaly("lost-write", "probe-1", "0", 0.5, broker="1")
    clock.t += HOUR
    out.handle(KEYS, 1, [])
    snap = out.metrics.snapshot()
    back = MonitorMetrics(clock=clock)
    back.restore(snap)
    assert _gauge(back, 1) is None and _zero(back, 1) is None  # no zeros come back
    assert back.settled == {} and _gauge(back, 2) == 1


def test_keys_of_a_snapshot_without_drain_state_count_as_settled_at_restore() -> None:
    clock = Clock()
    m = MonitorMetrics(clock=clock)
    m.key_stats("p/1", "probe-1", "0", 1, 0.0, broker="0")
    old = {k: v for k, v in m.snapshot().items() if k not in ("settled", "drained")}
    back = MonitorMetrics(clock=clock)
    back.restore(old)
    assert back.prune(HOUR, clock.t + HOUR) == ["p/1"]


# Samples per key on its own topic-partition: 2 gauges, the unseen-verdict zero, one zero per
# anomaly type, the end-to-end histogram (buckets, +Inf, sum, count).
def per_key_series() -> int:
    from kmon.checker.anomaly import ANOMALY_TYPES
    from kmon.streaming.metrics import E2E_BUCKETS

    return 3 + len(ANOMALY_TYPES) + len(E2E_BUCKETS) + 3


def test_series_stay_bounded_by_live_and_draining_keys_over_1000_keys(capsys) -> None:
    drained_after = 30 * 60.0  # 30 batches of a minute
    got, out = rotate(1000, live=20, drained_after_s=drained_after)
    never, _ = rotate(1000, live=20, drained_after_s=float("inf"), count=False)
    counted = 10 * 2  # 10 keys with an anomaly: its counter and its verdict time
    bound = per_key_series() * got.peak_keys + counted
    with capsys.disabled():
        print(f"\n1000 keys, 20 live, drained after {drained_after:.0f}s: peak {got.peak} "
              f"series ({got.peak_keys} live+draining keys, bound {bound}), after all drained "
              f"{got.final}; never pruned: {never.final}")
    assert got.peak <= bound
    # live 20 + draining 30 batches x 2 keys settling a batch: about 80 keys' worth at most
    assert got.peak_keys <= 20 + 2 * 31 + 2
    assert got.final == counted  # only the anomalies' series remain
    assert never.final >= per_key_series() * 1000  # without pruning: every key, forever
    assert not out.metrics.settled and not out.key_state_bytes and not out.metrics.e2e


def _gauge(m: MonitorMetrics, key: int) -> float | None:
    return registry_with(m).get_sample_value("kmon_unseen_values", {
        "cluster": "local", "topic": f"probe-{key}", "partition": "0", "broker": str(key % 3)})


def _zero(m: MonitorMetrics, key: int) -> float | None:
    return registry_with(m).get_sample_value("kmon_unseen_verdicts_total", {
        "cluster": "local", "topic": f"probe-{key}", "partition": "0", "broker": str(key % 3)})


def _e2e(m: MonitorMetrics, key: int) -> float | None:
    return registry_with(m).get_sample_value("kmon_end_to_end_delay_seconds_count", {
        "cluster": "local", "topic": f"probe-{key}", "broker": str(key % 3)})


class FakeState:
    def update(self, value: tuple[bytes]) -> None:
        self.value = value


class FakeHandle:
    def __init__(self) -> None:
        self.timers: set[int] = set()

    def getValueState(self, name: str, schema: Any) -> FakeState:  # Spark's names
        return FakeState()

    def getMapState(self, name: str, key_schema: Any, schema: Any) -> dict:
        return {}

    def registerTimer(self, ms: int) -> None:
        self.timers.add(ms)

    def deleteTimer(self, ms: int) -> None:
        self.timers.discard(ms)


class Folded:
    """A key fold whose next timer is ``nxt`` (None: settled)."""

    def __init__(self, nxt: int | None) -> None:
        self.timer_ms: int | None = None
        self.nxt = nxt
        self.pages: dict[int, bytes] = {}

    def next_timer_ms(self, watermark_ns: int) -> int | None:
        return self.nxt

    def to_parts(self, page_slots: int) -> Saved:
        return Saved(b"state", {}, PageWrites({}, []))


def test_the_processor_marks_a_key_settled_when_it_needs_no_timer() -> None:
    from kmon.streaming.keyfold import FoldSettings
    from kmon.streaming.processors import KeyFoldProcessor

    proc = KeyFoldProcessor(FoldSettings(grace_ns=1, unseen_grace_ns=None, e2e_buckets_ns=()))
    proc.init(FakeHandle())
    pending, done = [{"kind": STATS}], [{"kind": STATS}]
    proc._save(Folded(5_000), 1_000_000, pending)
    proc._save(Folded(None), 1_000_000, done)
    assert pending[0]["settled"] is False and done[0]["settled"] is True
    assert done[0]["state_bytes"] == len(b"state")
