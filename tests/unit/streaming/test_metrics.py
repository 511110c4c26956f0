"""The monitor's metrics as exported (fresh registry per test), and through a restart."""

from __future__ import annotations

import pytest

from kmon.streaming.metrics import MonitorMetrics, placement_labels, registry_with


@pytest.fixture
def m() -> MonitorMetrics:
    return MonitorMetrics()


def _v(m: MonitorMetrics, name: str, **labels: str) -> float | None:
    return registry_with(m).get_sample_value(name, labels)


def test_anomalies_counted_by_type_topic_partition(m) -> None:
    m.anomaly("lost-write", "t", "3", 0.4)
    m.anomaly("lost-write", "t", "3", 1.5)
    m.anomaly("G1a", "t", "1", 0.1)
    assert _v(m, "kmon_anomalies_total", anomaly="lost-write", topic="t", partition="3") == 2
    assert _v(m, "kmon_anomalies_total", anomaly="G1a", topic="t", partition="1") == 1
    assert _v(m, "kmon_detection_latency_seconds_count", anomaly="lost-write") == 2
    assert _v(m, "kmon_detection_latency_seconds_bucket", anomaly="lost-write", le="0.5") == 1
    assert _v(m, "kmon_detection_latency_seconds_sum", anomaly="lost-write") == pytest.approx(1.9)


def test_gauges_aggregate_keys_with_the_same_labels(m) -> None:
    m.key_stats("p/1", "t", "0", 3, 0.5)
    m.key_stats("q/1", "t", "0", 2, 2.0)  # another probe's key on the same partition
    m.key_stats("p/1", "t", "0", 1, 0.1)  # a newer value replaces the key's own
    assert _v(m, "kmon_unseen_values", topic="t", partition="0") == 3
    assert _v(m, "kmon_realtime_lag_seconds", topic="t", partition="0") == 2.0


def test_histograms_and_plain_counters(m) -> None:
    m.end_to_end("t", [0, 1, 0, 2] + [0] * 12, 0.3)
    assert _v(m, "kmon_end_to_end_delay_seconds_count", topic="t") == 3
    assert _v(m, "kmon_end_to_end_delay_seconds_bucket", topic="t", le="0.0025") == 1
    m.dead_letter("undecodable", 2)
    m.unseen_verdict("t", "4")
    m.progress(events=10, input_rate=5.0, duration_s=0.7, state={"keys": (4, 1000)},
               watermark_delay_s=3.0, finished_at=100.0)
    assert _v(m, "kmon_dead_letters_total", reason="undecodable") == 2
    assert _v(m, "kmon_unseen_verdicts_total", topic="t", partition="4") == 1
    assert _v(m, "kmon_monitor_events_total") == 10
    assert _v(m, "kmon_monitor_input_events_per_second") == 5.0
    assert _v(m, "kmon_monitor_batch_duration_seconds_count") == 1
    assert _v(m, "kmon_monitor_state_rows", operator="keys") == 4
    assert _v(m, "kmon_monitor_state_bytes", operator="keys") == 1000
    assert _v(m, "kmon_monitor_watermark_delay_seconds") == 3.0
    assert _v(m, "kmon_monitor_last_batch_timestamp_seconds") == 100.0


def test_snapshot_restores_every_counter(m) -> None:
    m.anomaly("duplicate", "t", "0", 0.2)
    m.dead_letter("negative-index")
    m.end_to_end("t", [1] + [0] * 15, 0.0005)
    m.progress(events=7, input_rate=1.0, duration_s=0.3, state={}, watermark_delay_s=None,
               finished_at=1.0)
    m.key_stats("p/0", "t", "0", 5, 0.0)
    fresh = MonitorMetrics()
    fresh.restore(m.snapshot())
    # everything but the latest-batch gauges (the next progress report sets those again)
    skip = ("kmon_monitor_input_events_per_second", "kmon_monitor_last_batch_timestamp_seconds")
    before = [(s.name, s.labels, s.value) for fam in registry_with(m).collect()
              for s in fam.samples if s.name not in skip]
    after = [(s.name, s.labels, s.value) for fam in registry_with(fresh).collect()
             for s in fam.samples if s.name not in skip]
    assert after == before and len(before) > 40


def test_metric_names_are_the_contract(m) -> None:
    m.anomaly("G1a", "t", "0", 0.0)
    names = {s.name for fam in registry_with(m).collect() for s in fam.samples}
    assert {"kmon_anomalies_total", "kmon_monitor_events_total",
            "kmon_monitor_batch_duration_seconds_bucket"} <= names


def test_keys_without_placement_are_labelled_by_key() -> None:
    assert placement_labels("unknown", None, "7") == ("unknown", "7")
    assert placement_labels("t", 3, "7") == ("t", "3")
    assert placement_labels(None, -1, '"k"') == ("unknown", "k")


def test_every_anomaly_type_is_exported_at_zero_for_each_partition_seen(m) -> None:
    from kmon.checker.anomaly import ANOMALY_TYPES

    assert _v(m, "kmon_anomalies_total", anomaly="G0", topic="t", partition="0") is None
    m.key_stats("p/1", "t", "0", 0, 0.0)
    m.anomaly("G1a", "u", "2", 0.1)
    for a in ANOMALY_TYPES:
        assert _v(m, "kmon_anomalies_total", anomaly=a, topic="t", partition="0") == 0
        assert _v(m, "kmon_anomalies_total", anomaly=a, topic="u", partition="2") == (
            1 if a == "G1a" else 0)
    assert _v(m, "kmon_unseen_verdicts_total", topic="t", partition="0") == 0
    # bounded: only partitions seen, only the checker's types
    samples = [s for f in registry_with(m).collect() if f.name == "kmon_anomalies"
               for s in f.samples if s.name == "kmon_anomalies_total"]
    assert len(samples) == 2 * len(ANOMALY_TYPES)
