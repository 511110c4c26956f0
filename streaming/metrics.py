"""The monitor's Prometheus metrics, declared once (names and labels: ``docs/metrics.md``).

The values live in plain dicts owned by ``MonitorMetrics`` and are exported by a custom
collector, not by prometheus_client's own Counter objects, because they must survive a restart:
``snapshot()``/``restore()`` carry every counter, histogram and the last gauges through the
checkpoint (see ``snapshots``). A restarted monitor continues its counters; it never silently
starts again from zero.

Label sets are bounded: ``topic``/``partition`` range over probe topics (a key without a
placement is labelled topic ``unknown`` and its key as the partition), ``anomaly`` over the
checker's names, ``reason`` over ``decode.REASONS``, ``operator`` over the two stages.

``kmon_anomalies_total`` (every anomaly type) and ``kmon_unseen_verdicts_total`` are exported at
0 for each topic/partition the monitor has seen, so an alert's ``increase()`` fires on the first
anomaly (a series born at 1 has no increase) and dashboards show zeros, not "no data".
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator
from typing import Any

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
WATERMARK_DELAY = "kmon_monitor_watermark_delay_seconds"
LAST_BATCH = "kmon_monitor_last_batch_timestamp_seconds"
DEAD_LETTERS = "kmon_dead_letters_total"
DETECTION_LATENCY = "kmon_detection_latency_seconds"


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


class MonitorMetrics(Collector):
    """Every monitor metric's current value, thread-safe; register it on a registry."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.anomalies: dict[tuple[str, str, str], int] = {}
        self.unseen_verdicts: dict[tuple[str, str], int] = {}
        self.unseen_values: dict[str, tuple[str, str, int]] = {}  # key id -> (t, p, n)
        self.lags: dict[str, tuple[str, str, float]] = {}  # key id -> (t, p, seconds)
        self.e2e: dict[str, Histogram] = {}
        self.events = 0
        self.input_rate = 0.0
        self.batch_duration = Histogram(BATCH_BUCKETS)
        self.state_rows: dict[str, int] = {}
        self.state_bytes: dict[str, int] = {}
        self.watermark_delay: float | None = None
        self.last_batch: float | None = None
        self.dead_letters: dict[str, int] = {}
        self.detection: dict[str, Histogram] = {}

    # -- updates (callers hold no lock; each method takes it) ------------------------------
    def anomaly(self, anomaly: str, topic: str, partition: str, latency_s: float) -> None:
        with self.lock:
            k = (anomaly, topic, partition)
            self.anomalies[k] = self.anomalies.get(k, 0) + 1
            h = self.detection.get(anomaly)
            if h is None:
                h = self.detection[anomaly] = Histogram(DETECTION_BUCKETS)
            h.observe(max(0.0, latency_s))

    def unseen_verdict(self, topic: str, partition: str) -> None:
        with self.lock:
            k = (topic, partition)
            self.unseen_verdicts[k] = self.unseen_verdicts.get(k, 0) + 1

    def key_stats(self, key_id: str, topic: str, partition: str, unseen: int,
                  lag_s: float) -> None:
        with self.lock:
            self.unseen_values[key_id] = (topic, partition, unseen)
            self.lags[key_id] = (topic, partition, lag_s)

    def end_to_end(self, topic: str, counts: list[int], total_s: float) -> None:
        with self.lock:
            h = self.e2e.get(topic)
            if h is None:
                h = self.e2e[topic] = Histogram(E2E_BUCKETS)
            h.add_counts(counts, total_s)

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
                "unseen_verdicts": [[*k, n] for k, n in self.unseen_verdicts.items()],
                "unseen_values": {k: list(v) for k, v in self.unseen_values.items()},
                "lags": {k: list(v) for k, v in self.lags.items()},
                "e2e": {t: h.to_json() for t, h in self.e2e.items()},
                "events": self.events,
                "batch_duration": self.batch_duration.to_json(),
                "dead_letters": dict(self.dead_letters),
                "detection": {a: h.to_json() for a, h in self.detection.items()},
            }

    def restore(self, data: dict[str, Any]) -> None:
        with self.lock:
            self.anomalies = {(a, t, p): int(n) for a, t, p, n in data.get("anomalies", ())}
            self.unseen_verdicts = {(t, p): int(n) for t, p, n in data.get("unseen_verdicts", ())}
            self.unseen_values = {k: tuple(v) for k, v in data.get("unseen_values", {}).items()}
            self.lags = {k: tuple(v) for k, v in data.get("lags", {}).items()}
            self.e2e = {}
            for t, raw in data.get("e2e", {}).items():
                self.e2e[t] = Histogram(E2E_BUCKETS)
                self.e2e[t].load(raw)
            self.events = int(data.get("events", 0))
            if "batch_duration" in data:
                self.batch_duration.load(data["batch_duration"])
            self.dead_letters = {r: int(n) for r, n in data.get("dead_letters", {}).items()}
            self.detection = {}
            for a, raw in data.get("detection", {}).items():
                self.detection[a] = Histogram(DETECTION_BUCKETS)
                self.detection[a].load(raw)

    # -- export ---------------------------------------------------------------------------
    def _placements_seen(self) -> set[tuple[str, str]]:
        """(topic, partition) of every key with stats or verdicts: the zero series' labels."""
        seen = {(t, p) for t, p, _ in self.unseen_values.values()}
        seen |= {(t, p) for t, p, _ in self.lags.values()}
        seen |= {(t, p) for _, t, p in self.anomalies}
        return seen | set(self.unseen_verdicts)

    def collect(self) -> Iterator[Any]:
        with self.lock:
            c = CounterMetricFamily(ANOMALIES, "Verdicts emitted, each anomaly once.",
                                    labels=["anomaly", "topic", "partition"])
            seen = self._placements_seen()
            anomalies = {(a, *tp): 0 for a in ANOMALY_TYPES for tp in seen} | self.anomalies
            for (a, t, p), n in sorted(anomalies.items()):
                c.add_metric([a, t, p], n)
            yield c
            g = GaugeMetricFamily(UNSEEN_VALUES, "Acknowledged values no poll has returned yet.",
                                  labels=["topic", "partition"])
            for (t, p), n in sorted(_sum_by_label(self.unseen_values).items()):
                g.add_metric([t, p], n)
            yield g
            c = CounterMetricFamily(UNSEEN_VERDICTS,
                                    "Values unseen for longer than the unseen grace period.",
                                    labels=["topic", "partition"])
            for (t, p), n in sorted(({tp: 0 for tp in seen} | self.unseen_verdicts).items()):
                c.add_metric([t, p], n)
            yield c
            g = GaugeMetricFamily(REALTIME_LAG,
                                  "Worst realtime lag of any consumer at its latest poll.",
                                  labels=["topic", "partition"])
            for (t, p), v in sorted(_max_by_label(self.lags).items()):
                g.add_metric([t, p], v)
            yield g
            h = HistogramMetricFamily(E2E_DELAY, "Send acknowledged -> first poll that saw it.",
                                      labels=["topic"])
            for t, hist in sorted(self.e2e.items()):
                h.add_metric([t], hist.cumulative(), hist.sum)
            yield h
            yield CounterMetricFamily(EVENTS, "Op events processed.", value=self.events)
            yield GaugeMetricFamily(INPUT_RATE, "Input rate of the latest micro-batch.",
                                    value=self.input_rate)
            h = HistogramMetricFamily(BATCH_DURATION, "Micro-batch duration.", labels=[])
            h.add_metric([], self.batch_duration.cumulative(), self.batch_duration.sum)
            yield h
            g = GaugeMetricFamily(STATE_ROWS, "Rows in the state store, per stateful operator.",
                                  labels=["operator"])
            for op, n in sorted(self.state_rows.items()):
                g.add_metric([op], n)
            yield g
            g = GaugeMetricFamily(STATE_BYTES, "State store memory, per stateful operator.",
                                  labels=["operator"])
            for op, n in sorted(self.state_bytes.items()):
                g.add_metric([op], n)
            yield g
            if self.watermark_delay is not None:
                yield GaugeMetricFamily(WATERMARK_DELAY,
                                        "Wall clock minus the event-time watermark.",
                                        value=self.watermark_delay)
            if self.last_batch is not None:
                yield GaugeMetricFamily(LAST_BATCH, "When the latest micro-batch finished.",
                                        value=self.last_batch)
            c = CounterMetricFamily(DEAD_LETTERS, "Malformed op events sent to the dead letters.",
                                    labels=["reason"])
            for r, n in sorted(self.dead_letters.items()):
                c.add_metric([r], n)
            yield c
            h = HistogramMetricFamily(DETECTION_LATENCY, "Deciding event's time -> verdict "
                                      "emitted.", labels=["anomaly"])
            for a, hist in sorted(self.detection.items()):
                h.add_metric([a], hist.cumulative(), hist.sum)
            yield h


def _sum_by_label(values: dict[str, tuple[str, str, int]]) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for t, p, n in values.values():
        out[(t, p)] = out.get((t, p), 0) + int(n)
    return out


def _max_by_label(values: dict[str, tuple[str, str, float]]) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for t, p, v in values.values():
        out[(t, p)] = max(out.get((t, p), 0.0), float(v))
    return out


def registry_with(metrics: MonitorMetrics) -> CollectorRegistry:
    """A fresh registry exporting ``metrics`` (and nothing else: no process metrics)."""
    reg = CollectorRegistry()
    reg.register(metrics)
    return reg
