"""The monitor: two streaming queries, the Prometheus endpoint and the driver's outputs.

::

    events topic ─► read (JVM: schema header, timestamp; mapInArrow: the compiled reader splits
                          each Arrow batch of events into one row per key, fragments pickled)
                 ─► stage 1: groupBy(probe, key).transformWithState(KeyFoldProcessor)
                 ─► foreachBatch ─► anomalies topic, dead-letter topic, metrics
                                 └► facts topic ─► stage 2: groupBy(probe, writer bucket)
                                                   .transformWithState(TxnFoldProcessor)
                                                 ─► foreachBatch ─► anomalies topic, metrics

Stage 1 folds each key (topic-partition) with the checker core; stage 2 judges multi-write ops
across keys from the facts stage 1 sends (torn transactions; lost writes of ``info`` writers
proven committed by another of their writes). G1a needs no cross-key step: a writer's outcome
arrives on every key it wrote, in its completion's fragment of that key. G0 and G1c (cycles
over the whole dependency graph) stay offline in ``kmon check``: G0 is allowed in Kafka's
model, and a cycle search needs every op's dependencies, unbounded state online.

Both queries share the SparkSession, the checkpoint root (``keys/``, ``transactions/``, and
the driver's ``metrics/`` snapshots) and one ``Outputs``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from kmon.streaming import decode
from kmon.streaming.config import (
    ConfigError,
    MonitorConfig,
    state_partitions_for,
    txn_partitions_for,
)
from kmon.streaming.keyfold import FoldSettings
from kmon.streaming.metrics import E2E_BUCKETS, MonitorMetrics, registry_with
from kmon.streaming.outputs import KEYS, TRANSACTIONS, Outputs

log = logging.getLogger("kmon.monitor")

# Settings every monitor query needs, whatever the session was built with.
SQL_CONF = {
    # transformWithState needs RocksDB; changelog checkpointing writes only each batch's
    # changes instead of uploading snapshots every batch.
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    # Spark checks an Arrow batch's byte size after every row it writes to Python unless the
    # limit is INT_MAX, and for list columns that check walks the whole batch: quadratic.
    "spark.sql.execution.arrow.maxBytesPerBatch": "2147483647",
    # Bigger Arrow batches into the reading step: fewer, fuller rows per key.
    "spark.sql.execution.arrow.maxRecordsPerBatch": "20000",
}


def fold_settings(cfg: MonitorConfig) -> FoldSettings:
    return FoldSettings(
        grace_ns=int(cfg.grace_s * 1e9),
        unseen_grace_ns=None if cfg.unseen_grace_s is None else int(cfg.unseen_grace_s * 1e9),
        e2e_buckets_ns=tuple(int(b * 1e9) for b in E2E_BUCKETS),
        verdict_memory=cfg.verdict_memory,
        cluster=cfg.cluster,
        share_lock_ns=round(cfg.share_lock_s * 1e9),
        share_delivery_limit=cfg.share_delivery_limit,
        share_skew_ns=round(cfg.share_skew_s * 1e9),
        page_slots=cfg.state_page_slots,
        txn_buckets=cfg.txn_buckets,
    )


def _ms(seconds: float) -> str:
    return f"{round(seconds * 1000)} milliseconds"


def starting_offsets_of(cfg: MonitorConfig, partition: int) -> str:
    """``starting.offsets`` for one events partition's source (a partition a JSON map does
    not name starts at the earliest offset)."""
    if cfg.starting_offsets in ("earliest", "latest"):
        return cfg.starting_offsets
    named = json.loads(cfg.starting_offsets).get(cfg.events_topic, {})
    return json.dumps({cfg.events_topic: {str(partition): named.get(str(partition), -2)}})


def source_caps(cap: int, backlogs: Mapping[int, int],
                held: Mapping[int, int] | None = None) -> dict[int, int]:
    """Each events partition's share of ``max.events.per.trigger`` (``cap``), its source's
    ``maxOffsetsPerTrigger``: in proportion to the events it holds past where the monitor
    resumes (``backlogs``), or, while that is under one batch, to all the events it holds
    (``held``: its share of the traffic; none, an even share); at least half an even share
    each, the others sharing the rest.

    Spark prorates one source's cap over its partitions by their backlog; the monitor reads
    each partition as a source of its own (its own watermark, ``stage1``), so it does the
    same here, once at start. Split evenly, the cap lets a partition holding more events
    (probes' processes hash unevenly: 31% and 19% of the bench's events) fall behind the
    others in event time all through a backlog: reads whose sends are still in the slower
    partition pile up in each key's state as pending reads (the bench's heads grew from 20 KB
    to 170 KB a key), and the lowest watermark holds every verdict back. The floor keeps a
    partition whose backlog was small at start from being starved by its own traffic later.
    """
    weights = backlogs if sum(max(b, 0) for b in backlogs.values()) > cap else held or {}
    left = {p: max(weights.get(p, 0), 0) for p in backlogs}
    if not sum(left.values()):
        return dict.fromkeys(backlogs, -(-cap // max(len(backlogs), 1)))
    floor = -(-cap // (2 * len(left)))
    caps: dict[int, int] = {}
    while True:  # those under the floor get it; the rest share what is left in proportion
        share, total = cap - floor * len(caps), sum(left.values())
        small = {p for p, b in left.items() if share * b < floor * total}
        if not small:
            caps.update({p: -(-share * b // total) for p, b in left.items()})
            return caps
        caps.update(dict.fromkeys(small, floor))
        left = {p: b for p, b in left.items() if p not in small}


def stage1(spark: Any, cfg: MonitorConfig, partitions: Sequence[int],
           caps: Mapping[int, int] | None = None) -> Any:
    """The per-key query's output DataFrame (before the sink).

    Each events partition is its own Kafka source with its own event-time watermark, and the
    query's watermark is the lowest of them: evidence held up in one partition (its leader
    failing over, a probe's buffer draining) holds back absence verdicts until it arrives,
    where one watermark for the whole topic would follow the freshest partition and decide
    too early. Probes' clock ticks keep every partition's watermark moving. ``caps``: each
    partition's ``maxOffsetsPerTrigger`` (``source_caps``; default an even share of
    ``max.events.per.trigger``).
    """
    from kmon.streaming.processors import OUTPUT_SCHEMA, KeyFoldProcessor

    cap = cfg.max_events_per_trigger
    if cap and caps is None:
        caps = source_caps(cap, dict.fromkeys(partitions, 0))
    skew = None if cfg.max_future_skew_s is None else int(cfg.max_future_skew_s * 1000)
    sources = []
    for p in partitions:
        reader = (spark.readStream.format("kafka").options(**cfg.kafka_options())
                  .option("assign", json.dumps({cfg.events_topic: [p]}))
                  .option("startingOffsets", starting_offsets_of(cfg, p))
                  .option("includeHeaders", "true")  # the schema version header
                  # Events lost to retention before the monitor read them are a gap to log,
                  # not a reason to stop monitoring.
                  .option("failOnDataLoss", "false"))
        if caps:  # the setting caps a micro-batch; each source gets its share
            reader = reader.option("maxOffsetsPerTrigger", str(caps[p]))
        sources.append(reader.load())
    rows = decode.key_rows(sources, _ms(cfg.watermark_delay_s), skew)
    return rows.groupBy("probe", "kl", "ks").transformWithState(
        statefulProcessor=KeyFoldProcessor(fold_settings(cfg)),
        outputStructType=OUTPUT_SCHEMA, outputMode="Update", timeMode="EventTime")


def stage2(spark: Any, cfg: MonitorConfig, starting_offsets: str) -> Any:
    """The per-writer query's output DataFrame (before the sink)."""
    from pyspark.sql import functions as F

    from kmon.streaming.processors import OUTPUT_SCHEMA, TxnFoldProcessor

    raw = (spark.readStream.format("kafka").options(**cfg.kafka_options())
           .option("subscribe", cfg.facts_topic)
           .option("startingOffsets", starting_offsets)
           .option("failOnDataLoss", "false")
           .load())
    key = F.split(F.col("key").cast("string"), "/", 2)  # <bucket>/<probe>: txnfold
    records = (raw.select(key[0].cast("long").alias("bucket"), key[1].alias("probe"), "value")
               .where("bucket IS NOT NULL AND probe IS NOT NULL"))
    # No watermark here: stage 2's clock is stage 1's, carried by the facts.
    return records.groupBy("probe", "bucket").transformWithState(
        statefulProcessor=TxnFoldProcessor(int(cfg.grace_s * 1e9), cfg.verdict_memory,
                                           int(cfg.txn_retention_s * 1e9), cfg.txn_max_writers,
                                           cfg.txn_buckets, cfg.cluster),
        outputStructType=OUTPUT_SCHEMA, outputMode="Update", timeMode="None")


