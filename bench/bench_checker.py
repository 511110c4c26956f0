"""Checker core benchmark: throughput on one core, and retained state per key over time.

Generates a healthy synthetic history (kmon.synth; 64 keys, 16 processes, transactions with
deliberate aborts), decodes nothing (the op events are already Python objects, as after
decoding), and feeds it through the checker:

1. online: a grace period in event time, the watermark advanced every 10k events, state
   compacted behind it -- the monitor's mode. Retained state is measured at 10k, 100k, 1M
   events; it must stay flat as the history grows;
2. offline (``kmon check``): no grace period, every verdict at the end.

Figures are printed, never asserted. CPU time of this process is used, so other load on the
machine disturbs the figures less than wall time would; each mode runs ``REPEAT`` times and the
best and median rates are printed (on a shared VM the same run varies by 20%; the best is the
least disturbed).

    python bench/bench_checker.py [EVENTS] [REPEAT]
"""

from __future__ import annotations

import statistics
import sys
import time

from kmon.checker import CheckConfig, Checker
from kmon.synth import SynthConfig, healthy

SECOND = 1_000_000_000


def _rates(rates: list[float]) -> str:
    return f"best {max(rates):,.0f}, median {statistics.median(rates):,.0f} events/s"


def offline(ops: list, repeat: int) -> None:
    rates = []
    for _ in range(repeat):
        checker = Checker(CheckConfig(cycles=False))
        t = time.process_time()
        for op in ops:
            checker.apply(op)
        report = checker.finish()
        rates.append(len(ops) / (time.process_time() - t))
        del checker
    print(f"offline: {len(ops):,} events, {repeat} runs: {_rates(rates)} (CPU);"
          f" valid={report.valid}, anomalies={sum(len(v) for v in report.errors.values())},"
          f" lag samples={len(report.lags):,}")


def state_figures(checker: Checker) -> tuple[float, float, float, float, float]:
    """(bytes per key, in-flight offsets per key, bytes per in-flight offset, window bytes per
    in-flight offset, serialized/key)."""
    states = list(checker.keys.values())
    total = sum(st.nbytes() for st in states)
    window = sum(st.window_nbytes() for st in states)
    slots = max(sum(len(st.val) for st in states), 1)
    serialized = sum(len(st.to_bytes()) for st in states)
    n = len(states)
    return total / n, slots / n, total / slots, window / slots, serialized / n


def online(ops: list, grace_s: float, checkpoints: tuple[int, ...], repeat: int) -> None:
    print(f"online: grace {grace_s:g} s of event time, watermark = newest event - 1 s")
    rates = [_online_run(ops, grace_s, checkpoints if run == 0 else ()) for run in range(repeat)]
    print(f"  throughput, {repeat} runs: {_rates(rates)} (CPU, including advance/compaction)")


def _online_run(ops: list, grace_s: float, checkpoints: tuple[int, ...]) -> float:
    grace = int(grace_s * SECOND)
    cfg = CheckConfig(cycles=False, grace_ns=grace, unseen_grace_ns=2 * grace)
    checker = Checker(cfg)
    lateness = SECOND
    cpu = 0.0
    # bytes/offset: everything a key retains over its in-flight offsets; window B/offset: only
    # what grows with the window (the rest is per key: process positions, side tables).
    if checkpoints:
        print(f"  {'events':>10} {'bytes/key':>10} {'offsets/key':>12} {'bytes/offset':>13}"
              f" {'window B/offset':>16} {'serialized/key':>15}")
    step = 10_000  # the watermark moves, and the clock is read, once per step (not per event)
    for start in range(0, len(ops), step):
        chunk = ops[start:start + step]
        t = time.process_time()
        for op in chunk:
            checker.apply(op)
        checker.advance(chunk[-1].time - lateness)
        checker.sink.clear()
        cpu += time.process_time() - t
        n = start + len(chunk)
        if n in checkpoints:
            per_key, offsets, per_offset, window, ser = state_figures(checker)
            print(f"  {n:>10,} {per_key:>10,.0f} {offsets:>12,.0f} {per_offset:>13.1f}"
                  f" {window:>16.1f} {ser:>15,.0f}")
    return len(ops) / cpu


def main() -> None:
    events = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    cfg = SynthConfig(keys=64, processes=16, keys_per_process=4)
    t = time.perf_counter()
    ops = list(healthy(events, cfg))
    print(f"generated {len(ops):,} healthy op events ({cfg.keys} keys, {cfg.processes} processes,"
          f" {cfg.keys_per_process} keys each) in {time.perf_counter() - t:.1f} s")
    # Online first: the offline runs leave a heap fragmented by 1.2M realtime-lag samples, which
    # slowed a following online run by about a quarter (measured both ways on 2026-11-25).
    online(ops, grace_s=5, checkpoints=(10_000, 100_000, 1_000_000, events), repeat=repeat)
    offline(ops, repeat)


if __name__ == "__main__":
    main()
