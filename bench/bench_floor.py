"""The floor under the monitor's stage 1: its pipeline's shape with no work in it.

The same events topic (4 partitions, the bench's synthetic events), one Kafka source per
partition with its own event-time watermark, a ``mapInArrow`` step that emits one row per key
per Arrow batch (as the reading step does, but without reading the events), a Row-flavour
``transformWithState`` with event-time timers over 64 keys keeping 1 KB of state each, and a
``foreachBatch`` that collects the output. Whatever a micro-batch of this query costs, the
monitor pays before its first line of work: planning, commits, the Kafka read, the shuffle,
the state operator's per-key calls. Median batch duration at each batch size is printed.

Not part of ``make bench`` (it takes minutes and measures Spark, not kmon). Run it beside
``bench/bench_monitor.py`` on the same machine to tell the platform's share of a batch from
kmon's:

    python bench/bench_floor.py [--rates 5000,200000] [--events 2000000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, os.path.dirname(__file__))
import bench_monitor as bm

KEYS = 64
BATCHES = 8  # per rate; the first two are left out (warm-up)


def per_key_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One row per key per Arrow batch, a blob a quarter of the batch's bytes over the keys."""
    for b in batches:
        size = sum(len(v) for v in b.column(0).to_pylist())
        latest = pc.max(b.column(1)).as_py() if b.num_rows else None
        yield pa.RecordBatch.from_pydict({
            "k": pa.array(range(KEYS), pa.int64()),
            "blob": pa.array([b"x" * (size // KEYS // 4)] * KEYS, pa.binary()),
            "ets": pa.array([latest] * KEYS, pa.timestamp("us")),
        })


def _processor() -> Any:
    from pyspark.sql import Row
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import BinaryType, StructField, StructType

    state = StructType([StructField("data", BinaryType())])

    class TrivialFold(StatefulProcessor):
        """Reads its state, counts the bytes it was sent, writes 1 KB back."""

        def init(self, handle: Any) -> None:
            self.st = handle.getValueState("s", state)

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Any:
            self.st.get()
            n, latest = 0, None
            for r in rows:
                n += len(r.blob)
                if r.ets is not None and (latest is None or r.ets > latest):
                    latest = r.ets
            self.st.update((b"y" * 1000,))
            yield Row(k=key[0], n=n, latest=latest)

        def close(self) -> None:
            pass

    return TrivialFold()


def floor_query(spark: Any, boot: str, topic: str, rate: int, checkpoint: str,
                starting: str = "earliest", on_batch: Any = None) -> Any:
    """The floor's query over ``topic``, ``rate`` events per batch at most; ``on_batch``
    (default: collect and drop) gets each micro-batch's output rows: (k, n, latest), latest
    being the newest Kafka timestamp the key's rows carried."""
    from pyspark.sql.types import BinaryType, LongType, StructField, StructType, TimestampType

    rows = StructType([StructField("k", LongType()), StructField("blob", BinaryType()),
                       StructField("ets", TimestampType())])
    sources = []
    for p in range(4):
        raw = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", boot)
               .option("assign", json.dumps({topic: [p]})).option("startingOffsets", starting)
               .option("maxOffsetsPerTrigger", str(rate // 4)).load())
        sources.append(raw.select("value", "timestamp").mapInArrow(per_key_rows, rows)
                       .withWatermark("ets", "5 seconds"))
    union = sources[0]
    for s in sources[1:]:
        union = union.union(s)
    out = union.groupBy("k").transformWithState(
        statefulProcessor=_processor(), outputStructType="k long, n long, latest timestamp",
        outputMode="Update", timeMode="EventTime")
    sink = on_batch or (lambda rows: None)
    return (out.writeStream.foreachBatch(lambda df, _: sink(df.collect()))
            .option("checkpointLocation", checkpoint).trigger(processingTime="1 second").start())


def latency(spark: Any, boot: str, rate: int, seconds: float, root: str) -> list[float]:
    """The floor's detection latency: events produced live at ``rate``/s (the monitor's
    latency run's producer, with its markers 0.5-1.5 s apart, sent once the query is warm as
    the monitor's run waits for it: ``bench_monitor.warm_up``), and for each marker the time from
    its production to the end of the first micro-batch whose output carries an event as new
    (the floor reads no values: a batch that read the marker's Kafka timestamp, or a later
    one, has seen it). Sorted seconds."""
    import multiprocessing as mp

    from pyspark import cloudpickle

    # Imported by bench_monitor, this module is no __main__: Python workers, which cannot
    # import it, get its functions by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    topic = f"bench-floor-live-{uuid.uuid4().hex[:8]}"
    bm.create_topic(boot, topic, 4)
    done: list[tuple[float, float]] = []  # (wall clock at the batch's end, newest event time)

    def on_batch(rows: list[Any]) -> None:
        stamps = [r.latest.timestamp() for r in rows if r.latest is not None]
        if stamps:
            done.append((time.time(), max(stamps)))

    q = floor_query(spark, boot, topic, 1 << 30, f"{root}/ck-live", "latest", on_batch)
    ctx = mp.get_context("spawn")
    marks, warm = ctx.Queue(), ctx.Event()
    prod = ctx.Process(target=bm._live_producer, args=(boot, topic, rate, seconds, 1.0, warm,
                                                       marks))
    prod.start()
    warmth = bm.warm_up(spark, q)
    warm_from = max((p["batchId"] for p in q.recentProgress), default=-1)
    warm.set()
    bm.say(f"  floor warm after {warmth}; measuring for {seconds:.0f} s")
    produced: list[float] = []
    cpu0, t0 = bm.cpu_snapshot(), time.monotonic()
    end = time.monotonic() + seconds + 120
    while time.monotonic() < end:
        x = marks.get()
        if x is None:
            break
        if isinstance(x, float):
            produced.append(x)
        elif isinstance(x, tuple):  # production ended: the cores' window ends too
            cpu = bm.cpu_split(cpu0, bm.cpu_snapshot(), time.monotonic() - t0, prod.pid, x[1])
            bm.say(f"  cores used while events were produced: {cpu}")
    time.sleep(5)  # the last markers' batches
    prod.join(30)
    q.stop()
    busy = [p for p in q.recentProgress if p["numInputRows"] > 0 and p["batchId"] > warm_from]
    if busy:
        rows = statistics.median(p["numInputRows"] for p in busy)
        secs = statistics.median(p["durationMs"]["triggerExecution"] / 1000 for p in busy)
        bm.say(f"  floor at {rate:,}/s: median {rows:,.0f} events/batch, {secs:.2f} s; "
               + bm._phases(busy))
    lat = []
    for t in produced:
        # Kafka timestamps are milliseconds, taken as the marker was produced
        seen = [end_t for end_t, newest in done if newest >= t - 0.002]
        if seen:
            lat.append(min(seen) - t)
    return sorted(lat)


def measure(spark: Any, boot: str, topic: str, rate: int, root: str) -> None:
    q = floor_query(spark, boot, topic, rate, f"{root}/ck-{rate}")
    t0 = time.monotonic()
    while time.monotonic() - t0 < 300 and q.isActive:
        if len([p for p in q.recentProgress if p["numInputRows"] > 0]) >= BATCHES:
            break
        time.sleep(0.5)
    q.stop()
    done = [p for p in q.recentProgress if p["numInputRows"] > 0][2:]
    if not done:
        bm.say(f"  {rate:,} events/batch: no batch after warm-up")
        return
    seconds = [p["durationMs"]["triggerExecution"] / 1000 for p in done]
    phases = {k: statistics.median(p["durationMs"].get(k, 0) for p in done) / 1000
              for k in done[-1]["durationMs"]}
    top = ", ".join(f"{k} {v:.2f}" for k, v in sorted(phases.items(), key=lambda kv: -kv[1])
                    if k != "triggerExecution" and v >= 0.01)
    bm.say(f"  {rate:,} events/batch: median batch {statistics.median(seconds):.2f} s"
           f" (min {min(seconds):.2f}; {top}) ({bm.load()})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="5000,200000", help="events per batch, comma-separated")
    ap.add_argument("--events", type=int, default=2_000_000)
    args = ap.parse_args()
    rates = [int(r) for r in args.rates.split(",")]

    from kmon.streaming.monitor import SQL_CONF
    from kmon.streaming.session import build_spark_session

    boot, cluster = bm.bootstrap()
    spark = build_spark_session("kmon-bench-floor")
    spark.sparkContext.setLogLevel("ERROR")
    for k, v in SQL_CONF.items():
        spark.conf.set(k, v)
    topic = f"bench-floor-{uuid.uuid4().hex[:8]}"
    bm.create_topic(boot, topic, 4)
    bm.say(f"[floor] producing {args.events:,} events ({bm.load()})")
    bm.produce_synthetic(boot, topic, args.events, 30_000)
    root = tempfile.mkdtemp(prefix="kmon-floor-")
    try:
        for rate in rates:
            measure(spark, boot, topic, rate, root)
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
        if cluster is not None and os.environ.get("KMON_KEEP_CLUSTER") != "1":
            cluster.down()


if __name__ == "__main__":
    main()