PARTITIONS_CHECK_S = 60.0  # how often a running monitor looks for new events partitions


class EventsTopicChanged(RuntimeError):
    """Partitions were added to the events topic while the monitor ran."""


class Monitor:
    """Builds, starts and stops the monitor. ``spark`` defaults to the active session."""

    def __init__(self, cfg: MonitorConfig, spark: Any = None, metrics: MonitorMetrics | None = None,
                 producer: Any = None, serve_metrics: bool = True,
                 stop: threading.Event | None = None) -> None:
        self.cfg = cfg
        self.spark = spark
        self._stop = stop or threading.Event()  # set: give up waiting for the events topic
        self.partitions: list[int] = []  # the events partitions read, one source each
        self._partitions_checked = 0.0
        self.metrics = metrics or MonitorMetrics(cluster=cfg.cluster)
        self.registry = registry_with(self.metrics)
        self._producer = producer
        self._made_producer: Any = None  # the outputs producer start() made: stop() closes it
        self._serve = serve_metrics and cfg.metrics_port > 0
        self.server: Any = None
        self.queries: dict[str, Any] = {}
        self.outputs: Outputs | None = None
        self._progress: _ProgressPoller | None = None
        self._stopped = threading.Event()
        self.source_caps: dict[int, int] | None = None  # events a batch per partition's source
        self.state_partitions = 0  # stage 1's partitions, known once started
        self.txn_partitions = 0  # stage 2's

    def start(self) -> None:
        from pyspark.sql import SparkSession

        from kmon.streaming.kafka import (
            end_offsets,
            ensure_topics,
            events_partitions,
            make_producer,
        )
        from kmon.streaming.session import quiet_expected_warnings
        from kmon.streaming.snapshots import HadoopSnapshotStore

        spark = self.spark or SparkSession.getActiveSession()
        if spark is None:
            raise RuntimeError("no active SparkSession: build one first")
        self.spark = spark
        quiet_expected_warnings(spark)
        for k, v in SQL_CONF.items():
            spark.conf.set(k, v)
        for k, v in self.cfg.spark_conf.items():  # keys without their "spark." prefix
            if k.startswith("sql."):
                spark.conf.set("spark." + k, v)
        sc = spark.sparkContext
        self.state_partitions = _partitions(
            spark, self.cfg.stage1_checkpoint, "state.partitions",
            state_partitions_for(self.cfg, sc.master, sc.defaultParallelism))
        self.txn_partitions = _partitions(
            spark, self.cfg.stage2_checkpoint, "txn.partitions",
            txn_partitions_for(self.cfg, self.state_partitions))
        topics = ensure_topics(self.cfg)
        if topics:
            self.metrics.output_topics({t.topic: t.replicas for t in topics}, topics[0].brokers)
        self.partitions = events_partitions(self.cfg, self._stop)
        self._partitions_checked = time.monotonic()
        resumed = _check_sources(spark, self.cfg, self.partitions)
        self.source_caps = caps = self._source_caps(resumed)
        producer = self._producer
        if producer is None:
            producer = self._made_producer = make_producer(self.cfg)
        self.outputs = Outputs(
            anomalies_topic=self.cfg.anomalies_topic, facts_topic=self.cfg.facts_topic,
            dead_letter_topic=self.cfg.dead_letter_topic, producer=producer,
            metrics=self.metrics, store=HadoopSnapshotStore(spark, self.cfg.metrics_dir),
            e2e_bounds_s=E2E_BUCKETS,
            drained_after_s=self.cfg.drained_after_s)
        restored = self.outputs.restore()
        if restored:
            log.info("restored metrics from the checkpoint (batches %s)",
                     restored.get("batches"))
        if self._serve:
            from prometheus_client import start_http_server

            self.server = start_http_server(self.cfg.metrics_port, self.cfg.metrics_host,
                                            registry=self.registry)
        # Stage 2 of a brand-new monitor starts where the facts topic ends now, before stage 1
        # writes any: older facts belong to a previous checkpoint's verdicts. (Not "latest":
        # that is resolved when stage 2 first runs, maybe after stage 1's first facts.)
        facts_start = "earliest"
        if not _exists(spark, self.cfg.stage1_checkpoint + "/offsets"):
            facts_start = end_offsets(self.cfg, self.cfg.facts_topic)
        trigger = _ms(self.cfg.trigger_s)
        # Each query's jobs in its own scheduler pool (session.POOLS_FILE): a query's thread
        # takes the pool set in the starting thread, and a query its shuffle partitions from
        # the session's conf when it starts (a new checkpoint records them).
        sc.setLocalProperty("spark.scheduler.pool", f"kmon-{KEYS}")
        spark.conf.set("spark.sql.shuffle.partitions", str(self.state_partitions))
        self.queries[KEYS] = (
            stage1(spark, self.cfg, self.partitions, caps).writeStream
            .queryName(f"kmon-{KEYS}")
            .foreachBatch(self.outputs.key_batch)
            .option("checkpointLocation", self.cfg.stage1_checkpoint)
            .trigger(processingTime=trigger).start())
        sc.setLocalProperty("spark.scheduler.pool", f"kmon-{TRANSACTIONS}")
        spark.conf.set("spark.sql.shuffle.partitions", str(self.txn_partitions))
        self.queries[TRANSACTIONS] = (
            stage2(spark, self.cfg, facts_start).writeStream
            .queryName(f"kmon-{TRANSACTIONS}")
            .foreachBatch(self.outputs.txn_batch)
            .option("checkpointLocation", self.cfg.stage2_checkpoint)
            .trigger(processingTime=_ms(self.cfg.txn_trigger_s)).start())
        spark.conf.set("spark.sql.shuffle.partitions", str(self.state_partitions))
        sc.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]
        self._progress = _ProgressPoller(self)
        self._progress.start()

    def _source_caps(self, resumed: list[str] | None) -> dict[int, int] | None:
        """Each events partition's cap a batch (``source_caps``), from its backlog now past
        the offsets stage 1's checkpoint last logged (``resumed``; None: a new one)."""
        from kmon.streaming.kafka import partition_ranges

        cap = self.cfg.max_events_per_trigger
        if not cap:
            return None
        try:
            ranges = partition_ranges(self.cfg, self.cfg.events_topic, self.partitions)
            backlogs = events_backlogs(self.cfg, ranges, resumed)
        except Exception:  # sizing only: an even split is what the monitor did before
            log.warning("could not read the events partitions' offsets; each partition's "
                        "source gets an even share of max.events.per.trigger", exc_info=True)
            ranges, backlogs = {}, dict.fromkeys(self.partitions, 0)
        held = {p: end - first for p, (first, end) in ranges.items()}
        caps = source_caps(cap, backlogs, held)
        log.info("events partitions' backlogs %s (events held %s): events a batch from each "
                 "at most %s", backlogs, held, caps)
        return caps

    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait until either query stops (raising its error, if any) or ``timeout`` passes."""
        import time as _time

        deadline = None if timeout is None else _time.monotonic() + timeout
        while True:
            self._check_partitions()
            for q in self.queries.values():
                if not q.isActive:
                    q.awaitTermination()  # re-raises the query's exception
                    return True
            if deadline is not None and _time.monotonic() >= deadline:
                return False
            self._stopped.wait(0.5)

    def _check_partitions(self) -> None:
        """Partitions added to the events topic would go unread: fail, naming them (the
        restart then asks for a new checkpoint, see ``_check_sources``)."""
        if not self.partitions or time.monotonic() - self._partitions_checked < PARTITIONS_CHECK_S:
            return
        from kmon.streaming.kafka import events_partitions

        self._partitions_checked = time.monotonic()
        now = events_partitions(self.cfg, wait=False)
        if now and now != self.partitions:
            raise EventsTopicChanged(
                f"the events topic {self.cfg.events_topic} now has partitions {now}; this "
                f"monitor reads {self.partitions}, one source each")

    def stop(self) -> None:
        self._stopped.set()
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        for q in self.queries.values():
            try:
                q.stop()
            except Exception:  # already failed: nothing to stop
                log.debug("stopping %s", q.name, exc_info=True)
        if self.outputs is not None:
            self.outputs.close()
        if self.server is not None:
            self.server[0].shutdown()
            self.server[0].server_close()
            self.server = None
        self._close_producer()

    def _close_producer(self) -> None:
        """Close the outputs producer if this monitor made it (a caller's stays the caller's),
        once: a supervisor may stop a monitor twice. A stopped monitor must leave no librdkafka
        client behind: a forgotten one reconnects to brokers for the life of the process, and
        under broker faults librdkafka clients have crashed processes they were only lingering
        in."""
        producer, self._made_producer = self._made_producer, None
        if producer is None:
            return
        try:
            # Every finished batch flushed its outputs; anything left is a failed batch's,
            # which the checkpoint replays: drop it rather than wait on an unreachable cluster
            # (close() flushes without a time limit).
            producer.purge()
            producer.close()
        except Exception:  # best effort: the process may be on its way out
            log.warning("closing the outputs producer", exc_info=True)


def _check_sources(spark: Any, cfg: MonitorConfig, partitions: list[int]) -> list[str] | None:
    """A checkpoint resumes only the sources it was written with: one per events partition.
    Its sources' last offsets (``_checkpoint_sources``)."""
    sources = _checkpoint_sources(spark, cfg.stage1_checkpoint)
    error = None if sources is None else sources_mismatch(sources, cfg, partitions)
    if error:
        raise ConfigError(error)
    return sources


