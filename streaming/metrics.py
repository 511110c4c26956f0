"""The monitor's Prometheus metrics, declared once (names and labels: ``docs/metrics.md``).

The values live in plain dicts owned by ``MonitorMetrics`` and are exported by a custom
collector, not by prometheus_client's own Counter objects, because they must survive a restart:
``snapshot()``/``restore()`` carry every counter, histogram, the last gauges and each anomaly
series' latest verdict time through the checkpoint (see ``snapshots``). A restarted monitor
continues its counters; it never silently starts again from zero.

Every metric carries ``cluster``, the monitor's ``cluster`` setting (one value per monitor).

Label sets are bounded: ``topic``/``partition`` range over probe topics (a key without a
placement is labelled topic ``unknown`` and its key as the partition), ``anomaly`` over the
checker's names, ``reason`` over ``decode.REASONS``, ``operator`` over the two stages, and
``broker`` over the cluster's broker ids (the leader of the key as the probes' metadata last
said; ``unknown`` when no event said). Leaders change, so how ``broker`` stays bounded:

- gauges (``kmon_unseen_values``, ``kmon_realtime_lag_seconds``) are kept per key id with the
  key's *latest* broker only: a key whose leader moves moves its contribution to the new
  series, the old series disappears once no key is on it. At most one series per key.
- counters and histograms (``kmon_anomalies_total``, ``kmon_unseen_verdicts_total``,
  ``kmon_end_to_end_delay_seconds``) and ``kmon_anomaly_last_timestamp_seconds`` keep each
  series that ever counted something (a counter must not vanish; but see drained keys below
  for the histograms): at most one per anomaly type (or none) x topic-partition x broker that
  led it while something was counted, so at most the cluster's broker count times the former
  bounds.

``kmon_anomalies_total`` (every anomaly type) and ``kmon_unseen_verdicts_total`` are exported at
0 for each (topic, partition, current broker) the gauges know, so an alert's ``increase()``
fires on the first anomaly (a series born at 1 has no increase) and dashboards show zeros, not
"no data". ``kmon_anomaly_last_timestamp_seconds`` is when the monitor counted the series'
latest new verdict (wall clock): it survives restarts, so "a verdict in the last N minutes"
holds across them where ``increase()`` over a restart would not.

Keys come and go (a probe retires its topics), so gauges and zero series follow the live keys
only. A key whose latest stats row said it was *settled* (its fold has nothing left to judge
and registered no timer) and that has sent none since for ``drained_after_s`` (the
``metrics.drained.after`` setting) is *drained* (``prune``): its gauge entries go, and so do
the zero series of its topic-partition, and the end-to-end histograms of its topic once no
key is left on it. Its anomaly and unseen-verdict series that counted something stay, with
their verdict times (a counter that vanishes and comes back breaks ``increase()``, and the
evidence of a retired topic is still worth a dashboard's look; they are bounded by the
anomalies themselves).
A drained key that receives events again comes back with its next stats row.

``kmon_monitor_output_topic_replicas`` and ``kmon_monitor_brokers`` are what the cluster's
metadata showed when the monitor started (``kafka.ensure_topics``).

``kmon_monitor_last_batch_timestamp_seconds`` starts at ``kmon_monitor_start_timestamp_seconds``
(the process's start), so a monitor that never completes a micro-batch shows it ageing.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.registry import Collector, CollectorRegistry

from kmon.checker.anomaly import ANOMALY_TYPES

# Bucket upper bounds (seconds). The end-to-end histogram's bounds are also the folds'.
E2E_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
               30.0, 60.0)
BATCH_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
DETECTION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0)

ANOMALIES = "kmon_anomalies_total"
UNSEEN_VALUES = "kmon_unseen_values"
UNSEEN_VERDICTS = "kmon_unseen_verdicts_total"
REALTIME_LAG = "kmon_realtime_lag_seconds"
E2E_DELAY = "kmon_end_to_end_delay_seconds"
EVENTS = "kmon_monitor_events_total"
INPUT_RATE = "kmon_monitor_input_events_per_second"
BATCH_DURATION = "kmon_monitor_batch_duration_seconds"
STATE_ROWS = "kmon_monitor_state_rows"
STATE_BYTES = "kmon_monitor_state_bytes"
STATE_WRITTEN = "kmon_monitor_state_written_bytes_total"
WATERMARK_DELAY = "kmon_monitor_watermark_delay_seconds"
LAST_BATCH = "kmon_monitor_last_batch_timestamp_seconds"
START = "kmon_monitor_start_timestamp_seconds"
ANOMALY_LAST = "kmon_anomaly_last_timestamp_seconds"
DEAD_LETTERS = "kmon_dead_letters_total"
DETECTION_LATENCY = "kmon_detection_latency_seconds"
OUTPUT_REPLICAS = "kmon_monitor_output_topic_replicas"
BROKERS = "kmon_monitor_brokers"

UNKNOWN_BROKER = "unknown"  # broker label of a key whose events named no leader
# When this process started, as near as Python code can tell: this module is imported as the
# monitor starts (before Spark).
PROCESS_START = time.time()


class Histogram:
    """Bucket counts (non-cumulative, last = +Inf) and a sum; mergeable and serializable."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, x: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, x)] += 1
        self.sum += x

    def add_counts(self, counts: list[int], total: float) -> None:
        for i, n in enumerate(counts[: len(self.counts)]):
            self.counts[i] += n
        self.sum += total

    def cumulative(self) -> list[tuple[str, float]]:
        out, acc = [], 0
        for le, n in zip([*map(_le, self.bounds), "+Inf"], self.counts, strict=True):
            acc += n
            out.append((le, acc))
        return out

    def to_json(self) -> list[Any]:
        return [self.counts, self.sum]

    def load(self, data: list[Any]) -> None:
        counts, total = data
        if len(counts) == len(self.counts):
            self.counts, self.sum = list(counts), float(total)


