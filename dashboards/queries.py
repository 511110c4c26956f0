"""Every PromQL expression the dashboards draw, by name, kept apart from the layout.

Names and labels are those of docs/metrics.md. Grafana substitutes ``$__rate_interval``,
``$__range`` and the template variables ``$topic`` and ``$partition`` (multi-value, "All" is
``.*``); the tests substitute them the same way and run every query against a real Prometheus.
Series named ``level:metric:operation`` are the recording rules of ``kmon.dashboards.rules``.
"""

from __future__ import annotations

from kmon.checker.policy import allowed_anomalies

T = 'topic=~"$topic"'
TP = 'topic=~"$topic", partition=~"$partition"'
RI = "$__rate_interval"

# Allowed anomalies (read_committed consumers): shown apart, never paged on.
ALLOWED = "|".join(sorted(allowed_anomalies("read_committed")))

# Template variable queries (Grafana's label_values).
VARIABLES: dict[str, str] = {
    "topic": "label_values(kmon_unseen_values, topic)",
    "partition": 'label_values(kmon_unseen_values{topic=~"$topic"}, partition)',
}

OVERVIEW: dict[str, str] = {
    # Anomalies
    "invalid_anomalies_in_range": (
        f'sum(increase(kmon_anomalies_total{{{T}, anomaly!~"{ALLOWED}"}}[$__range]))'
    ),
    "allowed_anomalies_in_range": (
        f'sum(increase(kmon_anomalies_total{{{T}, anomaly=~"{ALLOWED}"}}[$__range]))'
    ),
    "anomalies_by_type": f"sum by (anomaly) (increase(kmon_anomalies_total{{{T}}}[{RI}]))",
    "anomalies_by_topic": f"sum by (topic) (increase(kmon_anomalies_total{{{T}}}[{RI}]))",
    "anomalies_last_hour": f"anomaly_topic:kmon_anomalies:increase1h{{{T}}} > 0",
    "detection_latency_p99": "anomaly:kmon_detection_latency_seconds:p99_5m",
    # Observability of the probed cluster
    "unseen_values": f"sum by (topic) (kmon_unseen_values{{{T}}})",
    "unseen_verdicts": f"sum by (topic) (increase(kmon_unseen_verdicts_total{{{T}}}[{RI}]))",
    "realtime_lag": f"max by (topic) (kmon_realtime_lag_seconds{{{T}}})",
    "end_to_end_p99": f"topic:kmon_end_to_end_delay_seconds:p99_5m{{{T}}}",
    # Probes
    "probes_up": "sum(kmon_probe_up)",
    "probe_keys_live": "sum(kmon_probe_keys_live)",
    "probe_op_rate": "f_type:kmon_probe_ops:rate5m",
    "probe_outcomes": f"sum by (type) (rate(kmon_probe_ops_total[{RI}]))",
    "probe_latency_p50": "f:kmon_probe_op_duration_seconds:p50_5m",
    "probe_latency_p99": "f:kmon_probe_op_duration_seconds:p99_5m",
    "probe_events_emitted": f"sum(rate(kmon_probe_events_emitted_total[{RI}]))",
    "probe_events_dropped": f"sum(rate(kmon_probe_events_dropped_total[{RI}]))",
    "probe_rebalances": f"sum by (kind) (increase(kmon_probe_rebalances_total[{RI}]))",
    "probe_client_errors": f"sum by (code) (rate(kmon_probe_client_errors_total[{RI}]))",
    # Monitor health
    "monitor_input_rate": "sum(kmon_monitor_input_events_per_second)",
    "monitor_events_rate": f"sum(rate(kmon_monitor_events_total[{RI}]))",
    "monitor_batch_p99": "job:kmon_monitor_batch_duration_seconds:p99_5m",
    "monitor_batch_mean": (
        f"sum(rate(kmon_monitor_batch_duration_seconds_sum[{RI}]))"
        f" / sum(rate(kmon_monitor_batch_duration_seconds_count[{RI}]))"
    ),
    "monitor_since_last_batch": "time() - max(kmon_monitor_last_batch_timestamp_seconds)",
    "monitor_watermark_delay": "max(kmon_monitor_watermark_delay_seconds)",
    "monitor_state_rows": "sum by (operator) (kmon_monitor_state_rows)",
    "monitor_state_bytes": "sum by (operator) (kmon_monitor_state_bytes)",
    "dead_letters": f"sum by (reason) (rate(kmon_dead_letters_total[{RI}]))",
}

DRILLDOWN: dict[str, str] = {
    "anomaly_totals": f"sum by (anomaly, topic, partition) (kmon_anomalies_total{{{TP}}}) > 0",
    "anomalies_by_partition": (
        f"sum by (anomaly, topic, partition) (increase(kmon_anomalies_total{{{TP}}}[{RI}]))"
    ),
    "unseen_values": f"sum by (topic, partition) (kmon_unseen_values{{{TP}}})",
    "unseen_verdicts": (
        f"sum by (topic, partition) (increase(kmon_unseen_verdicts_total{{{TP}}}[{RI}]))"
    ),
    "realtime_lag": f"max by (topic, partition) (kmon_realtime_lag_seconds{{{TP}}})",
    "end_to_end_p50": (
        "histogram_quantile(0.5, sum by (topic, le) "
        f"(rate(kmon_end_to_end_delay_seconds_bucket{{{T}}}[{RI}])))"
    ),
    "end_to_end_p99": (
        "histogram_quantile(0.99, sum by (topic, le) "
        f"(rate(kmon_end_to_end_delay_seconds_bucket{{{T}}}[{RI}])))"
    ),
    "detection_latency_p50": (
        "histogram_quantile(0.5, sum by (anomaly, le) "
        f"(rate(kmon_detection_latency_seconds_bucket[{RI}])))"
    ),
    "detection_latency_p99": (
        "histogram_quantile(0.99, sum by (anomaly, le) "
        f"(rate(kmon_detection_latency_seconds_bucket[{RI}])))"
    ),
}