def sources_mismatch(sources: list[str], cfg: MonitorConfig, partitions: list[int]) -> str:
    """Why a checkpoint whose sources logged ``sources`` (one offsets JSON each) cannot resume
    reading ``partitions`` one source each; "" if it can."""
    try:
        read = [sorted(int(p) for p in json.loads(line)[cfg.events_topic]) for line in sources]
    except (ValueError, KeyError, TypeError, AttributeError):
        read = None
    if read == [[p] for p in partitions]:
        return ""
    return (f"checkpoint: {cfg.checkpoint} was written by sources reading {read} of "
            f"{cfg.events_topic}, which now has partitions {partitions}; the monitor reads each "
            "partition as its own source and cannot resume it: give it a new checkpoint "
            "location (its state, and verdicts still pending, start afresh)")


def events_backlogs(cfg: MonitorConfig, ranges: Mapping[int, tuple[int, int]],
                    resumed: list[str] | None) -> dict[int, int]:
    """Events each partition holds (``ranges``: first and end offsets) past where stage 1
    starts reading: the offsets its checkpoint last logged (``resumed``, a JSON line per
    source), else ``starting.offsets``."""
    start: dict[int, int] = {}
    for line in resumed or ():
        try:
            start.update({int(p): int(o) for p, o in json.loads(line)[cfg.events_topic].items()})
        except (ValueError, KeyError, TypeError, AttributeError):
            continue  # unreadable: counted from the first offset
    if resumed is None:
        start = {p: _starts_at(starting_offsets_of(cfg, p), cfg.events_topic, p, first, end)
                 for p, (first, end) in ranges.items()}
    return {p: max(0, end - max(first, start.get(p, first)))
            for p, (first, end) in ranges.items()}


