"""Monitor benchmark: throughput against the stateful ceiling, detection latency, state size.

Prints, on this machine (local[2]) and in one run:

1. **Ceiling**: ``../shared/bench/spark_stateful_ceiling.py``, beside the checkout
   (``$KMON_CEILING`` names another), a trivial fold through the same stateful API, run as a
   subprocess first.
2. **Sustained throughput**: healthy synthetic op events (64 keys, 16 processes, transactions
   with aborts) produced to an events topic beforehand, event time advancing at
   ``--event-rate``; then the whole monitor (decode, both stages, outputs, metrics) reads them
   with a 1 s trigger and ``max.events.per.trigger`` = R, for R up a ladder, once the JVM is
   warm (a first round at the smallest R until the JIT compilers settle, as below). R is sustained
   when the median micro-batch takes at most the trigger. The highest sustained R is the
   figure, next to the ceiling (target: at least 0.8 of it); the processing rate at each R
   (events / batch time) shows the per-batch fixed cost against the per-event cost, and at
   200k a batch has the ceiling's own shape.
3. **State bytes per key** after 1M events: each key's serialized state (what the state store
   holds and moves per micro-batch), from the stage 1 operator.
4. **Detection latency** at 5k events/s: a producer process sends healthy events at that rate
   with wall-clock times and, once the monitor is warm (a monitor runs for days: its start-up
   is not what is measured; ``warm_up``: a few busy batches, then until the JVM's JIT
   compilers have settled), a crafted duplicate every 0.5-1.5 s (at random: markers a
   trigger apart would all sample one phase of the micro-batch clock); the time from
   producing the deciding event to the monitor's ``kmon_anomalies_total`` changing, p50/p99,
   and stage 1's median batch size and time per phase. Then ``bench_floor.py``'s empty
   pipeline at the same rate in the same JVM, warmed the same way: the target is the
   monitor's p99 at most 1.5x the floor's.

The machine's load average is printed before and after each phase: other work on the same
cores lowers every figure; re-run when the machine is quiet. Nothing is asserted.

    python bench/bench_monitor.py [--quick] [--skip-ceiling] [--skip-throughput]

Kafka: ``KMON_BOOTSTRAP``, or the suite's local cluster (started if needed, as the tests do).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

SECOND = 1_000_000_000
# The shared ceiling script lives beside the checkout (../shared), wherever it is cloned.
CEILING = os.environ.get("KMON_CEILING", str(
    Path(__file__).resolve().parents[2] / "shared" / "bench" / "spark_stateful_ceiling.py"))

WARM_BATCHES = 5
# A monitor runs for days, so throughput and latency are measured in a warm JVM, as the
# floor's latency is (it runs after the monitor, in the same JVM). Busy batches alone are not
# warm: the JIT compilers kept about half a core busy through the monitor's first minute here,
# 0.15 cores at three minutes and 0.05 at eight (2026-12-06), on the two cores the batches
# need. So the measurement waits until they use under JIT_SETTLED_CORES over a JIT_WINDOW_S
# window (at most WARM_MAX_S).
JIT_SETTLED_CORES = 0.15
JIT_WINDOW_S = 20.0
WARM_MAX_S = 420.0


def load() -> str:
    return "load {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def say(*a: Any) -> None:
    print(*a, flush=True)


# -- 1. ceiling ----------------------------------------------------------------------------------

def ceiling(events: int, keys: int) -> dict[str, float]:
    say(f"[ceiling] {CEILING} {events} {keys} ({load()})")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.run([sys.executable, CEILING, str(events), str(keys)], env=env,
                          capture_output=True, text=True, check=False)
    out = {}
    for line in proc.stdout.splitlines():
        m = re.match(r"(\w+): .* ([0-9,]+) events/s", line)
        if m:
            out[m.group(1)] = float(m.group(2).replace(",", ""))
            say("  " + line)
    if not out:
        say("  ceiling failed:", proc.stdout[-500:], proc.stderr[-2000:])
    say(f"  ({load()})")
    return out


# -- Kafka and events ---------------------------------------------------------------------------

def bootstrap() -> tuple[str, Any]:
    if os.environ.get("KMON_BOOTSTRAP"):
        return os.environ["KMON_BOOTSTRAP"], None
    from kmon import env
    from kmon.local.cluster import LocalCluster

    # the test suite's stack (beside `kmon run`'s), as tests/helpers.suite_stack names it
    cluster = LocalCluster(home=env.kmon_home() / "test",
                           port_base=env.port_base() + env.PORT_SPAN // 2)
    cluster.up()
    # Earlier runs' topics (each run leaves a handful) would slow the brokers down.
    old = cluster.drop_topics("bench-")
    if old:
        say(f"deleted {len(old)} topics earlier benchmark runs left")
    return str(cluster.bootstrap), cluster


def create_topic(boot: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                  replication_factor=1)])[topic].result(30)


def produce_synthetic(boot: str, topic: str, n: int, event_rate: float) -> None:
    """``n`` healthy events, event time advancing at ``event_rate`` events/s (ending now)."""
    from confluent_kafka import Producer

    from kmon.streaming import replay
    from kmon.synth import SynthConfig, healthy

    t = time.time()
    cfg = SynthConfig()  # 64 keys, 16 processes, 30% transactions, 20% of them aborted
    scale = (1 / event_rate) / (cfg.step_ns / SECOND)
    span = int(n / event_rate * SECOND)
    p = Producer({"bootstrap.servers": boot, "linger.ms": 50, "batch.num.messages": 10_000,
                  "queue.buffering.max.messages": 1_000_000})  # bulk loading, before timing
    ops = replay.with_placements(healthy(n, cfg), "bench")
    events = replay.as_events(ops, probe="bench", time_offset_ns=time.time_ns() - span,
                              time_scale=scale)
    replay.produce(p, topic, events)
    say(f"  produced {n:,} events in {time.time() - t:.0f} s")


# -- 2. sustained throughput -------------------------------------------------------------------

def monitor_config(boot: str, run: str, root: Path, **extra: Any) -> Any:
    from kmon.streaming import config

    return config.from_mapping({
        "kafka.bootstrap.servers": boot, "checkpoint": str(root / f"ck-{run}"),
        "topics.events": f"bench-ev-{run}", "topics.anomalies": f"bench-an-{run}",
        "topics.facts": f"bench-fa-{run}", "topics.dead-letters": f"bench-dl-{run}",
        "metrics.port": 0, **extra})


def throughput(spark: Any, boot: str, root: Path, ladder: list[int], batches: int,
               events: int, event_rate: float, warm_s: float = WARM_MAX_S) -> dict[str, Any]:
    from kmon.streaming.monitor import Monitor

    run = uuid.uuid4().hex[:8]
    base = monitor_config(boot, run, root)
    create_topic(boot, base.events_topic, 4)
    say(f"[throughput] producing {events:,} events ({load()})")
    produce_synthetic(boot, base.events_topic, events, event_rate)
    results: list[tuple[int, float, float]] = []
    cpu_batches: list[tuple[int, dict[str, float]]] = []  # batch size, CPU seconds a batch
    state_bytes: dict[str, int] = {}
    rocksdb = (0, 0)

    def started(rate: int) -> Any:
        cfg = monitor_config(boot, run, root, **{"max.events.per.trigger": rate,
                                                 "trigger": "1s"})
        m = Monitor(cfg, spark, serve_metrics=False)
        m.start()
        return m

    # A first round only warms the JVM up, at the ladder's smallest batches (a trigger apart:
    # they bound the events it uses), until the JIT compilers settle, as the latency step
    # does: a monitor catching up after downtime has run for days before.
    m = started(ladder[0])
    q = m.queries["keys"]
    read: dict[int, int] = {}
    warmth = warm_up(spark, q, read, warm_s)
    m.stop()
    read.update((p["batchId"], p["numInputRows"]) for p in q.recentProgress)
    consumed = sum(read.values())
    say(f"  warm-up at {ladder[0]:,}/batch: {warmth}, {consumed:,} events read ({load()})")
    for rate in ladder:
        m = started(rate)
        q = m.queries["keys"]
        jit_s0, jit_t0 = jit_seconds(spark), time.monotonic()
        want = batches + 2
        done: list[dict] = []
        cpu0: tuple[int, dict] | None = None  # batches done, snapshot: once the first two are
        deadline = time.monotonic() + want * 30
        while len(done) < want and time.monotonic() < deadline:
            time.sleep(0.5)
            done = [p for p in q.recentProgress if p["numInputRows"] > 0]
            if cpu0 is None and len(done) >= 2:
                cpu0 = (len(done), cpu_snapshot())
            if not q.isActive:
                break
        per_batch = cpu_per_batch(cpu0, len(done))
        if consumed + sum(p["numInputRows"] for p in done) >= 1_000_000 and not state_bytes:
            state_bytes = dict(m.outputs.key_state_bytes)
            ops_ = done[-1]["stateOperators"] if done else []
            rocksdb = (ops_[0]["numRowsTotal"], ops_[0]["memoryUsedBytes"]) if ops_ else (0, 0)
        m.stop()
        jit = (jit_seconds(spark) - jit_s0) / (time.monotonic() - jit_t0)
        full = [p for p in done[2:] if p["numInputRows"] >= rate * 0.95]
        consumed += sum(p["numInputRows"] for p in done)
        if len(full) < 3:
            say(f"  {rate:,}/s: input exhausted ({consumed:,} events read)")
            break
        durations = [p["durationMs"]["triggerExecution"] / 1000 for p in full]
        med = statistics.median(durations)
        rate_done = sum(p["numInputRows"] for p in full) / sum(durations)
        results.append((rate, med, rate_done))
        say(f"  {rate:>7,} events/batch: median batch {med:.2f} s (max {max(durations):.2f}),"
            f" {'sustained' if med <= 1.0 else 'NOT sustained'}; processing {rate_done:,.0f}"
            f" events/s ({load()})")
        say("    " + _phases(full) + f"; events a batch per events partition {m.source_caps};"
            f" JIT compilers {jit:.2f} cores")
        if per_batch:
            cores = os.cpu_count() or 1
            total = sum(per_batch.values())
            say(f"    CPU seconds a batch: {per_part(per_batch, 1)}; all {total:.2f} of the"
                f" {cores * med:.2f} its median gives {cores} cores")
        cpu_batches.append((rate, per_batch))
    sustained = max((r for r, med, _ in results if med <= 1.0), default=0)
    return {"sustained": sustained, "results": results, "state_bytes": state_bytes,
            "rocksdb": rocksdb, "consumed": consumed, "cpu": cpu_batches}


# -- 4. detection latency ----------------------------------------------------------------------

def _live_producer(boot: str, topic: str, rate: int, seconds: float, inject_every: float,
                   warm: Any, out: Any) -> None:
    """Healthy events at ``rate``/s with wall-clock times; once ``warm`` is set, a duplicate
    every ``inject_every`` for ``seconds``."""
    from confluent_kafka import Producer

    from kmon.history import avro
    from kmon.history.model import KeyPlacement, Op, OpMeta
    from kmon.probes import clients, config
    from kmon.streaming import replay
    from kmon.synth import SynthConfig, healthy

    # Produced as a probe produces its op events (batched for up to 20 ms, lz4): the latency
    # measured includes that wait, and the brokers sharing these cores do a probe's work per
    # event, not a request per event.
    p = Producer(clients.events_producer_config(config.build({"kafka.bootstrap.servers": boot})))
    hdr = avro.kafka_headers()
    # Enough events for the longest warm-up (``warm_up``) and the measured run.
    ops = replay.with_placements(healthy(int(rate * (seconds + WARM_MAX_S + 120)), SynthConfig()),
                                 "bench-live")
    invoked: dict[Any, int] = {}
    jitter = random.Random(7)
    start = time.monotonic()
    next_inject = end = None
    cpu0 = time.process_time()
    n = 0
    place = {"dup": KeyPlacement("bench-latency", 0)}
    for sent, op in enumerate(ops):
        now_m = time.monotonic()
        if next_inject is None and warm.is_set():
            next_inject, end = now_m, now_m + seconds
            cpu0 = time.process_time()
        if end is not None and now_m > end:
            break
        target = start + sent / rate
        if target > now_m:
            time.sleep(target - now_m)
        t = time.time_ns()
        if op.type == "invoke":
            invoked[op.process] = t
        meta = OpMeta(probe="live", invoke_time=None if op.type == "invoke"
                      else invoked.pop(op.process, t),
                      placements=op.meta.placements if op.meta else {})
        op.time, op.meta = t, meta
        p.produce(topic, avro.encode_op(op), key=str(op.process).encode(), headers=hdr)
        if sent % 500 == 499:
            p.poll(0)
        if next_inject is not None and time.monotonic() >= next_inject:
            # Spaced at random around ``inject_every``: markers exactly a trigger apart would
            # all land at one phase of the micro-batch clock and measure that phase, not the
            # spread an event arriving at any moment sees.
            next_inject += inject_every * jitter.uniform(0.5, 1.5)
            v, off, proc = f"v{n}", 2 * n, 50_000_000 + n
            t = time.time_ns()
            w = Op(2_000_000_000 + 2 * n, t, proc, "ok", "send", [("send", "dup", v, off)],
                   meta=OpMeta(probe="live", invoke_time=t, placements=place))
            r = Op(2_000_000_001 + 2 * n, t, proc + 1, "ok", "poll",
                   [("poll", {"dup": [(off, v), (off + 1, v)]})],
                   meta=OpMeta(probe="live", invoke_time=t, placements=place))
            p.produce(topic, avro.encode_op(w), key=str(proc).encode(), headers=hdr)
            p.produce(topic, avro.encode_op(r), key=str(proc + 1).encode(), headers=hdr)
            p.poll(0)
            out.put(time.time())  # the deciding event (the poll) is produced
            n += 1
    p.flush(30)
    out.put(("cpu", time.process_time() - cpu0))
    out.put(None)


def latency(spark: Any, boot: str, root: Path, rate: int, seconds: float,
            trigger: str, settings: dict[str, str]) -> dict[str, Any]:
    from kmon.streaming.monitor import Monitor

    run = uuid.uuid4().hex[:8]
    cfg = monitor_config(boot, run, root, trigger=trigger,
                         **{"starting.offsets": "latest", **settings})
    create_topic(boot, cfg.events_topic, 4)
    m = Monitor(cfg, spark, serve_metrics=False)
    m.start()
    say(f"[latency] {rate:,} events/s for {seconds:.0f} s, trigger {trigger} ({load()})")
    ctx = mp.get_context("spawn")
    q, warm = ctx.Queue(), ctx.Event()
    prod = ctx.Process(target=_live_producer, args=(boot, cfg.events_topic, rate, seconds, 1.0,
                                                    warm, q))
    prod.start()
    produced: list[float] = []
    detected: list[float] = []
    finished = False
    cpu = "not measured"
    key = ("duplicate", "bench-latency", "0")
    keys = m.queries["keys"]
    warmth = warm_up(spark, keys)
    warm_from = max((p["batchId"] for p in keys.recentProgress), default=-1)
    warm.set()
    say(f"  warm after {warmth}; injecting for {seconds:.0f} s ({load()})")
    cpu0, t0 = cpu_snapshot(), time.monotonic()
    deadline = time.monotonic() + seconds + 120
    while time.monotonic() < deadline:
        while not q.empty():
            x = q.get()
            if x is None:
                finished = True
            elif isinstance(x, tuple):  # production ended: the cores' window ends too
                cpu = cpu_split(cpu0, cpu_snapshot(), time.monotonic() - t0, prod.pid, x[1])
            else:
                produced.append(x)
        count = sum(n for k, n in m.metrics.anomalies.items() if k[:3] == key)  # any broker
        now = time.time()
        while len(detected) < min(count, len(produced)):
            detected.append(now)
        if finished and len(detected) >= len(produced):
            break
        time.sleep(0.005)
    prod.join(30)
    hist = m.metrics.detection.get("duplicate")
    progress = [p for p in keys.recentProgress
                if p["numInputRows"] > 0 and p["batchId"] > warm_from]
    batches = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
    rows = statistics.median(p["numInputRows"] for p in progress) if progress else 0
    say(f"  stage 1 at {rate:,}/s: median {rows:,.0f} events/batch, "
        f"{statistics.median(batches) if batches else 0:.2f} s; " + _phases(progress))
    stage2 = [p for p in m.queries["transactions"].recentProgress if p["numInputRows"] > 0]
    txns = [p["durationMs"]["triggerExecution"] / 1000 for p in stage2]
    if txns:  # stage 2 shares the cores: its batches are what stage 1's slow ones overlap
        say(f"  stage 2: {len(txns)} batches with facts, median {statistics.median(txns):.2f} s,"
            f" max {max(txns):.2f} s; " + _phases(stage2))
    m.stop()
    lat = sorted(d - p for p, d in zip(produced, detected, strict=False))
    say(f"  {len(lat)} of {len(produced)} injected anomalies detected ({load()})")
    say(f"  cores used while events were produced: {cpu}")
    return {"latencies": lat, "hist": hist, "batches": batches, "cpu": cpu}


def jit_seconds(spark: Any) -> float:
    """Seconds the JVM's JIT compilers have spent compiling so far (all compiler threads)."""
    jvm = spark.sparkContext._jvm
    return jvm.java.lang.management.ManagementFactory.getCompilationMXBean() \
        .getTotalCompilationTime() / 1000


