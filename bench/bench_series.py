"""Monitor metric series while probe topics come and go (no Kafka, no Spark).

Rotates keys through the monitor's driver (``Outputs.handle`` with stats rows, as stage 1
emits them, and ``MonitorMetrics``), each key alone on its probe topic: ``--live`` keys at a
time, each alive ``--lifetime`` one-minute batches (its consumers live, so never settled), then
one settled stats row (the probe retired its topic), then nothing; every 100th key counts an
anomaly. Prints the exported series that name a topic: their peak with pruning after
``metrics.drained.after`` (default 1h), the live plus draining keys at that peak, what is left
once every key drained, and the same run never pruned (the monitor before drained keys).

    python bench/bench_series.py [--keys 1000] [--live 20] [--lifetime 10] [--drained-after 3600]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any

from kmon.streaming.keyfold import STATS
from kmon.streaming.metrics import MonitorMetrics, registry_with
from kmon.streaming.outputs import KEYS, Outputs

BATCH_S = 60.0


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


@dataclass
class Figures:
    peak: int = 0
    peak_keys: int = 0  # live plus draining keys at the peak
    final: int = 0


def stats(key: int, settled: bool) -> dict[str, Any]:
    return {"kind": STATS, "probe": "p", "key": str(key), "topic": f"probe-{key}", "part": 0,
            "broker": key % 3, "unseen": 1, "lag": 5_000_000, "e2e_sum": 10_000_000,
            "e2e": [1] + [0] * 15, "state_bytes": 100, "settled": settled}


def keyed_series(m: MonitorMetrics) -> int:
    return sum(1 for fam in registry_with(m).collect() for s in fam.samples
               if "topic" in s.labels)


def rotate(keys: int, live: int, lifetime: int, drained_after_s: float) -> Figures:
    clock = Clock()
    out = Outputs(anomalies_topic="a", facts_topic="f", dead_letter_topic="d",
                  producer=NullProducer(), metrics=MonitorMetrics(clock=clock), store=None,
                  e2e_bounds_s=(), clock=clock, drained_after_s=drained_after_s)
    fig = Figures()
    started: dict[int, int] = {}
    settled_at: list[float] = []
    nxt = batch = 0
    while nxt < keys or started:
        while len(started) < live and nxt < keys:
            started[nxt], nxt = batch, nxt + 1
        rows = []
        for k, b0 in list(started.items()):
            done = batch - b0 >= lifetime
            rows.append(stats(k, done))
            if done:
                del started[k]
                settled_at.append(clock.t)
                if k % 100 == 0:
                    out.metrics.anomaly("lost-write", f"probe-{k}", "0", 1.0, broker=str(k % 3))
        out.handle(KEYS, batch, rows)
        if batch % 5 == 0 or nxt >= keys:  # counting is the slow part
            n = keyed_series(out.metrics)
            if n > fig.peak:
                draining = sum(1 for t in settled_at if t > clock.t - drained_after_s)
                fig.peak, fig.peak_keys = n, len(started) + draining
        batch += 1
        clock.t += BATCH_S
    if drained_after_s < float("inf"):
        clock.t += drained_after_s
    out.handle(KEYS, batch, [])
    fig.final = keyed_series(out.metrics)
    return fig


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--keys", type=int, default=1000)
    p.add_argument("--live", type=int, default=20)
    p.add_argument("--lifetime", type=int, default=10, help="batches (minutes) a key lives")
    p.add_argument("--drained-after", type=float, default=3600.0, help="seconds")
    a = p.parse_args()
    t0 = time.perf_counter()
    pruned = rotate(a.keys, a.live, a.lifetime, a.drained_after)
    never = rotate(a.keys, a.live, a.lifetime, float("inf"))
    print(f"series naming a topic, {a.keys} keys rotated ({a.live} live, {a.lifetime} min "
          f"each), drained after {a.drained_after:.0f}s:")
    print(f"  pruned:       peak {pruned.peak} ({pruned.peak_keys} live+draining keys, "
          f"{pruned.peak / max(1, pruned.peak_keys):.0f} a key), after all drained "
          f"{pruned.final} (the counted anomalies')")
    print(f"  never pruned: {never.final} after all retired, still growing with every key")
    print(f"  ({time.perf_counter() - t0:.1f}s)")


if __name__ == "__main__":
    main()