def _starts_at(spec: str, topic: str, partition: int, first: int, end: int) -> int:
    """The offset a new source reads from, given its ``startingOffsets`` (``spec``, as
    ``starting_offsets_of`` makes it; -2 is the earliest offset, -1 the latest)."""
    offset = {"earliest": -2, "latest": -1}.get(spec)
    if offset is None:
        offset = json.loads(spec)[topic][str(partition)]
    return first if offset == -2 else end if offset == -1 else int(offset)


def _last_offsets(spark: Any, checkpoint: str) -> list[str] | None:
    """The last offsets file a checkpoint logged: its version line, its metadata (JSON), then
    one JSON line per source; None: none yet."""
    from kmon.streaming.snapshots import HadoopDir

    offsets = HadoopDir(spark, checkpoint + "/offsets")
    batches = [int(n) for n in offsets.names() if n.isdigit()]
    if not batches:
        return None
    return [line for line in offsets.read(str(max(batches))).splitlines() if line.strip()]


def _checkpoint_sources(spark: Any, checkpoint: str) -> list[str] | None:
    """The last offsets a checkpoint logged, one JSON line per source; None: none yet."""
    lines = _last_offsets(spark, checkpoint)
    return None if lines is None else lines[2:]


def _partitions(spark: Any, checkpoint: str, setting: str, wanted: int) -> int:
    """The partition count a stateful query on ``checkpoint`` will use: ``wanted`` for a new
    checkpoint, else the count Spark recorded in it (the offsets' metadata), which a query
    restarted on it keeps whatever the session says: state is partitioned by it. A
    ``setting`` that differs is only logged."""
    frozen = recorded_partitions(_last_offsets(spark, checkpoint))
    if frozen is None:
        return wanted
    if frozen != wanted:
        log.warning("%s: the checkpoint %s was created with %d partitions and keeps them (%d "
                    "asked for); to change them, start on a new checkpoint location (state "
                    "and pending verdicts start afresh)", setting, checkpoint, frozen, wanted)
    return frozen


