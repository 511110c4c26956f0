"""The history as it happens: op indices and times, the local file, the op events.

``Recorder`` is the one place ops are born: it stamps each with the next index and the current
time under one lock, so the history is totally ordered (index and time both increase), writes
it to the optional ``.jsonl`` file and hands it to the ``Emitter``. It also keeps each process's
pending invocation, so a shutdown can complete what never finished as ``info`` and the history
stays well-formed (every invoke has exactly one completion).

``Emitter`` produces each op as an Avro op event (``kmon.history.avro``), keyed by process so
one process's events stay in order in one partition, idempotently with acks=all. Its bounded
buffer is librdkafka's own queue: when full, ``produce`` raises at once and the event is
dropped and counted (``kmon_probe_events_dropped_total``, and a warning in the log), never
blocking the workload. Events that fail delivery for good are counted the same way.

Every ``tick_interval`` seconds the emitter also sends a clock tick (``clock_tick``: no process,
no key) to each partition of the events topic, after this probe's earlier events there. The
monitor keeps one event-time watermark per events partition and decides absence verdicts on the
lowest, so a partition that falls behind (its leader failing over, a slow broker) holds verdicts
back instead of letting evidence stuck in it arrive too late; the ticks keep partitions that no
process of any probe writes to from holding it back forever. Ticks are not op events: they are
not counted as emitted or dropped, and one that finds the buffer full is simply skipped.

An event whose delivery timed out renews the producer (at most once a minute): librdkafka 2.16
can keep a partition's new leader unresolved ("new leader N not found in cache") and time out
everything sent to it; chaos seed 12 saw one probe drop 1,812 events over nine minutes so. The
new producer starts from fresh metadata; the old one stays served until its queue is empty
(what it still holds is delivered or dropped and counted, as before).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, TextIO

from confluent_kafka import KafkaError, Producer

from kmon.history import JsonlWriter, Op, OpMeta, Rebalance
from kmon.history.avro import encode_op, kafka_headers
from kmon.history.model import clock_tick
from kmon.probes.metrics import ProbeMetrics

log = logging.getLogger("kmon.probes")

PARTITIONS_REFRESH = 60.0  # seconds between looks at the events topic's partitions
RENEW_EVERY = 60.0  # seconds at least between two renewals of the events producer


@dataclass
class Pending:
    f: str
    invoke_time: int
    value: Any
    meta: OpMeta


class Recorder:
    def __init__(
        self,
        probe_id: str,
        metrics: ProbeMetrics,
        emitter: Emitter | None = None,
        history: TextIO | None = None,
    ) -> None:
        self.probe_id = probe_id
        self.metrics = metrics
        self.emitter = emitter
        self.history = history
        self.writer = JsonlWriter(history) if history is not None else None
        self.lock = threading.Lock()
        self.next_index = 0
        self.pending: dict[int, Pending] = {}
        # Processes whose call hung past every bound (``retire``), or all (``seal``): a hung
        # call that returns later must not add ops after the info that ended its process.
        self.retired: set[int] = set()
        self.sealed = False
        self.last_time = 0
        self.outcomes: Counter[str] = Counter()  # "<f> <type>" of each completion

    def meta(self, **fields: Any) -> OpMeta:
        return OpMeta(probe=self.probe_id, **fields)

    def invoke(self, process: int, f: str, value: Any, meta: OpMeta | None = None) -> Op:
        meta = meta if meta is not None else self.meta()
        with self.lock:
            if self.sealed or process in self.retired:  # a late return: kept out
                return Op(-1, time.time_ns(), process, "invoke", f, value, (), meta)
            if process in self.pending:
                raise RuntimeError(f"process {process} invoked {f} with an op still pending")
            op = self._record(process, "invoke", f, value, (), meta)
            self.pending[process] = Pending(f, op.time, value, meta)
        return op

    def complete(
        self,
        process: int,
        type_: str,
        value: Any,
        meta: OpMeta | None = None,
        rebalance_log: tuple[Rebalance, ...] = (),
    ) -> Op | None:
        """Record the completion of ``process``'s pending op; None if shutdown already
        completed it as info (the late result is dropped: the history said info)."""
        with self.lock:
            pending = self.pending.pop(process, None)
            if pending is None:
                return None
            meta = meta if meta is not None else self.meta()
            meta.invoke_time = pending.invoke_time
            op = self._record(process, type_, pending.f, value, rebalance_log, meta)
        self.outcomes[f"{op.f} {type_}"] += 1
        self.metrics.completed(op.f, type_, (op.time - pending.invoke_time) / 1e9, op.time / 1e9,
                               read_records=_read_records(op.value))
        return op

    def retire(self, process: int, reason: str) -> bool:
        """Complete ``process``'s pending op as info and record nothing of it afterwards (its
        call hung and may return some day); True if an op was pending."""
        with self.lock:
            self.retired.add(process)
        return self.complete_abandoned_process(process, reason)

    def retire_pending(self, reason: str) -> int:
        """``retire`` every process with an op pending (shutdown while ops hang); returns
        how many."""
        with self.lock:
            stuck = list(self.pending)
        return sum(self.retire(p, reason) for p in stuck)

    def seal(self, reason: str) -> int:
        """Record nothing more: the history ends here, however many calls still hang; each
        op still pending is completed as info. Returns how many were."""
        with self.lock:
            self.sealed = True
        return self.retire_pending(reason)

    def complete_abandoned_process(self, process: int, reason: str) -> bool:
        """Complete ``process``'s pending op, if any, as info with ``reason`` as its error."""
        with self.lock:
            pending = self.pending.get(process)
        if pending is None:
            return False
        meta = self.meta(transactional_id=pending.meta.transactional_id,
                         txn_seq=pending.meta.txn_seq,
                         deliberate_abort=pending.meta.deliberate_abort,
                         group=pending.meta.group, error=reason)
        return self.complete(process, "info", pending.value, meta) is not None

    def _record(
        self, process: int, type_: str, f: str, value: Any,
        rebalance_log: tuple[Rebalance, ...], meta: OpMeta,
    ) -> Op:
        # Called with the lock held: index and time increase together.
        now = max(time.time_ns(), self.last_time + 1)
        self.last_time = now
        op = Op(self.next_index, now, process, type_, f, value, tuple(rebalance_log), meta)
        self.next_index += 1
        if self.writer is not None:
            self.writer.write(op)
        if self.emitter is not None:
            self.emitter.emit(op)
        return op

    def flush(self) -> None:
        with self.lock:
            if self.history is not None:
                self.history.flush()


