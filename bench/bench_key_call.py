"""A key call's own work, without Spark: load, fold and save of ``KeyFold``, per key and batch.

The monitor's stage 1 makes one call per key and micro-batch: load the key's state (head and
cold pages), fold its fragments, save what changed. ``KMON_MONITOR_PROFILE=1`` times those
phases inside Spark's Python workers, where loading and saving include the state server's
round trips; this bench times the same ``KeyFold`` code with the store replaced by dicts (the
unit tests' ``KeyStore``, whose check that a save's pages match adds a byte comparison to the
save's time), so the two together tell kmon's Python (unpickling, joining pages, rebuilding
the value index; ``to_parts``, diffing pages) from the platform's calls.

The bench's workload (``kmon.synth.healthy``: 64 keys, 16 processes; event time at
``--event-rate``, 30k events/s as ``bench_monitor.py`` produces it), split into fragments as
the monitor's reader splits events, is cut into batches of each ``--batch`` size, with the
monitor's default settings (grace, unseen grace, watermark delay, 512-slot pages). Every load
reads the pages from the store (a worker copy that missed), as 69% of stage 1's calls did at
200k a batch. Printed per batch size: the medians over batches (the first ``WARM`` left out)
of milliseconds per key call for each phase, state and head sizes, pages put and removed per
call. One core, pure Python; nothing is asserted.

    python bench/bench_key_call.py [--events N] [--batch 200000,8000] [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kmon.history.events import event_of
from kmon.history.fragment import Fragment
from kmon.history.model import Op
from kmon.streaming import config, monitor, replay
from kmon.streaming.keyfold import FoldSettings
from kmon.synth import SynthConfig, healthy

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# The unit tests' model of the processor's store: a head and a map of cold pages per key.
from tests.unit.streaming.online import KeyStore

SECOND = 1_000_000_000
PHASES = ("load", "fold", "save")
WARM = 2  # batches left out: the windows are still filling


@dataclass
class BatchFigures:
    calls: int
    ms: dict[str, float]  # phase -> milliseconds per key call
    state_kb: float  # mean over keys, head and pages
    head_kb: float
    puts: float  # page puts per call
    removes: float


def workload(n: int, event_rate: float) -> list[Op]:
    """``n`` healthy events of the bench's shape, event time advancing at ``event_rate``/s."""
    cfg = SynthConfig()
    scale = (1 / event_rate) / (cfg.step_ns / SECOND)
    ops = replay.with_placements(healthy(n, cfg), "bench")
    return [replace(op, time=int(op.time * scale)) for op in ops]


def fragments(ops: list[Op]) -> dict[Any, list[Fragment]]:
    """One batch's fragments by key, as the reading step groups them."""
    by_key: dict[Any, list[Fragment]] = defaultdict(list)
    for op in ops:
        if op.f == "crash" or replay.is_clock_tick(op):
            continue
        for fr in event_of(op).frags:
            by_key[fr.key].append(fr)
    return by_key


def run_batch(store: KeyStore, frags: dict[Any, list[Fragment]], s: FoldSettings,
              watermark_ns: int) -> BatchFigures:
    """One batch's key calls, every load reading the store's pages (no worker copy)."""
    spent = dict.fromkeys(PHASES, 0.0)
    puts, removes = store.page_puts, store.page_removes
    for key, frs in frags.items():
        t0 = time.perf_counter()
        kf = store.load("bench", key, s)
        t1 = time.perf_counter()
        kf.batch(frs, None, watermark_ns)
        t2 = time.perf_counter()
        store.save(key, kf)
        t3 = time.perf_counter()
        spent["load"] += t1 - t0
        spent["fold"] += t2 - t1
        spent["save"] += t3 - t2
    calls = max(len(frags), 1)
    keys = list(store.heads)
    return BatchFigures(
        calls=len(frags), ms={p: v / calls * 1e3 for p, v in spent.items()},
        state_kb=statistics.mean(map(store.size, keys)) / 1e3,
        head_kb=statistics.mean(len(store.heads[k]) for k in keys) / 1e3,
        puts=(store.page_puts - puts) / calls, removes=(store.page_removes - removes) / calls)


def bench(ops: list[Op], batch: int, s: FoldSettings, delay_ns: int) -> list[BatchFigures]:
    store = KeyStore()
    out = []
    latest = 0
    watermark = 0
    for start in range(0, len(ops) - batch + 1, batch):  # whole batches only
        chunk = ops[start:start + batch]
        latest = max(latest, max(op.time for op in chunk))
        out.append(run_batch(store, fragments(chunk), s, watermark))
        watermark = max(watermark, latest - delay_ns)  # the next batch sees this one's
    return out


def report(batch: int, figures: list[BatchFigures]) -> None:
    kept = figures[WARM:] or figures
    med = {p: statistics.median(f.ms[p] for f in kept) for p in PHASES}
    total = sum(med.values())
    print(f"{batch:>9,} events/batch, {len(kept)} batches, "
          f"{statistics.median(f.calls for f in kept):.0f} key calls each: "
          + ", ".join(f"{p} {med[p]:.2f} ms" for p in PHASES)
          + f" (load+save {(med['load'] + med['save']) / total:.0%} of {total:.2f} ms);"
          f" state {statistics.median(f.state_kb for f in kept):.0f} KB a key"
          f" (head {statistics.median(f.head_kb for f in kept):.0f} KB);"
          f" pages a call: {statistics.median(f.puts for f in kept):.1f} put,"
          f" {statistics.median(f.removes for f in kept):.1f} removed", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_600_000)
    ap.add_argument("--batch", default="200000,8000",
                    help="events per batch, comma-separated (8,000: 5k events/s at 1.6 s)")
    ap.add_argument("--event-rate", type=float, default=30_000)
    ap.add_argument("--quick", action="store_true", help="200k events, batches of 20k")
    args = ap.parse_args(argv)
    events, sizes = args.events, [int(b) for b in args.batch.split(",")]
    if args.quick:
        events, sizes = 200_000, [20_000]
    cfg = config.from_mapping({"kafka.bootstrap.servers": "unused:9092",
                               "checkpoint": os.devnull})
    s = monitor.fold_settings(cfg)
    delay_ns = int(cfg.watermark_delay_s * SECOND)
    t = time.time()
    ops = workload(events, args.event_rate)
    print(f"key call, offline: {events:,} events at {args.event_rate:,.0f}/s of event time, "
          f"page.slots {s.page_slots}, made in {time.time() - t:.0f} s "
          f"(load {os.getloadavg()[0]:.2f})", flush=True)
    for b in sizes:
        report(b, bench(ops, b, s, delay_ns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