def recorded_partitions(offsets: list[str] | None) -> int | None:
    """The shuffle partitions an offsets file's lines record (None: none, or unreadable)."""
    if offsets is None:
        return None
    try:
        return int(json.loads(offsets[1])["conf"]["spark.sql.shuffle.partitions"])
    except (IndexError, KeyError, TypeError, ValueError):
        return None


def _exists(spark: Any, path: str) -> bool:
    jvm = spark.sparkContext._jvm
    p = jvm.org.apache.hadoop.fs.Path(path)
    return bool(p.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).exists(p))


PROGRESS_POLL_S = 0.5  # how often the queries' progress reports are read


class _ProgressPoller:
    """Feeds each query's progress reports to the metrics (events, rates, durations, state).

    Polled, not a ``StreamingQueryListener``: PySpark hands a Python listener every event
    converted field by field through py4j, and it ends each Java map it iterates on an
    exception, which it converts by looking up a dozen classes by name, each a scan of every
    jar on the classpath. Measured here: a tenth of the monitor JVM's CPU. A query's
    ``lastProgress`` is one JSON string; ``recentProgress`` fills in when batches ran faster
    than the polls."""

    def __init__(self, monitor: Monitor) -> None:
        self.monitor = monitor
        self.seen: dict[str, int] = {}  # stage -> the last batch reported
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kmon-progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop polling, after one last look (the reports of the batches done meanwhile)."""
        self._stop.set()
        self._thread.join(10)
        self.poll()

    def _run(self) -> None:
        while not self._stop.wait(PROGRESS_POLL_S):
            self.poll()

    def poll(self) -> None:
        with self._lock:
            for stage, q in list(self.monitor.queries.items()):
                try:
                    self._report(stage, q)
                except Exception:  # metrics must never take the monitor down
                    log.warning("reading the progress of %s", stage, exc_info=True)

    def _report(self, stage: str, query: Any) -> None:
        outputs = self.monitor.outputs
        last = query.lastProgress
        if outputs is None or last is None:
            return
        seen = self.seen.get(stage)
        if seen is not None and last.batchId <= seen:
            return
        reports = [last] if seen is not None and last.batchId == seen + 1 else [
            p for p in query.recentProgress if seen is None or p.batchId > seen]
        for p in sorted(reports, key=lambda p: p.batchId):
            outputs.progress(stage, _progress_dict(p))
        self.seen[stage] = last.batchId


def _progress_dict(p: Any) -> dict[str, Any]:
    return {
        "batchId": p.batchId,
        "numInputRows": p.numInputRows,
        "inputRowsPerSecond": p.inputRowsPerSecond,
        "durationMs": dict(p.durationMs or {}),
        "eventTime": dict(p.eventTime or {}),
        "stateOperators": [{"numRowsTotal": o.numRowsTotal, "memoryUsedBytes": o.memoryUsedBytes}
                           for o in (p.stateOperators or ())],
    }
