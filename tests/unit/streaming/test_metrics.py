"""The monitor's metrics as exported (fresh registry per test), and through a restart."""

from __future__ import annotations

import pytest

from kmon.streaming.metrics import MonitorMetrics, placement_labels, registry_with


@pytest.fixture
def m() -> MonitorMetrics:
    return MonitorMetrics()


_BROKERED = ("kmon_anomalies_total", "kmon_anomaly_last_timestamp_seconds",
             "kmon_unseen_values", "kmon_unseen_verdicts_total", "kmon_realtime_lag_seconds",
             "kmon_end_to_end_delay_seconds")


def _v(m: MonitorMetrics, name: str, **labels: str) -> float | None:
    """A sample's value; ``cluster`` defaults to ``local`` and ``broker``, on the metrics that
    have it, to ``unknown``."""
    labels.setdefault("cluster", "local")
    if name.startswith(_BROKERED):
        labels.setdefault("broker", "unknown")
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


def _series(m: MonitorMetrics) -> dict[str, int]:
    """Metric family -> number of series it exports."""
    out: dict[str, int] = {}
    for fam in registry_with(m).collect():
        keys = {tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
                for s in fam.samples}
        out[fam.name] = len(keys)
    return out


def test_every_metric_carries_the_cluster() -> None:
    m = MonitorMetrics(cluster="prod-eu")
    m.anomaly("G1a", "t", "0", 0.1, broker="2")
    m.key_stats("p/1", "t", "0", 1, 0.5, broker="2")
    m.end_to_end("t", [1] + [0] * 15, 0.001, broker="2")
    m.unseen_verdict("t", "0", broker="2")
    m.dead_letter("undecodable")
    m.progress(events=1, input_rate=1.0, duration_s=0.1, state={"keys": (1, 1)},
               watermark_delay_s=1.0, finished_at=5.0)
    samples = [s for fam in registry_with(m).collect() for s in fam.samples]
    assert len({s.name for s in samples}) > 20
    assert {s.labels.get("cluster") for s in samples} == {"prod-eu"}


def test_placement_metrics_are_labelled_by_the_keys_leader(m) -> None:
    m.anomaly("G1a", "t", "0", 0.1, broker="2")
    m.key_stats("p/1", "t", "0", 3, 0.5, broker="2")
    m.unseen_verdict("t", "0", broker="2")
    m.end_to_end("t", [0, 1] + [0] * 14, 0.002, broker="2")
    assert _v(m, "kmon_anomalies_total", anomaly="G1a", topic="t", partition="0",
              broker="2") == 1
    assert _v(m, "kmon_anomalies_total", anomaly="G0", topic="t", partition="0",
              broker="2") == 0
    assert _v(m, "kmon_unseen_values", topic="t", partition="0", broker="2") == 3
    assert _v(m, "kmon_realtime_lag_seconds", topic="t", partition="0", broker="2") == 0.5
    assert _v(m, "kmon_unseen_verdicts_total", topic="t", partition="0", broker="2") == 1
    assert _v(m, "kmon_end_to_end_delay_seconds_count", topic="t", broker="2") == 1


def test_leader_changes_do_not_grow_the_label_sets() -> None:
    from kmon.checker.anomaly import ANOMALY_TYPES

    m = MonitorMetrics()
    for n in range(50):  # two keys on one partition; its leader moves over three brokers
        broker = str(n % 3)
        m.key_stats("p/1", "t", "0", n, 0.1, broker=broker)
        m.key_stats("q/1", "t", "0", n, 0.2, broker=broker)
    assert _series(m)["kmon_unseen_values"] == 1
    assert _series(m)["kmon_realtime_lag_seconds"] == 1
    assert _v(m, "kmon_unseen_values", topic="t", partition="0", broker="1") == 98
    # zero series: every anomaly type for the current broker only
    assert _series(m)["kmon_anomalies"] == len(ANOMALY_TYPES)
    assert _series(m)["kmon_unseen_verdicts"] == 1
    # counted series stay (a counter must not vanish), one per broker that led at the time
    for n in range(50):
        m.anomaly("duplicate", "t", "0", 0.1, broker=str(n % 3))
        m.key_stats("p/1", "t", "0", 0, 0.0, broker=str(n % 3))
    series = _series(m)
    assert series["kmon_anomalies"] == len(ANOMALY_TYPES) + 2  # + the two older brokers'
    assert series["kmon_anomaly_last_timestamp_seconds"] == 3
    assert series["kmon_unseen_values"] <= 2  # p/1 and q/1, each under its latest broker


def test_the_latest_verdict_time_survives_a_restart() -> None:
    clock = [1000.0]
    m = MonitorMetrics(clock=lambda: clock[0])
    m.anomaly("lost-write", "t", "0", 0.1, broker="1")
    clock[0] = 1010.0
    m.anomaly("lost-write", "t", "0", 0.1, broker="1")
    assert _v(m, "kmon_anomaly_last_timestamp_seconds", anomaly="lost-write", topic="t",
              partition="0", broker="1") == 1010.0
    assert _v(m, "kmon_anomaly_last_timestamp_seconds", anomaly="G1a", topic="t",
              partition="0", broker="1") is None  # only series with a verdict
    clock[0] = 5000.0  # the monitor restarts much later
    again = MonitorMetrics(clock=lambda: clock[0])
    again.restore(m.snapshot())
    assert _v(again, "kmon_anomaly_last_timestamp_seconds", anomaly="lost-write", topic="t",
              partition="0", broker="1") == 1010.0
    again.anomaly("lost-write", "t", "0", 0.1, broker="1")
    assert _v(again, "kmon_anomaly_last_timestamp_seconds", anomaly="lost-write", topic="t",
              partition="0", broker="1") == 5000.0
    assert _v(again, "kmon_anomalies_total", anomaly="lost-write", topic="t", partition="0",
              broker="1") == 3


def test_start_and_last_batch_timestamps_are_exported_from_the_start() -> None:
    m = MonitorMetrics(started_at=123.0)
    assert _v(m, "kmon_monitor_start_timestamp_seconds") == 123.0
    assert _v(m, "kmon_monitor_last_batch_timestamp_seconds") == 123.0  # no batch yet
    m.progress(events=1, input_rate=1.0, duration_s=0.1, state={}, watermark_delay_s=None,
               finished_at=130.0)
    assert _v(m, "kmon_monitor_last_batch_timestamp_seconds") == 130.0
    assert _v(m, "kmon_monitor_start_timestamp_seconds") == 123.0
    from kmon.streaming import metrics

    assert MonitorMetrics().started_at == metrics.PROCESS_START  # the process's, by default


def test_a_snapshot_from_before_the_broker_label_restores_as_broker_unknown() -> None:
    old = {"anomalies": [["G1a", "t", "0", 2]], "unseen_verdicts": [["t", "0", 1]],
           "unseen_values": {"p/1": ["t", "0", 4]}, "lags": {"p/1": ["t", "0", 1.5]},
           "e2e": {"t": [[1] + [0] * 15, 0.001]}, "events": 9}
    m = MonitorMetrics()
    m.restore(old)
    assert _v(m, "kmon_anomalies_total", anomaly="G1a", topic="t", partition="0") == 2
    assert _v(m, "kmon_unseen_verdicts_total", topic="t", partition="0") == 1
    assert _v(m, "kmon_unseen_values", topic="t", partition="0") == 4
    assert _v(m, "kmon_realtime_lag_seconds", topic="t", partition="0") == 1.5
    assert _v(m, "kmon_end_to_end_delay_seconds_count", topic="t") == 1