def warm_up(spark: Any, query: Any, read: dict[int, int] | None = None,
            most_s: float = WARM_MAX_S) -> str:
    """Wait until ``query`` has run ``WARM_BATCHES`` busy batches and the JIT compilers have
    settled (or ``most_s`` passed); say how warm it got. ``read``, if given, collects the
    events each batch read (batch id -> rows) every half second, as the query's progress holds
    only the last hundred batches; read the progress once more when the query has stopped."""
    start = time.monotonic()
    deadline = start + most_s

    def wait(seconds: float) -> None:
        until = min(deadline, time.monotonic() + seconds)
        while True:
            if read is not None:
                read.update((p["batchId"], p["numInputRows"]) for p in query.recentProgress)
            if time.monotonic() >= until:
                return
            time.sleep(0.5)

    while time.monotonic() < deadline and _busy_batches(query) < WARM_BATCHES:
        wait(0.5)
    cores = float("inf")
    while time.monotonic() < deadline and cores >= JIT_SETTLED_CORES:
        before, t0 = jit_seconds(spark), time.monotonic()
        wait(JIT_WINDOW_S)
        cores = (jit_seconds(spark) - before) / (time.monotonic() - t0)
    return (f"{_busy_batches(query)} batches and {time.monotonic() - start:.0f} s (JIT compilers"
            f" {cores:.2f} cores over the last {JIT_WINDOW_S:.0f} s)")


