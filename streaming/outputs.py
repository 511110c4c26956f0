"""The driver side of both queries: deliver each micro-batch's outputs, count them, snapshot.

Each query's ``foreachBatch`` hands its (small) output here: evidence records, per-writer
facts, dead letters and per-key stats. One pass over the collected rows:

1. evidence (anomalies and unseen verdicts) goes to the anomalies topic, keyed by its
   deterministic id, stamped with ``detected_at`` (wall clock of emission);
2. facts go to the facts topic (stage 2's input) as stage 1 made their records, one per
   (key, writer bucket) and call (``keyfold.KeyFold._flush_facts``), keyed by probe and
   bucket (``txnfold.fact_key``); dead letters to the dead-letter topic with their reason and
   source position in headers;
3. the producer is flushed (a failed delivery fails the micro-batch: it is retried, never
   dropped), then counters and gauges are updated and a snapshot written (``snapshots``).

A micro-batch whose id the snapshot already covers is a replay after a crash: its outputs were
delivered and counted before, so it is skipped whole. Handlers of the two queries and the
progress listener share one lock, so a snapshot always matches the batch ids it records.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from kmon.streaming import evidence as ev
from kmon.streaming.keyfold import ANOMALY, DEAD, FACT, STATS, UNSEEN
from kmon.streaming.metrics import MonitorMetrics, broker_label, placement_labels
from kmon.streaming.snapshots import SnapshotStore
from kmon.streaming.txnfold import fact_key

PROFILE = os.environ.get("KMON_MONITOR_PROFILE") == "1"
log = logging.getLogger("kmon.monitor")

KEYS = "keys"  # stage 1: the query name suffix, the state operator label, the snapshot entry
TRANSACTIONS = "transactions"  # stage 2

REASON_HEADER = "kmon-dead-letter-reason"
SOURCE_HEADER = "kmon-dead-letter-source"
DETAIL_HEADER = "kmon-dead-letter-detail"
MAX_DEAD_LETTER_BYTES = 512 * 1024  # a huge malformed event is cut, not refused by the broker


class DeliveryError(RuntimeError):
    """Outputs could not be delivered to Kafka; the micro-batch fails and is retried."""


# What the JVM says when stop() interrupts a batch (Spark's StreamExecution.IO_EXCEPTION_NAMES).
_INTERRUPTIONS = ("java.lang.InterruptedException", "java.io.InterruptedIOException",
                  "java.nio.channels.ClosedByInterruptException")


class BatchInterrupted(RuntimeError):
    """A micro-batch whose collect ``stop()`` interrupted, named in two lines.

    Spark tells a stop from a failure of a Python ``foreachBatch`` by matching the Python
    error's text with a regular expression (StreamExecution.PROXY_ERROR: "py4j.protocol.
    Py4JJavaError: An error occurred while calling ...", then a line ": <interruption>").
    Matched against the whole Java stack trace (about 8 kB) that expression overflows the
    stream thread's stack: a stop mid-batch ended in a StackOverflowError dump instead of a
    clean stop. This error's text is the first two lines of the JVM's, so the match is cheap
    and still succeeds. (A job cancelled because the query was stopped is the same stop, and
    is said as an interruption.)
    """


def interruption(exc: BaseException) -> BatchInterrupted | None:
    """``exc`` as a ``BatchInterrupted`` if the JVM call it reports was interrupted or its job
    cancelled by a stop of the query, else None."""
    head = str(exc).split("\n", 2)[:2]
    if len(head) < 2 or not head[1].startswith(": "):
        return None
    cause = head[1][2:]
    if any(cause.startswith(name) for name in _INTERRUPTIONS):
        return BatchInterrupted(f"py4j.protocol.Py4JJavaError: {head[0]}\n{head[1]}")
    if "[SPARK_JOB_CANCELLED]" in cause and "was stopped" in cause:
        # The same stop, seen from the job the thread was waiting for: say it the way Spark's
        # check understands, keeping the cause.
        return BatchInterrupted(f"py4j.protocol.Py4JJavaError: {head[0]}\n"
                                f": {_INTERRUPTIONS[0]}: {cause}")
    return None


@contextmanager
def stop_aware() -> Iterator[None]:
    """Raise an interruption of the JVM calls within as ``BatchInterrupted``."""
    try:
        yield
    except Exception as exc:
        short = interruption(exc)
        if short is None:
            raise
        raise short from None


class Outputs:
    """Delivers and counts both stages' outputs; see the module docstring."""

    def __init__(self, *, anomalies_topic: str, facts_topic: str, dead_letter_topic: str,
                 producer: Any, metrics: MonitorMetrics, store: SnapshotStore | None,
                 e2e_bounds_s: tuple[float, ...],
                 clock: Callable[[], float] = time.time, flush_timeout_s: float = 120.0,
                 drained_after_s: float = 3600.0) -> None:
        self.topics = {ANOMALY: anomalies_topic, UNSEEN: anomalies_topic, FACT: facts_topic,
                       DEAD: dead_letter_topic}
        self.producer = producer
        self.metrics = metrics
        self.store = store
        self.e2e_bounds_s = e2e_bounds_s
        self.clock = clock
        self.flush_timeout_s = flush_timeout_s
        self.drained_after_s = drained_after_s  # metrics.drained.after
        self.lock = threading.RLock()
        self.done: dict[str, int] = {KEYS: -1, TRANSACTIONS: -1, "progress": -1}
        self._errors: list[str] = []
        self.restored = False
        self.key_state_bytes: dict[str, int] = {}  # serialized state per key (diagnostics)
        self.closed = False

    def close(self) -> None:
        """The monitor stopped its queries: wait for a batch handler or progress report still
        running, then refuse later ones. A stopped query's last callbacks can outlive stop()
        (progress reports arrive through Spark's asynchronous listener bus); a monitor started
        again on the same checkpoint would then race this one's numbered snapshots."""
        waited = self.lock.acquire(timeout=self.flush_timeout_s + 10)
        self.closed = True
        if waited:
            self.lock.release()
        else:
            log.warning("outputs closed while a batch handler still holds them")

    # -- restart ----------------------------------------------------------------------------
    def restore(self) -> dict[str, Any] | None:
        """Load the newest snapshot: counters and gauges, and which batches they include."""
        if self.store is None:
            return None
        with self.lock:
            data = self.store.load()
            if data is not None:
                self.metrics.restore(data.get("metrics", {}))
                self.done.update({k: int(v) for k, v in data.get("batches", {}).items()})
                self.restored = True
            return data

    def _save(self) -> None:
        if self.store is not None:
            self.store.save({"batches": dict(self.done), "metrics": self.metrics.snapshot(),
                             "written_at": self.clock()})

    # -- micro-batches ----------------------------------------------------------------------
    def key_batch(self, df: Any, batch_id: int) -> None:
        """``foreachBatch`` of stage 1."""
        self._batch(KEYS, df, batch_id)

    def txn_batch(self, df: Any, batch_id: int) -> None:
        """``foreachBatch`` of stage 2."""
        self._batch(TRANSACTIONS, df, batch_id)

    def _batch(self, stage: str, df: Any, batch_id: int) -> None:
        with stop_aware():
            t0 = time.perf_counter()
            rows = df.collect()
            t1 = time.perf_counter()
            self.handle(stage, batch_id, rows)
        if PROFILE:  # the driver's share of a batch, beside the workers' (processors._Profile)
            print(f"kmon-monitor-driver {stage} batch {batch_id}: {len(rows)} rows, collect "
                  f"{t1 - t0:.3f} s, handle {time.perf_counter() - t1:.3f} s",
                  file=sys.stderr, flush=True)

    def handle(self, stage: str, batch_id: int, rows: list[Any]) -> None:
        with self.lock:
            if self.closed:  # the monitor stopped: this batch is not committed, it is replayed
                raise BatchInterrupted(f"py4j.protocol.Py4JJavaError: {stage} batch {batch_id}"
                                       f"\n: {_INTERRUPTIONS[0]}: the monitor stopped")
            if batch_id <= self.done[stage]:
                log.info("%s batch %d is a replay: already delivered and counted", stage,
                         batch_id)
                return
            now = self.clock()
            counts: list[Callable[[], None]] = []
            for r in rows:
                kind = r["kind"]
                if kind in (ANOMALY, UNSEEN):
                    self._evidence(r, now, counts)
                elif kind == FACT:  # a facts record of bucket ``writer``, as it is
                    self._produce(self.topics[FACT], fact_key(r["probe"], r["writer"]),
                                  r["body"])
                elif kind == DEAD:
                    self._dead_letter(r, counts)
                elif kind == STATS and stage == KEYS:
                    self._stats(r, counts)
            self._flush()
            for c in counts:
                c()
            if stage == KEYS:
                self._prune(now)
            self.done[stage] = batch_id
            self._save()

    def _evidence(self, r: Any, now: float, counts: list) -> None:
        rec = json.loads(r["body"])
        rec["detected_at"] = int(now * 1e9)
        self._produce(self.topics[ANOMALY], r["id"], ev.to_json(rec))
        topic, part = placement_labels(r["topic"], r["part"], r["key"])
        broker = broker_label(r["broker"])
        if r["kind"] == UNSEEN:
            counts.append(lambda: self.metrics.unseen_verdict(topic, part, broker=broker))
        elif not r["upd"]:
            latency = now - (r["decided"] or 0) / 1e9
            atype = r["atype"]
            counts.append(lambda: self.metrics.anomaly(atype, topic, part, latency,
                                                       broker=broker, at=self.clock()))

    def _dead_letter(self, r: Any, counts: list) -> None:
        reason = r["atype"] or "unknown"
        raw = bytes(r["raw"]) if r["raw"] is not None else r["body"].encode()
        headers = [(REASON_HEADER, reason.encode()), (SOURCE_HEADER, (r["id"] or "").encode())]
        if r["raw"] is None:
            headers.append((DETAIL_HEADER, r["body"].encode()))
        self._produce(self.topics[DEAD], r["id"], raw[:MAX_DEAD_LETTER_BYTES], headers)
        counts.append(lambda: self.metrics.dead_letter(reason))

    def _stats(self, r: Any, counts: list) -> None:
        topic, part = placement_labels(r["topic"], r["part"], r["key"])
        broker = broker_label(r["broker"])
        key_id = f"{r['probe']}/{r['key']}"
        unseen, lag = r["unseen"] or 0, (r["lag"] or 0) / 1e9
        # gauges (replays are harmless), under the key's latest broker only
        self.metrics.key_stats(key_id, topic, part, unseen, lag, broker=broker,
                               settled=bool(r["settled"]), at=self.clock())
        self.key_state_bytes[key_id] = r["state_bytes"] or 0
        written = r["state_written"] or 0
        if written:
            counts.append(lambda: self.metrics.wrote_state(written))
        e2e = r["e2e"]
        if e2e and any(e2e):
            total = (r["e2e_sum"] or 0) / 1e9
            counts.append(lambda: self.metrics.end_to_end(topic, list(e2e), total,
                                                          broker=broker))

    def _prune(self, now: float) -> None:
        """Forget drained keys: settled, and no stats row since ``drained_after_s``."""
        for key_id in self.metrics.prune(self.drained_after_s, now):
            self.key_state_bytes.pop(key_id, None)

    # -- Kafka ------------------------------------------------------------------------------
    def _produce(self, topic: str, key: str, value: str | bytes,
                 headers: list[tuple[str, bytes]] | None = None) -> None:
        while True:
            try:
                self.producer.produce(topic, value=value, key=key, headers=headers,
                                      on_delivery=self._delivered)
                return
            except BufferError:  # the local queue is full: let it drain
                self.producer.poll(0.1)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._errors.append(f"{msg.topic()}: {err}")

    def _flush(self) -> None:
        left = self.producer.flush(self.flush_timeout_s)
        errors, self._errors = self._errors, []
        if left or errors:
            raise DeliveryError(f"{left} outputs undelivered after {self.flush_timeout_s:.0f}s;"
                                f" errors: {errors[:5]}")

    # -- progress ---------------------------------------------------------------------------
    def progress(self, stage: str, p: Any) -> None:
        """A query's progress report (``StreamingQueryProgress``-like, dict access)."""
        with self.lock:
            if self.closed:
                return  # a stopped monitor's late report: the next monitor counts its own
            batch = int(p["batchId"])
            counted = stage == KEYS and batch > self.done["progress"]
            events = int(p.get("numInputRows") or 0) if counted else 0
            ops = p.get("stateOperators") or ()
            state = {stage: (sum(int(o.get("numRowsTotal") or 0) for o in ops),
                             sum(int(o.get("memoryUsedBytes") or 0) for o in ops))} if ops else {}
            wm = (p.get("eventTime") or {}).get("watermark")
            delay = None
            now = self.clock()
            if stage == KEYS and wm:
                ts = _epoch(wm)
                if ts > 0:
                    delay = max(0.0, now - ts)
            duration = ((p.get("durationMs") or {}).get("triggerExecution") or 0) / 1000
            rate = float(p.get("inputRowsPerSecond") or 0.0) if stage == KEYS else 0.0
            if stage == KEYS:
                self.metrics.progress(events=events, input_rate=rate, duration_s=duration,
                                      state=state, watermark_delay_s=delay, finished_at=now)
            else:
                with self.metrics.lock:
                    for op, (rows, nbytes) in state.items():
                        self.metrics.state_rows[op] = rows
                        self.metrics.state_bytes[op] = nbytes
            if counted:
                self.done["progress"] = batch
                self._save()


def _epoch(iso: str) -> float:
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