def _le(x: float) -> str:
    return repr(float(x))


def placement_labels(topic: str | None, partition: int | None, key: str) -> tuple[str, str]:
    """(topic, partition) labels of a key; without a placement: ``unknown`` and the key."""
    if topic is None or partition is None or partition < 0:
        return ("unknown", key.strip('"'))
    return (topic, str(partition))


def broker_label(leader: int | None) -> str:
    """The ``broker`` label of a leader broker id; ``unknown`` when none is known."""
    if leader is None or leader < 0:
        return UNKNOWN_BROKER
    return str(leader)


class Placed(NamedTuple):
    """Where a series' key lives: its topic, partition and broker labels."""

    topic: str
    partition: str
    broker: str


class AnomalySeries(NamedTuple):
    """The labels (but cluster) of one ``kmon_anomalies_total`` series."""

    anomaly: str
    topic: str
    partition: str
    broker: str


class KeyGauge(NamedTuple):
    """One key's latest gauge value and the labels it goes to."""

    topic: str
    partition: str
    broker: str
    value: float


class TopicPlace(NamedTuple):
    """A topic-partition's labels."""

    topic: str
    partition: str


class MonitorMetrics(Collector):
    """Every monitor metric's current value, thread-safe; register it on a registry.

    ``cluster``: the ``cluster`` label; ``started_at``: the process's start (unix seconds), the
    start timestamp and the first last-batch timestamp. ``clock``: the wall clock verdict
    times are read from."""

    def __init__(self, cluster: str = "local", started_at: float | None = None,
                 clock: Any = time.time) -> None:
        self.lock = threading.RLock()
        self.cluster = cluster
        self.started_at = PROCESS_START if started_at is None else started_at
        self.clock = clock
        self.anomalies: dict[AnomalySeries, int] = {}
        self.anomaly_last: dict[AnomalySeries, float] = {}  # wall clock of the latest verdict
        self.unseen_verdicts: dict[Placed, int] = {}
        self.unseen_values: dict[str, KeyGauge] = {}  # key id -> its latest labels and count
        self.lags: dict[str, KeyGauge] = {}  # key id -> its latest labels and lag (s)
        self.e2e: dict[tuple[str, str], Histogram] = {}  # (topic, broker) ->
        self.events = 0
        self.state_written = 0  # bytes the per-key stage put in its state store
        self.input_rate = 0.0
        self.batch_duration = Histogram(BATCH_BUCKETS)
        self.state_rows: dict[str, int] = {}
        self.state_bytes: dict[str, int] = {}
        self.watermark_delay: float | None = None
        self.last_batch: float = self.started_at
        self.dead_letters: dict[str, int] = {}
        self.detection: dict[str, Histogram] = {}
        self.settled: dict[str, float] = {}  # key id -> wall clock of its latest settled stats
        self.drained: set[TopicPlace] = set()  # drained topic-partitions with counted series
        self.output_replicas: dict[str, int] = {}  # output topic -> replicas (at start)
        self.brokers: int | None = None

    # -- updates (callers hold no lock; each method takes it) ------------------------------
    def anomaly(self, anomaly: str, topic: str, partition: str, latency_s: float, *,
                broker: str = UNKNOWN_BROKER, at: float | None = None) -> None:
        """A new verdict, counted at ``at`` (default: now)."""
        with self.lock:
            k = AnomalySeries(anomaly, topic, partition, broker)
            self.anomalies[k] = self.anomalies.get(k, 0) + 1
            self.anomaly_last[k] = self.clock() if at is None else at
            h = self.detection.get(anomaly)
            if h is None:
                h = self.detection[anomaly] = Histogram(DETECTION_BUCKETS)
            h.observe(max(0.0, latency_s))

    def unseen_verdict(self, topic: str, partition: str, *,
                       broker: str = UNKNOWN_BROKER) -> None:
        with self.lock:
            k = Placed(topic, partition, broker)
            self.unseen_verdicts[k] = self.unseen_verdicts.get(k, 0) + 1

    def key_stats(self, key_id: str, topic: str, partition: str, unseen: int,
                  lag_s: float, *, broker: str = UNKNOWN_BROKER, settled: bool = False,
                  at: float | None = None) -> None:
        """A key's gauges; they replace the key's previous ones, whatever their labels.
        ``settled``: the key's fold has nothing left to judge (``at``: when, default now)."""
        with self.lock:
            self.unseen_values[key_id] = KeyGauge(topic, partition, broker, unseen)
            self.lags[key_id] = KeyGauge(topic, partition, broker, lag_s)
            self.drained.discard(TopicPlace(topic, partition))
            if settled:
                self.settled[key_id] = self.clock() if at is None else at
            else:
                self.settled.pop(key_id, None)

    def prune(self, drained_after_s: float, now: float | None = None) -> list[str]:
        """Drop the gauges of keys settled more than ``drained_after_s`` ago (and, with them,
        their topic-partitions' zero series); returns the key ids dropped."""
        with self.lock:
            cutoff = (self.clock() if now is None else now) - drained_after_s
            gone = [k for k, t in self.settled.items() if t <= cutoff]
            topics = set()
            for k in gone:
                del self.settled[k]
                g = self.unseen_values.pop(k, None) or self.lags.get(k)
                self.lags.pop(k, None)
                if g is not None:
                    self.drained.add(TopicPlace(g.topic, g.partition))
                    topics.add(g.topic)
            if gone:
                self._forget_drained()
                self._drop_histograms(topics)
            return gone

    def _drop_histograms(self, topics: set[str]) -> None:
        """End-to-end histograms of topics no key is left on: one per retired probe topic
        otherwise. (A histogram that stops is read with rate(), which ends with it.)"""
        live = {g.topic for g in self.unseen_values.values()}
        for t, b in [tb for tb in self.e2e if tb[0] in topics - live]:
            del self.e2e[(t, b)]

    def _forget_drained(self) -> None:
        """Keep only drained topic-partitions that still matter: with a counted series (the
        zero series would bring them back) and no live key on them."""
        live = {TopicPlace(g.topic, g.partition) for g in self.unseen_values.values()}
        counted = {TopicPlace(k.topic, k.partition) for k in self.anomalies}
        counted |= {TopicPlace(p.topic, p.partition) for p in self.unseen_verdicts}
        self.drained = (self.drained & counted) - live

    def output_topics(self, replicas: dict[str, int], brokers: int) -> None:
        """The output topics' replica counts and the cluster's broker count, at start."""
        with self.lock:
            self.output_replicas = dict(replicas)
            self.brokers = brokers

    def end_to_end(self, topic: str, counts: list[int], total_s: float, *,
                   broker: str = UNKNOWN_BROKER) -> None:
        with self.lock:
            h = self.e2e.get((topic, broker))
            if h is None:
                h = self.e2e[(topic, broker)] = Histogram(E2E_BUCKETS)
            h.add_counts(counts, total_s)

    def wrote_state(self, nbytes: int) -> None:
        with self.lock:
            self.state_written += nbytes

    def dead_letter(self, reason: str, n: int = 1) -> None:
        with self.lock:
            self.dead_letters[reason] = self.dead_letters.get(reason, 0) + n

    def progress(self, *, events: int, input_rate: float, duration_s: float,
                 state: dict[str, tuple[int, int]], watermark_delay_s: float | None,
                 finished_at: float) -> None:
        """One micro-batch's progress report (``events`` only from the stage reading events)."""
        with self.lock:
            self.events += events
            if events or input_rate:
                self.input_rate = input_rate
            self.batch_duration.observe(duration_s)
            for op, (rows, nbytes) in state.items():
                self.state_rows[op] = rows
                self.state_bytes[op] = nbytes
            if watermark_delay_s is not None:
                self.watermark_delay = watermark_delay_s
            self.last_batch = finished_at

    # -- persistence ----------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "anomalies": [[*k, n] for k, n in self.anomalies.items()],
                "anomaly_last": [[*k, t] for k, t in self.anomaly_last.items()],
                "unseen_verdicts": [[*k, n] for k, n in self.unseen_verdicts.items()],
                "unseen_values": {k: list(v) for k, v in self.unseen_values.items()},
                "lags": {k: list(v) for k, v in self.lags.items()},
                "e2e_by_broker": [[t, b, h.to_json()] for (t, b), h in self.e2e.items()],
                "events": self.events,
                "state_written": self.state_written,
                "batch_duration": self.batch_duration.to_json(),
                "dead_letters": dict(self.dead_letters),
                "detection": {a: h.to_json() for a, h in self.detection.items()},
                "settled": dict(self.settled),
                "drained": sorted(self.drained),
            }

    def restore(self, data: dict[str, Any]) -> None:
        """Values from ``snapshot()``'s, also one written before the ``broker`` label (its
        series get broker ``unknown``)."""
        with self.lock:
            self.anomalies = {AnomalySeries(*_brokered(k, 3)): int(n)
                              for *k, n in data.get("anomalies", ())}
            self.anomaly_last = {AnomalySeries(*k): float(t)
                                 for *k, t in data.get("anomaly_last", ())}
            self.unseen_verdicts = {Placed(*_brokered(k, 2)): int(n)
                                    for *k, n in data.get("unseen_verdicts", ())}
            self.unseen_values = {k: KeyGauge(*_brokered(v[:-1], 2), v[-1])
                                  for k, v in data.get("unseen_values", {}).items()}
            self.lags = {k: KeyGauge(*_brokered(v[:-1], 2), v[-1])
                         for k, v in data.get("lags", {}).items()}
            self.e2e = {}
            raw_e2e = [(t, UNKNOWN_BROKER, raw) for t, raw in data.get("e2e", {}).items()]
            for t, b, raw in [*raw_e2e, *data.get("e2e_by_broker", ())]:
                self.e2e[(t, b)] = Histogram(E2E_BUCKETS)
                self.e2e[(t, b)].load(raw)
            self.events = int(data.get("events", 0))
            self.state_written = int(data.get("state_written", 0))
            if "batch_duration" in data:
                self.batch_duration.load(data["batch_duration"])
            self.dead_letters = {r: int(n) for r, n in data.get("dead_letters", {}).items()}
            self.detection = {}
            for a, raw in data.get("detection", {}).items():
                self.detection[a] = Histogram(DETECTION_BUCKETS)
                self.detection[a].load(raw)
            self._restore_drain(data)

    def _restore_drain(self, data: dict[str, Any]) -> None:
        """Which keys were settled, and when. A snapshot written before this was recorded
        names none: its keys count as settled now, so that a key that never reports again is
        still drained (a live or pending key reports within a batch or a timer, unsettling
        itself)."""
        if "settled" in data:
            self.settled = {k: float(t) for k, t in data["settled"].items()}
        else:
            now = self.clock()
            self.settled = {k: now for k in self.unseen_values.keys() | self.lags.keys()}
        self.drained = {TopicPlace(*p) for p in data.get("drained", ())}

    # -- export ---------------------------------------------------------------------------
    def _zero_placements(self) -> set[Placed]:
        """The zero series' labels: each key's current (topic, partition, broker), and the
        labels of counted series on a topic-partition no key's gauges name (restored ones)."""
        current = {Placed(g.topic, g.partition, g.broker)
                   for d in (self.unseen_values, self.lags) for g in d.values()}
        known = {(p.topic, p.partition) for p in current}
        counted = {Placed(k.topic, k.partition, k.broker) for k in self.anomalies}
        counted |= set(self.unseen_verdicts)
        known |= self.drained  # a drained key's topic-partition: no zeros (TopicPlace is a tuple)
        return current | {p for p in counted if (p.topic, p.partition) not in known}

    def collect(self) -> Iterator[Any]:
        cl = self.cluster
        with self.lock:
            c = CounterMetricFamily(ANOMALIES, "Verdicts emitted, each anomaly once.",
                                    labels=["cluster", "anomaly", "topic", "partition",
                                            "broker"])
            seen = self._zero_placements()
            zeros = {AnomalySeries(a, *p): 0 for a in ANOMALY_TYPES for p in seen}
            for k, n in sorted((zeros | self.anomalies).items()):
                c.add_metric([cl, *k], n)
            yield c
            g = GaugeMetricFamily(ANOMALY_LAST, "When the monitor counted the series' latest "
                                  "new verdict (unix seconds, wall clock).",
                                  labels=["cluster", "anomaly", "topic", "partition", "broker"])
            for k, t in sorted(self.anomaly_last.items()):
                g.add_metric([cl, *k], t)
            yield g
            g = GaugeMetricFamily(UNSEEN_VALUES, "Acknowledged values no poll has returned yet.",
                                  labels=["cluster", "topic", "partition", "broker"])
            for p, n in sorted(_sum_by_label(self.unseen_values).items()):
                g.add_metric([cl, *p], n)
            yield g
            c = CounterMetricFamily(UNSEEN_VERDICTS,
                                    "Values unseen for longer than the unseen grace period.",
                                    labels=["cluster", "topic", "partition", "broker"])
            for p, n in sorted(({p: 0 for p in seen} | self.unseen_verdicts).items()):
                c.add_metric([cl, *p], n)
            yield c
            g = GaugeMetricFamily(REALTIME_LAG,
                                  "Worst realtime lag of any consumer at its latest poll.",
                                  labels=["cluster", "topic", "partition", "broker"])
            for p, v in sorted(_max_by_label(self.lags).items()):
                g.add_metric([cl, *p], v)
            yield g
            h = HistogramMetricFamily(E2E_DELAY, "Send acknowledged -> first poll that saw it.",
                                      labels=["cluster", "topic", "broker"])
            for (t, b), hist in sorted(self.e2e.items()):
                h.add_metric([cl, t, b], hist.cumulative(), hist.sum)
            yield h
            c = CounterMetricFamily(EVENTS, "Op events processed.", labels=["cluster"])
            c.add_metric([cl], self.events)
            yield c
            g = GaugeMetricFamily(INPUT_RATE, "Input rate of the latest micro-batch.",
                                  labels=["cluster"])
            g.add_metric([cl], self.input_rate)
            yield g
            h = HistogramMetricFamily(BATCH_DURATION, "Micro-batch duration.", labels=["cluster"])
            h.add_metric([cl], self.batch_duration.cumulative(), self.batch_duration.sum)
            yield h
            g = GaugeMetricFamily(STATE_ROWS, "Rows in the state store, per stateful operator.",
                                  labels=["cluster", "operator"])
            for op, n in sorted(self.state_rows.items()):
                g.add_metric([cl, op], n)
            yield g
            g = GaugeMetricFamily(STATE_BYTES, "State store memory, per stateful operator.",
                                  labels=["cluster", "operator"])
            for op, n in sorted(self.state_bytes.items()):
                g.add_metric([cl, op], n)
            yield g
            c = CounterMetricFamily(STATE_WRITTEN, "Bytes the per-key stage put in its state "
                                    "store (key heads and changed window pages).",
                                    labels=["cluster"])
            c.add_metric([cl], self.state_written)
            yield c
            if self.watermark_delay is not None:
                g = GaugeMetricFamily(WATERMARK_DELAY,
                                      "Wall clock minus the event-time watermark.",
                                      labels=["cluster"])
                g.add_metric([cl], self.watermark_delay)
                yield g
            g = GaugeMetricFamily(LAST_BATCH, "When the latest micro-batch finished (the "
                                  "monitor's start until one has).", labels=["cluster"])
            g.add_metric([cl], self.last_batch)
            yield g
            g = GaugeMetricFamily(START, "When this monitor process started (unix seconds).",
                                  labels=["cluster"])
            g.add_metric([cl], self.started_at)
            yield g
            c = CounterMetricFamily(DEAD_LETTERS, "Malformed op events sent to the dead letters.",
                                    labels=["cluster", "reason"])
            for r, n in sorted(self.dead_letters.items()):
                c.add_metric([cl, r], n)
            yield c
            yield from self._topology()
            h = HistogramMetricFamily(DETECTION_LATENCY, "Deciding event's time -> verdict "
                                      "emitted.", labels=["cluster", "anomaly"])
            for a, hist in sorted(self.detection.items()):
                h.add_metric([cl, a], hist.cumulative(), hist.sum)
            yield h


    def _topology(self) -> Iterator[Any]:
        """The output topics' replicas and the broker count (caller holds the lock)."""
        cl = self.cluster
        g = GaugeMetricFamily(OUTPUT_REPLICAS, "Replicas of each output topic (the fewest of "
                              "any partition's) when the monitor started.",
                              labels=["cluster", "topic"])
        for t, n in sorted(self.output_replicas.items()):
            g.add_metric([cl, t], n)
        yield g
        if self.brokers is not None:
            g = GaugeMetricFamily(BROKERS, "Brokers in the cluster's metadata when the monitor "
                                  "started.", labels=["cluster"])
            g.add_metric([cl], self.brokers)
            yield g


def _brokered(labels: list[Any], n: int) -> list[Any]:
    """Snapshot labels with the broker label: ``n`` labels before it, then the broker
    (``unknown`` in snapshots written before the label existed)."""
    return [*labels[:n], labels[n] if len(labels) > n else UNKNOWN_BROKER]


def _sum_by_label(values: dict[str, KeyGauge]) -> dict[Placed, int]:
    out: dict[Placed, int] = {}
    for g in values.values():
        p = Placed(g.topic, g.partition, g.broker)
        out[p] = out.get(p, 0) + int(g.value)
    return out


def _max_by_label(values: dict[str, KeyGauge]) -> dict[Placed, float]:
    out: dict[Placed, float] = {}
    for g in values.values():
        p = Placed(g.topic, g.partition, g.broker)
        out[p] = max(out.get(p, 0.0), float(g.value))
    return out


def registry_with(metrics: MonitorMetrics) -> CollectorRegistry:
    """A fresh registry exporting ``metrics`` (and nothing else: no process metrics)."""
    reg = CollectorRegistry()
    reg.register(metrics)
    return reg
