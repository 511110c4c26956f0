"""The two dashboards' layout: which panels, in what order, drawing which named query."""

from __future__ import annotations

from typing import Any

from kmon.dashboards import queries as q
from kmon.dashboards.grafana import Row, Target, dashboard, query_variable, stat, table, ts

OVERVIEW_UID = "kmon-overview"
DRILLDOWN_UID = "kmon-drilldown"

_DRILL_LINK = [{
    "title": "Drill down into ${__field.labels.topic}",
    "url": f"/d/{DRILLDOWN_UID}?var-topic=${{__field.labels.topic}}&${{__url_time_range}}",
}]


def overview() -> dict[str, Any]:
    items = [
        Row("Anomalies"),
        stat("Anomalies Kafka's model forbids", Target("invalid_anomalies_in_range"),
             description="Verdicts in the time range that page: every type but "
             f"{q.ALLOWED.replace('|', ', ')} (read_committed consumers).",
             thresholds=[(None, "green"), (1, "red")]),
        stat("Allowed anomalies", Target("allowed_anomalies_in_range"),
             description=f"{q.ALLOWED.replace('|', ', ')}: normal in Kafka's transaction "
             "model; shown, never paged on.", thresholds=[(None, "green"), (1, "blue")]),
        stat("Probes up", Target("probes_up"), thresholds=[(None, "red"), (1, "green")]),
        stat("Since the monitor's last batch", Target("monitor_since_last_batch"), unit="s",
             thresholds=[(None, "green"), (60, "orange"), (180, "red")]),
        ts("Anomalies by type", Target("anomalies_by_type", "{{anomaly}}"), stacked=True,
           description="New verdicts per rate interval, by anomaly type.", width=12),
        ts("Anomalies by topic", Target("anomalies_by_topic", "{{topic}}"), stacked=True,
           description="New verdicts per rate interval, by probe topic.", links=_DRILL_LINK),
        table("Anomalies in the last hour", Target("anomalies_last_hour"),
              description="Per type and topic; see the drill-down for partitions.",
              links=_DRILL_LINK),
        ts("Detection latency p99", Target("detection_latency_p99", "{{anomaly}}"), unit="s",
           description="Deciding event's time to verdict emitted."),
        Row("Observability: unseen values and lag"),
        ts("Unseen values", Target("unseen_values", "{{topic}}"),
           description="Acknowledged values no poll has returned yet."),
        ts("Unseen past the grace period", Target("unseen_verdicts", "{{topic}}"),
           description="Values unseen for longer than the unseen grace period."),
        ts("Realtime lag (worst consumer)", Target("realtime_lag", "{{topic}}"), unit="s",
           description="How far behind the end of the log the worst consumer was at its "
           "latest poll."),
        ts("End-to-end delay p99", Target("end_to_end_p99", "{{topic}}"), unit="s",
           description="Send acknowledged to the first poll that returned it."),
        Row("Probes"),
        ts("Op rate by function and outcome", Target("probe_op_rate", "{{f}} {{type}}"),
           unit="ops", stacked=True),
        ts("Outcomes", Target("probe_outcomes", "{{type}}"), unit="ops", stacked=True,
           description="ok: done; fail: certainly not done; info: unknown."),
        ts("Op latency", Target("probe_latency_p50", "p50 {{f}}"),
           Target("probe_latency_p99", "p99 {{f}}"), unit="s"),
        ts("Op events emitted and dropped", Target("probe_events_emitted", "emitted"),
           Target("probe_events_dropped", "dropped"), unit="ops",
           description="Dropped events leave holes in the checked history."),
        ts("Rebalances", Target("probe_rebalances", "{{kind}}"), width=8),
        ts("Client errors", Target("probe_client_errors", "{{code}}"), unit="ops", width=8),
        ts("Keys live", Target("probe_keys_live", "keys"), width=8),
        Row("Monitor health"),
        ts("Input rate", Target("monitor_input_rate", "latest batch"),
           Target("monitor_events_rate", "processed"), unit="ops"),
        ts("Batch duration", Target("monitor_batch_p99", "p99"),
           Target("monitor_batch_mean", "mean"), unit="s"),
        ts("Watermark delay", Target("monitor_watermark_delay", "delay"), unit="s",
           description="Wall clock minus the event-time watermark: verdicts wait this long.",
           width=8),
        ts("State rows", Target("monitor_state_rows", "{{operator}}"), width=8),
        ts("State memory", Target("monitor_state_bytes", "{{operator}}"), unit="bytes",
           width=8),
        ts("Dead letters", Target("dead_letters", "{{reason}}"), unit="ops",
           description="Malformed op events sent to the dead-letter topic.", width=24),
    ]
    variables = [query_variable("topic", "Topic", q.VARIABLES["topic"])]
    return dashboard(
        OVERVIEW_UID, "kmon / Overview",
        "Anomalies found by the kmon monitor, what the probes see, and the monitor's health.",
        items, q.OVERVIEW, variables,
    )


def drilldown() -> dict[str, Any]:
    items = [
        Row("Anomalies"),
        table("Anomalies so far", Target("anomaly_totals"), width=24,
              description="Verdicts per type and partition since the monitor started."),
        ts("New anomalies by partition",
           Target("anomalies_by_partition", "{{anomaly}} {{topic}}/{{partition}}"),
           stacked=True, width=24),
        Row("Observability"),
        ts("Unseen values", Target("unseen_values", "{{topic}}/{{partition}}")),
        ts("Unseen past the grace period",
           Target("unseen_verdicts", "{{topic}}/{{partition}}")),
        ts("Realtime lag (worst consumer)", Target("realtime_lag", "{{topic}}/{{partition}}"),
           unit="s"),
        ts("End-to-end delay", Target("end_to_end_p50", "p50 {{topic}}"),
           Target("end_to_end_p99", "p99 {{topic}}"), unit="s"),
        ts("Detection latency", Target("detection_latency_p50", "p50 {{anomaly}}"),
           Target("detection_latency_p99", "p99 {{anomaly}}"), unit="s", width=24),
    ]
    variables = [
        query_variable("topic", "Topic", q.VARIABLES["topic"]),
        query_variable("partition", "Partition", q.VARIABLES["partition"]),
    ]
    return dashboard(
        DRILLDOWN_UID, "kmon / Topic and partition",
        "One probe topic's partitions: anomalies, unseen values and lag.",
        items, q.DRILLDOWN, variables,
    )


DASHBOARDS = {OVERVIEW_UID: overview, DRILLDOWN_UID: drilldown}
