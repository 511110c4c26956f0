"""Every PromQL expression the dashboards draw, by name, kept apart from the layout.

Names and labels are those of docs/metrics.md. Grafana substitutes ``$__rate_interval``,
``$__range`` and the template variables ``$cluster``, ``$namespace``, ``$job``, ``$topic`` and
``$partition`` (multi-value, "All" is ``.*``, which also matches a label that is absent, as
``namespace`` is outside Kubernetes); the tests substitute them the same way and run every query
against a real Prometheus. Every query keeps ``cluster`` in its ``by (...)``: two releases
watching two clusters never add up. Series named ``level:metric:operation`` are the recording
rules of ``kmon.dashboards.rules``.
"""

from __future__ import annotations

from kmon.checker.anomaly import SHARE_ANOMALY_TYPES
from kmon.checker.policy import allowed_anomalies
from kmon.dashboards.rules import MONITOR_JOB, PROBE_JOB

# Every selector starts with where: the cluster and the Prometheus targets chosen.
WHERE = 'cluster=~"$cluster", namespace=~"$namespace", job=~"$job"'
C = f"{{{WHERE}}}"
T = f'{WHERE}, topic=~"$topic"'
TP = f'{T}, partition=~"$partition"'
RI = "$__rate_interval"
# kmon's scrape jobs (the Helm chart substitutes its serviceMonitor.jobs for these names).
JOBS = f'job=~"{MONITOR_JOB}|{PROBE_JOB}"'


def _allowed(isolation: str) -> str:
    return "|".join(sorted(allowed_anomalies(isolation)))


# Allowed anomalies at each consumer isolation level: shown apart, never paged on.
ALLOWED = _allowed("read_committed")
ALLOWED_RU = _allowed("read_uncommitted")
# Share groups' anomaly types (KIP-932, docs/share-groups.md), and the probe's share ops.
SHARE = "|".join(SHARE_ANOMALY_TYPES)
SHARE_FS = "share-poll|ack"

# Template variable queries (Grafana's label_values).
VARIABLES: dict[str, str] = {
    "cluster": "label_values(kmon_monitor_events_total, cluster)",
    "namespace": f'label_values(up{{cluster=~"$cluster", {JOBS}}}, namespace)',
    "job": f'label_values(up{{cluster=~"$cluster", {JOBS}}}, job)',
    "topic": f"label_values(kmon_unseen_values{C}, topic)",
    "partition": f'label_values(kmon_unseen_values{{{T}}}, partition)',
}


# Variables whose label only Kubernetes targets carry (the ServiceMonitor's `namespace`):
# empty outside it, where "All" (.*) also matches the absent label.
KUBERNETES_ONLY_VARIABLES = frozenset({"namespace"})


def _by_isolation(op: str) -> str:
    """Anomalies in the range counted as forbidden (op ``!~``) or allowed (``=~``) at the
    isolation level the cluster's probes report (``kmon_probe_info``)."""
    parts = []
    for iso, allowed in (("read_committed", ALLOWED), ("read_uncommitted", ALLOWED_RU)):
        parts.append(
            f'sum by (cluster) (increase(kmon_anomalies_total{{{T}, anomaly{op}"{allowed}"}}'
            f"[$__range]))\n  and on (cluster) group by (cluster) "
            f'(kmon_probe_info{{{WHERE}, isolation="{iso}"}})'
        )
    return "\nor\n".join(parts)


