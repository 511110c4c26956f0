"""Keys rotated through the monitor's driver-side outputs, as the monitor would feed them:
stats rows while a key is live, one settled row when its probe retires it, then nothing.

Shared by the test that counts the metric series drained keys leave behind
(tests/unit/streaming/test_drained_keys.py) and by ``bench/bench_series.py``, which prints the
same figures at other sizes. No Spark and no Kafka: a clock under the caller's control and a
producer that delivers nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kmon.streaming.keyfold import STATS
from kmon.streaming.metrics import MonitorMetrics, registry_with
from kmon.streaming.outputs import KEYS, Outputs


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


class NullProducer:
    def produce(self, topic: str, value: Any, key: Any, headers: Any, on_delivery: Any) -> None:
        on_delivery(None, None)

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        return 0


def stats(key: int, *, settled: bool, e2e: bool = True) -> dict[str, Any]:
    """A stats row of key ``key``, alone on its probe topic ``probe-<key>``."""
    return {"kind": STATS, "probe": "p", "key": str(key), "topic": f"probe-{key}", "part": 0,
            "broker": key % 3, "unseen": 1, "lag": 5_000_000, "e2e_sum": 10_000_000,
            "e2e": [1] + [0] * 15 if e2e else None, "state_bytes": 100, "state_written": 100,
            "settled": settled}


def keyed_series(m: MonitorMetrics) -> int:
    """Exported samples naming a topic: what grows with keys."""
    return sum(1 for fam in registry_with(m).collect() for s in fam.samples
               if "topic" in s.labels)


def outputs(clock: Clock, drained_after_s: float) -> Outputs:
    return Outputs(anomalies_topic="a", facts_topic="f", dead_letter_topic="d",
                   producer=NullProducer(), metrics=MonitorMetrics(clock=clock), store=None,
                   e2e_bounds_s=(), clock=clock, drained_after_s=drained_after_s)


@dataclass
class Rotation:
    """Series counts while keys are rotated through the driver."""

    peak: int = 0
    peak_keys: int = 0  # live plus draining keys at the peak
    final: int = 0
    per_batch: list[int] = field(default_factory=list)


def rotate(total: int, live: int, drained_after_s: float, batch_s: float = 60.0,
           lifetime: int = 10, count: bool = True, count_every: int = 1,
           ) -> tuple[Rotation, Outputs]:
    """``total`` keys, ``live`` at a time, each alive ``lifetime`` batches (stats rows, not
    settled: its consumers are live), then one settled stats row (its probe retired the topic),
    then nothing; one batch every ``batch_s`` of wall clock. Every 100th key gets an anomaly.
    Series are counted every ``count_every`` batches (counting is the slow part)."""
    clock = Clock()
    out = outputs(clock, drained_after_s)
    result = Rotation()
    started: dict[int, int] = {}  # key -> batch it started
    settled_at: dict[int, float] = {}
    nxt, batch = 0, 0
    while nxt < total or started:
        while len(started) < live and nxt < total:
            started[nxt] = batch
            nxt += 1
        rows = []
        for k, b0 in list(started.items()):
            done = batch - b0 >= lifetime
            rows.append(stats(k, settled=done))
            if done:
                del started[k]
                settled_at[k] = clock.t
                if k % 100 == 0:
                    out.metrics.anomaly("lost-write", f"probe-{k}", "0", 1.0, broker=str(k % 3))
        out.handle(KEYS, batch, rows)
        if count and (batch % count_every == 0 or nxt >= total):
            n = keyed_series(out.metrics)
            draining = sum(1 for t in settled_at.values() if t > clock.t - drained_after_s)
            if n > result.peak:
                result.peak, result.peak_keys = n, len(started) + draining
            result.per_batch.append(n)
        batch += 1
        clock.t += batch_s
    if drained_after_s < float("inf"):
        clock.t += drained_after_s
    out.handle(KEYS, batch, [])
    result.final = keyed_series(out.metrics)
    return result, out
