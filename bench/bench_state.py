"""State benchmark: what a micro-batch costs as keys grow, with the window kept in pages.

For 16, 64, 512 and 4,096 keys (probe topic-partitions), one events topic of healthy synthetic op
events (event time advancing at ``--event-rate``) is read by the whole monitor twice, batch
by batch (``max.events.per.trigger``), once per state layout:

- **paged** (``state.page.slots`` = 512, the default): each key's head in one value, its
  window's cold pages in a map state, a batch writing only the pages it changed (and reading
  them only when the Python worker's copy is not the stored one);
- **whole** (``state.page.slots`` = 0): each key's whole state in one value, rewritten by
  every batch that touches the key (the layout before pages).

Printed per run: events and keys, median batch time (the first batches, planning and JIT
warm-up, left out), bytes written to the state store per batch (the monitor's own count,
``kmon_monitor_state_written_bytes_total``, over the run's batches) and per event, the
serialized state at the end (sum over keys, largest key) and RocksDB's memory
(``memoryUsedBytes`` of the stage 1 operator). Then the ratios paged / whole, measured in
the same run. The load average is printed with each run: other work on the same cores
slows every figure; a warm-up run comes first, and the layouts take turns going first.
Nothing is asserted.

    python bench/bench_state.py [--quick] [--keys 64,512,4096] [--events N]

Kafka: ``KMON_BOOTSTRAP``, or the suite's local cluster (started if needed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_monitor import bootstrap, create_topic, load, monitor_config, say

from kmon.streaming.state_pages import DEFAULT_PAGE_SLOTS

SECOND = 1_000_000_000
LAYOUTS = {"paged": DEFAULT_PAGE_SLOTS, "whole": 0}
WARM_BATCHES = 2  # left out of the batch time: query planning, JIT warm-up


@dataclass
class Run:
    layout: str
    keys: int
    events: int
    batches: int
    median_s: float
    written: int  # bytes put in the state store, the whole run
    state_total: int  # serialized state at the end, all keys
    state_max: int  # ... the largest key
    rocksdb: int  # memoryUsedBytes of stage 1's state store

    @property
    def written_per_batch(self) -> float:
        return self.written / max(1, self.batches)


def synth_config(keys: int) -> Any:
    """Every key written and read: processes cover keys eight apiece, each key by two."""
    from kmon.synth import SynthConfig

    return SynthConfig(keys=keys, processes=max(16, keys // 4), keys_per_process=8)


def produce(boot: str, topic: str, n: int, keys: int, event_rate: float) -> None:
    from confluent_kafka import Producer

    from kmon.streaming import replay
    from kmon.synth import healthy

    t = time.time()
    cfg = synth_config(keys)
    scale = (1 / event_rate) / (cfg.step_ns / SECOND)
    span = int(n / event_rate * SECOND)
    p = Producer({"bootstrap.servers": boot, "linger.ms": 50, "batch.num.messages": 10_000,
                  "queue.buffering.max.messages": 1_000_000})
    ops = replay.with_placements(healthy(n, cfg), "bench")
    events = replay.as_events(ops, probe="bench", time_offset_ns=time.time_ns() - span,
                              time_scale=scale)
    replay.produce(p, topic, events)
    say(f"  produced {n:,} events over {keys:,} keys in {time.time() - t:.0f} s")


def run(spark: Any, boot: str, root: Path, topic: str, layout: str, keys: int, events: int,
        per_batch: int) -> Run:
    from kmon.streaming.monitor import Monitor

    rid = uuid.uuid4().hex[:8]
    cfg = monitor_config(boot, rid, root, **{
        "topics.events": topic, "max.events.per.trigger": per_batch, "trigger": "1s",
        "state.page.slots": LAYOUTS[layout]})
    m = Monitor(cfg, spark, serve_metrics=False)
    m.start()
    q = m.queries["keys"]
    deadline = time.monotonic() + 60 + events / 200
    while m.metrics.events < events and time.monotonic() < deadline and q.isActive:
        time.sleep(0.5)
    time.sleep(2)  # the last batch's outputs
    done = [p for p in q.recentProgress if p["numInputRows"] > 0]
    written = m.metrics.state_written
    sizes = list(m.outputs.key_state_bytes.values())
    ops = done[-1]["stateOperators"] if done else []
    m.stop()
    durations = [p["durationMs"]["triggerExecution"] / 1000 for p in done[WARM_BATCHES:]]
    r = Run(layout, keys, m.metrics.events, len(done),
            statistics.median(durations) if durations else float("nan"), written,
            sum(sizes), max(sizes, default=0), int(ops[0]["memoryUsedBytes"]) if ops else 0)
    say(f"  {layout:>5}: {r.events:,} events in {r.batches} batches, median batch "
        f"{r.median_s:.2f} s, written {r.written_per_batch / 1e6:.2f} MB/batch "
        f"({r.written / max(1, r.events):,.0f} B/event), state {r.state_total / 1e6:.1f} MB "
        f"(largest key {r.state_max / 1e3:,.0f} kB), RocksDB {r.rocksdb / 1e6:.1f} MB ({load()})")
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", default="16,64,512,4096")
    ap.add_argument("--events", type=int, default=1_200_000)
    ap.add_argument("--per-batch", type=int, default=20_000, help="max.events.per.trigger")
    ap.add_argument("--event-rate", type=float, default=30_000,
                    help="event time advances at this many events/s")
    ap.add_argument("--quick", action="store_true", help="smaller runs (a smoke test)")
    args = ap.parse_args()
    if args.quick:
        args.keys, args.events = "64,512", 100_000
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    say(f"kmon state benchmark: {os.cpu_count()} cores, {load()}")
    boot, cluster = bootstrap()
    from kmon.streaming.session import build_spark_session

    spark = build_spark_session("kmon-bench-state")
    spark.sparkContext.setLogLevel("ERROR")
    root = Path(tempfile.mkdtemp(prefix="kmon-bench-state-"))
    runs: list[Run] = []
    try:
        # A fresh JVM and fresh Python workers are slow for minutes (JIT): warm both up on
        # a small run first, and alternate which layout goes first.
        topic = f"bench-state-warm-{uuid.uuid4().hex[:6]}"
        create_topic(boot, topic, 4)
        say(f"[warm-up] ({load()})")
        produce(boot, topic, args.per_batch * 8, 64, args.event_rate)
        for layout in LAYOUTS:
            run(spark, boot, root, topic, layout, 64, args.per_batch * 8, args.per_batch)
        for i, keys in enumerate(int(k) for k in args.keys.split(",")):
            topic = f"bench-state-{keys}-{uuid.uuid4().hex[:6]}"
            create_topic(boot, topic, 4)
            say(f"[{keys:,} keys] ({load()})")
            produce(boot, topic, args.events, keys, args.event_rate)
            for layout in list(LAYOUTS)[::1 if i % 2 else -1]:
                runs.append(run(spark, boot, root, topic, layout, keys, args.events,
                                args.per_batch))
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
        if cluster is not None and os.environ.get("KMON_KEEP_CLUSTER") != "1":
            cluster.down()
    report(runs, args.per_batch)
    return 0


def report(runs: list[Run], per_batch: int) -> None:
    say("")
    say(f"== kmon state benchmark: {per_batch:,} events per batch ==")
    say(f"{'keys':>6} {'layout':>6} {'events':>9} {'batch s':>8} {'MB/batch':>9} "
        f"{'B/event':>8} {'state MB':>9} {'max key kB':>10} {'RocksDB MB':>10}")
    for r in runs:
        say(f"{r.keys:>6,} {r.layout:>6} {r.events:>9,} {r.median_s:>8.2f} "
            f"{r.written_per_batch / 1e6:>9.2f} {r.written / max(1, r.events):>8,.0f} "
            f"{r.state_total / 1e6:>9.1f} {r.state_max / 1e3:>10,.0f} {r.rocksdb / 1e6:>10.1f}")
    by = {(r.keys, r.layout): r for r in runs}
    for keys in sorted({r.keys for r in runs}):
        p, w = by.get((keys, "paged")), by.get((keys, "whole"))
        if p and w and w.written and w.median_s:
            say(f"{keys:>6,} keys: paged / whole: bytes written per batch "
                f"{p.written_per_batch / w.written_per_batch:.2f}x, median batch time "
                f"{p.median_s / w.median_s:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