def _phases(progress: list[dict[str, Any]]) -> str:
    """Median seconds per phase of a query's batches, and its state operators' update and
    commit times, longest first."""
    if not progress:
        return "no batches"
    phases = {k: statistics.median(p["durationMs"].get(k, 0) for p in progress) / 1000
              for k in progress[-1]["durationMs"] if k != "triggerExecution"}
    for k in ("allUpdatesTimeMs", "commitTimeMs"):
        phases["state " + k[:-6]] = statistics.median(
            sum(op.get(k, 0) for op in p.get("stateOperators", [])) for p in progress) / 1000
    return "median seconds per phase: " + ", ".join(
        f"{k} {v:.2f}" for k, v in sorted(phases.items(), key=lambda kv: -kv[1]) if v >= 0.005)


# -- where the cores went ------------------------------------------------------------------------

def cpu_snapshot() -> dict[int, tuple[float, int, str]]:
    """Every process's CPU seconds so far, parent pid and command line (Linux ``/proc``)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # it exited
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        out[int(d.name)] = ((int(fields[11]) + int(fields[12])) / tick, int(fields[1]), cmd)
    return out


def cpu_split(before: dict, after: dict, seconds: float, producer: int | None,
              producer_cpu: float) -> str:
    """Cores each part used between two snapshots (``cpu_used``), busiest first; the event
    producer measures its own (``producer_cpu``: it may have exited before the second
    snapshot)."""
    used = {**cpu_used(before, after, producer), "producer": producer_cpu}
    return per_part(used, seconds)


def per_part(used: dict[str, float], divisor: float) -> str:
    busiest = sorted(used.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{name} {cpu / divisor:.2f}" for name, cpu in busiest)


def cpu_used(before: dict, after: dict, producer: int | None = None) -> dict[str, float]:
    """CPU seconds each part used between two snapshots: the monitor's JVM (the bench's
    child) and its Python workers (the JVM's descendants), the brokers, the rest (``producer``,
    the event producer's pid, left out)."""
    me = os.getpid()
    jvm = {pid for pid, (_, ppid, cmd) in after.items() if ppid == me and "SparkSubmit" in cmd}
    parent = {pid: ppid for pid, (_, ppid, _) in after.items()}

    def part(pid: int) -> str:
        if "kafka.Kafka" in after[pid][2]:  # the bench may have started them itself
            return "brokers"
        if pid in jvm:
            return "monitor JVM"
        if pid == producer:
            return "producer"
        p = parent.get(pid)
        while p:
            if p in jvm:
                return "monitor Python workers"
            p = parent.get(p)
        return "bench and other"

    used: dict[str, float] = {}
    for pid, (cpu, _, _) in after.items():
        if (name := part(pid)) != "producer":
            used[name] = used.get(name, 0.0) + cpu - before.get(pid, (0.0, 0, ""))[0]
    return used


def cpu_per_batch(start: tuple[int, dict] | None, batches_done: int) -> dict[str, float]:
    """CPU seconds a batch, by part, from ``start`` (batches done then, a snapshot) to now:
    empty unless batches completed in between. A batch running at either end is counted in
    part, one ending roughly offsetting the other."""
    if start is None or batches_done <= start[0]:
        return {}
    used = cpu_used(start[1], cpu_snapshot())
    return {name: cpu / (batches_done - start[0]) for name, cpu in used.items()}


def _busy_batches(query: Any) -> int:
    return sum(1 for p in query.recentProgress if p["numInputRows"] > 0)


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


# -- main ----------------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller runs (a smoke test)")
    ap.add_argument("--ceiling-events", type=int, default=2_000_000)
    ap.add_argument("--events", type=int, default=3_600_000)
    ap.add_argument("--event-rate", type=float, default=30_000,
                    help="event time advances at this many events/s in the throughput run")
    # Up to the monitor's default cap per batch (200k): the ceiling's own batch shape.
    ap.add_argument("--ladder", default="2500,5000,10000,50000,200000")
    ap.add_argument("--batches", type=int, default=6)
    ap.add_argument("--warm-seconds", type=float, default=WARM_MAX_S,
                    help="the longest the throughput step's JIT warm-up may take")
    ap.add_argument("--latency-seconds", type=float, default=75)
    # 5k/s is the target's rate; 500/s is a fleet of probes (one probe sends about 50/s).
    ap.add_argument("--latency-rates", default="500,5000", help="comma-separated (empty: none)")
    ap.add_argument("--trigger", default="1s", help="trigger of the latency run")
    ap.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                    help="a monitor setting for the latency runs (repeatable), e.g. "
                         "txn.trigger=15s")
    ap.add_argument("--floor-rate", type=int, default=5000,
                    help="the rate of the floor's latency run (0: none), compared with the "
                         "monitor's latency at the same rate")
    ap.add_argument("--skip-ceiling", action="store_true")
    ap.add_argument("--skip-throughput", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.ceiling_events, args.events, args.batches = 400_000, 300_000, 3
        args.ladder, args.latency_seconds, args.warm_seconds = "2500,10000", 30, 60
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    say(f"kmon monitor benchmark: {os.cpu_count()} cores, {load()}")
    ceil = {} if args.skip_ceiling else ceiling(args.ceiling_events, 64)
    boot, cluster = bootstrap()
    from kmon.streaming.session import build_spark_session

    spark = build_spark_session("kmon-bench")
    spark.sparkContext.setLogLevel("ERROR")
    root = Path(tempfile.mkdtemp(prefix="kmon-bench-"))
    try:
        thr = {"sustained": 0, "results": [], "state_bytes": {}, "rocksdb": (0, 0),
               "consumed": 0}
        if not args.skip_throughput:
            thr = throughput(spark, boot, root, [int(x) for x in args.ladder.split(",")],
                             args.batches, args.events, args.event_rate, args.warm_seconds)
        settings = dict(s.split("=", 1) for s in args.setting)
        lats = {rate: latency(spark, boot, root, rate, args.latency_seconds, args.trigger,
                              settings)
                for rate in (int(x) for x in args.latency_rates.split(",") if x.strip())}
        floor: list[float] = []
        if args.floor_rate:
            import bench_floor

            say(f"[floor latency] the empty pipeline at {args.floor_rate:,} events/s ({load()})")
            floor = bench_floor.latency(spark, boot, args.floor_rate, args.latency_seconds,
                                        str(root))
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
        if cluster is not None and os.environ.get("KMON_KEEP_CLUSTER") != "1":
            cluster.down()
    say("")
    say("== kmon monitor benchmark ==")
    say(f"machine: {os.cpu_count()} cores, {load()} at the end")
    pandas = ceil.get("pandas")
    say(f"ceiling (trivial fold, transformWithStateInPandas): "
        f"{pandas:,.0f} events/s" if pandas else "ceiling: not measured")
    s = thr["sustained"]
    ratio = f" = {s / pandas:.2f} x the ceiling" if pandas else ""
    say(f"sustained through the monitor (1 s trigger, batch duration <= trigger): "
        f"{s:,} events/s{ratio}")
    for rate, med, done in thr["results"]:
        say(f"  {rate:>7,}/batch: median batch {med:.2f} s, processing {done:,.0f} events/s")
    best = max((done for _, _, done in thr["results"]), default=0.0)
    if pandas and best:
        say(f"best processing rate (any batch size): {best:,.0f} events/s = "
            f"{best / pandas:.2f} x the ceiling")
    cores = os.cpu_count() or 1
    for rate, per_batch in thr.get("cpu", []):
        if not per_batch:
            continue
        say(f"  {rate:>7,}/batch: CPU seconds a batch {sum(per_batch.values()):.2f} "
            f"({per_part(per_batch, 1)})")
        if pandas:
            budget = rate / (0.8 * pandas)
            say(f"    at 0.8 x the ceiling a batch of {rate:,} has {budget:.2f} s: "
                f"{cores * budget:.2f} CPU seconds on {cores} cores, brokers included")
    sb = sorted(thr["state_bytes"].values())
    if sb:
        say(f"state per key after {thr['consumed']:,} events: median {statistics.median(sb):,.0f}"
            f" B, max {max(sb):,} B over {len(sb)} keys (RocksDB: {thr['rocksdb'][0]} rows,"
            f" {thr['rocksdb'][1]:,} B)")
    for rate, lat in lats.items():
        ls = lat["latencies"]
        say(f"detection latency at {rate:,} events/s (trigger {args.trigger}), deciding event"
            f" produced -> metric changed: p50 {pct(ls, 50):.2f} s, p99 {pct(ls, 99):.2f} s,"
            f" max {max(ls, default=float('nan')):.2f} s over {len(ls)} anomalies")
        if lat["batches"]:
            say(f"  micro-batches at {rate:,}/s: median {statistics.median(lat['batches']):.2f} s"
                f"; CPU while measured: {lat['cpu']}")
    if floor:
        say(f"floor (bench_floor.py's empty pipeline) at {args.floor_rate:,} events/s, event "
            f"produced -> its batch done: p50 {pct(floor, 50):.2f} s, p99 {pct(floor, 99):.2f} s"
            f" over {len(floor)} markers")
        mon = lats.get(args.floor_rate, {}).get("latencies")
        if mon:
            say(f"latency over the floor at {args.floor_rate:,} events/s: monitor p99 / floor p99"
                f" = {pct(mon, 99) / pct(floor, 99):.2f}x (target at most 1.5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
