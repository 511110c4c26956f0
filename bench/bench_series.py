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

from kmon.streaming.rotation import rotate


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--keys", type=int, default=1000)
    p.add_argument("--live", type=int, default=20)
    p.add_argument("--lifetime", type=int, default=10, help="batches (minutes) a key lives")
    p.add_argument("--drained-after", type=float, default=3600.0, help="seconds")
    a = p.parse_args()
    t0 = time.perf_counter()
    pruned, _ = rotate(a.keys, a.live, a.drained_after, lifetime=a.lifetime, count_every=5)
    never, _ = rotate(a.keys, a.live, float("inf"), lifetime=a.lifetime, count=False)
    print(f"series naming a topic, {a.keys} keys rotated ({a.live} live, {a.lifetime} min "
          f"each), drained after {a.drained_after:.0f}s:")
    print(f"  pruned:       peak {pruned.peak} ({pruned.peak_keys} live+draining keys, "
          f"{pruned.peak / max(1, pruned.peak_keys):.0f} a key), after all drained "
          f"{pruned.final} (the counted anomalies')")
    print(f"  never pruned: {never.final} after all retired, still growing with every key")
    print(f"  ({time.perf_counter() - t0:.1f}s)")


if __name__ == "__main__":
    main()