class Emitter:
    """Op events to the events topic; see the module docstring."""

    def __init__(self, producer_config: dict[str, Any], topic: str, metrics: ProbeMetrics,
                 probe: str = "", tick_interval: float = 0.0) -> None:
        self.topic = topic
        self.metrics = metrics
        self._config = producer_config
        self.producer = Producer(producer_config)
        self.renewals = 0
        self._renew_due = False  # a delivery timed out: renew the producer
        self._renewed_at = -RENEW_EVERY
        self._retired: list[Producer] = []  # renewed away, still delivering what they hold
        self.emitted = 0
        self.dropped = 0
        self.delivered = 0
        self.probe = probe
        self.tick_interval = tick_interval  # 0: no ticks
        self.ticks = 0  # ticks produced
        self._ticks_queued = 0  # produced, no delivery report yet (not op events when flushed)
        self._partitions: list[int] = []
        self._partitions_at = -PARTITIONS_REFRESH
        self._last_warning = 0.0
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._serve, name="kmon-probe-events",
                                        daemon=True)
        self._poller.start()

    def emit(self, op: Op) -> None:
        data = encode_op(op)
        try:
            self.producer.produce(
                self.topic, value=data, key=str(op.process).encode(),
                headers=kafka_headers(), on_delivery=self._on_delivery,
            )
        except BufferError:
            self._drop("the events buffer is full")
            return
        self.emitted += 1
        self.metrics.events_emitted.inc()

    def _on_delivery(self, err: KafkaError | None, _msg: Any) -> None:
        if err is None:
            self.delivered += 1
        else:
            self._drop(f"delivery failed: {err.name()}: {err.str()}")
            if err.code() == KafkaError._MSG_TIMED_OUT:
                self._renew_due = True

    def _drop(self, why: str) -> None:
        self.dropped += 1
        self.metrics.events_dropped.inc()
        now = time.monotonic()
        if now - self._last_warning > 10:
            self._last_warning = now
            log.warning("op event dropped (%s); %d dropped so far", why, self.dropped)

    def _serve(self) -> None:
        next_tick = time.monotonic()
        while not self._stop.is_set():
            self.producer.poll(0.2)
            self._serve_retired()
            if self._renew_due and time.monotonic() - self._renewed_at >= RENEW_EVERY:
                self.renew()
            if self.tick_interval > 0 and time.monotonic() >= next_tick:
                next_tick = time.monotonic() + self.tick_interval
                self.tick()

    def renew(self) -> None:
        """A new producer for what comes next; the old one is served until it is empty."""
        self._renew_due, self._renewed_at = False, time.monotonic()
        self._retired.append(self.producer)
        self.producer = Producer(self._config)
        self.renewals += 1
        log.warning("events producer renewed after a delivery timed out (%d renewals)",
                    self.renewals)

    def _serve_retired(self) -> None:
        for p in list(self._retired):
            p.poll(0)
            if len(p) == 0:
                self._retired.remove(p)

    def tick(self) -> None:
        """A clock tick, now, to every partition of the events topic."""
        data, headers = encode_op(clock_tick(time.time_ns(), self.probe)), kafka_headers()
        for p in self._events_partitions():
            try:
                self.producer.produce(self.topic, value=data, partition=p, headers=headers,
                                      on_delivery=self._on_tick)
            except BufferError:
                return  # op events fill the buffer: they matter more, and move the clock too
            self.ticks += 1
            self._ticks_queued += 1

    def _on_tick(self, _err: KafkaError | None, _msg: Any) -> None:
        self._ticks_queued -= 1  # a lost tick is harmless: the next one says more

    def _events_partitions(self) -> list[int]:
        now = time.monotonic()
        if now - self._partitions_at >= PARTITIONS_REFRESH:  # partitions may be added
            self._partitions_at = now
            try:
                topic = self.producer.list_topics(self.topic, timeout=5).topics[self.topic]
                if topic.error is None:
                    self._partitions = sorted(topic.partitions)
            except Exception as exc:  # KafkaException, a missing topic: keep the last list
                log.info("events topic metadata: %s", exc)
        return self._partitions

    def close(self, timeout: float) -> int:
        """Flush what is buffered (at most ``timeout`` s); returns events never delivered."""
        self._stop.set()
        self._poller.join(1.0)
        left = self.producer.flush(timeout) + sum(p.flush(timeout) for p in self._retired)
        left = max(0, left - self._ticks_queued)  # undelivered ticks are no op events
        if left:
            for _ in range(left):
                self._drop("not delivered before shutdown")
        if self.dropped:
            log.warning("%d of %d op events were dropped", self.dropped,
                        self.emitted + self.dropped - left)
        return left


def _read_records(value: Any) -> bool:
    """Whether an op's value holds a poll that returned at least one record."""
    if not isinstance(value, list):
        return False
    return any(m[0] == "poll" and m[1] and any(m[1].values()) for m in value
               if isinstance(m, tuple) and len(m) == 2)