OVERVIEW: dict[str, str] = {
    # Anomalies
    "invalid_anomalies_in_range": _by_isolation("!~"),
    "allowed_anomalies_in_range": _by_isolation("=~"),
    "firing_alerts": (
        'sum by (cluster, alertname, severity) (ALERTS{cluster=~"$cluster", '
        'alertname=~"Kmon.*", alertstate="firing"})'
    ),
    "anomalies_by_type": (
        f"sum by (cluster, anomaly) (increase(kmon_anomalies_total{{{T}}}[{RI}]))"
    ),
    "anomalies_by_topic": f"sum by (cluster, topic) (increase(kmon_anomalies_total{{{T}}}[{RI}]))",
    "anomalies_by_broker": (
        f"sum by (cluster, broker) (increase(kmon_anomalies_total{{{T}}}[$__range]))"
    ),
    "anomalies_last_hour": (
        'cluster_anomaly_topic:kmon_anomalies:increase1h{cluster=~"$cluster", '
        'topic=~"$topic"} > 0'
    ),
    "detection_latency_p99": (
        'cluster_anomaly:kmon_detection_latency_seconds:p99_5m{cluster=~"$cluster"}'
    ),
    # Share groups
    "share_anomalies_by_type": (
        f'sum by (cluster, anomaly) (increase(kmon_anomalies_total{{{T}, anomaly=~"{SHARE}"}}'
        f"[{RI}]))"
    ),
    "share_anomalies_in_range": (
        f'sum by (cluster, anomaly, topic) (increase(kmon_anomalies_total{{{T}, '
        f'anomaly=~"{SHARE}"}}[$__range])) > 0'
    ),
    "share_ops": (
        f'sum by (cluster, f, type) (rate(kmon_probe_ops_total{{{WHERE}, f=~"{SHARE_FS}"}}'
        f"[{RI}]))"
    ),
    # Observability of the probed cluster
    "unseen_values": f"sum by (cluster, topic) (kmon_unseen_values{{{T}}})",
    "unseen_by_broker": f"sum by (cluster, broker) (kmon_unseen_values{{{T}}})",
    "unseen_verdicts": (
        f"sum by (cluster, topic) (increase(kmon_unseen_verdicts_total{{{T}}}[{RI}]))"
    ),
    "realtime_lag": f"max by (cluster, topic) (kmon_realtime_lag_seconds{{{T}}})",
    "end_to_end_p99": (
        'cluster_topic:kmon_end_to_end_delay_seconds:p99_5m{cluster=~"$cluster", '
        'topic=~"$topic"}'
    ),
    "end_to_end_p99_by_broker": (
        "histogram_quantile(0.99, sum by (cluster, broker, le) "
        f"(rate(kmon_end_to_end_delay_seconds_bucket{{{T}}}[{RI}])))"
    ),
    # Probes
    "targets_up": f"sum by (cluster, job) (up{{{WHERE}, {JOBS}}})",
    "targets_expected": f"count by (cluster, job) (up{{{WHERE}, {JOBS}}})",
    "probes_up": f"sum by (cluster) (kmon_probe_up{C})",
    "probe_keys_live": f"sum by (cluster) (kmon_probe_keys_live{C})",
    # The worst probe of each cluster: every probe covers every broker by itself.
    "probe_brokers": f"min by (cluster, state) (kmon_probe_brokers{C})",
    "probe_op_rate": 'cluster_f_type:kmon_probe_ops:rate5m{cluster=~"$cluster"}',
    "probe_outcomes": f"sum by (cluster, type) (rate(kmon_probe_ops_total{C}[{RI}]))",
    "probe_since_success": (
        f"time() - max by (cluster, f) (kmon_probe_last_success_timestamp_seconds{C})"
    ),
    "probe_latency_p50": 'cluster_f:kmon_probe_op_duration_seconds:p50_5m{cluster=~"$cluster"}',
    "probe_latency_p99": 'cluster_f:kmon_probe_op_duration_seconds:p99_5m{cluster=~"$cluster"}',
    "probe_events_emitted": (
        f"sum by (cluster) (rate(kmon_probe_events_emitted_total{C}[{RI}]))"
    ),
    "probe_events_dropped": (
        f"sum by (cluster) (rate(kmon_probe_events_dropped_total{C}[{RI}]))"
    ),
    "probe_rebalances": f"sum by (cluster, kind) (increase(kmon_probe_rebalances_total{C}[{RI}]))",
    "probe_client_errors": (
        f"sum by (cluster, code) (rate(kmon_probe_client_errors_total{C}[{RI}]))"
    ),
    # Monitor health
    "monitor_input_rate": f"sum by (cluster) (kmon_monitor_input_events_per_second{C})",
    "monitor_events_rate": f"sum by (cluster) (rate(kmon_monitor_events_total{C}[{RI}]))",
    "monitor_batch_p99": 'cluster:kmon_monitor_batch_duration_seconds:p99_5m{cluster=~"$cluster"}',
    "monitor_batch_mean": (
        f"sum by (cluster) (rate(kmon_monitor_batch_duration_seconds_sum{C}[{RI}]))"
        f" / sum by (cluster) (rate(kmon_monitor_batch_duration_seconds_count{C}[{RI}]))"
    ),
    "monitor_since_last_batch": (
        f"time() - max by (cluster) (kmon_monitor_last_batch_timestamp_seconds{C})"
    ),
    "monitor_watermark_delay": f"max by (cluster) (kmon_monitor_watermark_delay_seconds{C})",
    "monitor_state_rows": f"sum by (cluster, operator) (kmon_monitor_state_rows{C})",
    "monitor_state_bytes": f"sum by (cluster, operator) (kmon_monitor_state_bytes{C})",
    "dead_letters": f"sum by (cluster, reason) (rate(kmon_dead_letters_total{C}[{RI}]))",
}

DRILLDOWN: dict[str, str] = {
    "anomaly_totals": (
        f"sum by (cluster, anomaly, topic, partition, broker) (kmon_anomalies_total{{{TP}}}) > 0"
    ),
    "anomalies_by_partition": (
        "sum by (cluster, anomaly, topic, partition) "
        f"(increase(kmon_anomalies_total{{{TP}}}[{RI}]))"
    ),
    "unseen_values": f"sum by (cluster, topic, partition) (kmon_unseen_values{{{TP}}})",
    "unseen_verdicts": (
        "sum by (cluster, topic, partition) "
        f"(increase(kmon_unseen_verdicts_total{{{TP}}}[{RI}]))"
    ),
    "realtime_lag": f"max by (cluster, topic, partition) (kmon_realtime_lag_seconds{{{TP}}})",
    "end_to_end_p50": (
        "histogram_quantile(0.5, sum by (cluster, topic, le) "
        f"(rate(kmon_end_to_end_delay_seconds_bucket{{{T}}}[{RI}])))"
    ),
    "end_to_end_p99": (
        "histogram_quantile(0.99, sum by (cluster, topic, le) "
        f"(rate(kmon_end_to_end_delay_seconds_bucket{{{T}}}[{RI}])))"
    ),
    "detection_latency_p50": (
        "histogram_quantile(0.5, sum by (cluster, anomaly, le) "
        f"(rate(kmon_detection_latency_seconds_bucket{C}[{RI}])))"
    ),
    "detection_latency_p99": (
        "histogram_quantile(0.99, sum by (cluster, anomaly, le) "
        f"(rate(kmon_detection_latency_seconds_bucket{C}[{RI}])))"
    ),
}

# Grafana annotations: a mark where a monitor (re)started. A restart under the same target
# changes the start time; one under a new pod or instance is a series that was not there.
ANNOTATIONS: dict[str, str] = {
    "monitor_restarts": (
        f"changes(kmon_monitor_start_timestamp_seconds{C}[2m]) > 0\n"
        f"or (kmon_monitor_start_timestamp_seconds{C}\n"
        f"  unless kmon_monitor_start_timestamp_seconds{C} offset 2m)"
    ),
}
