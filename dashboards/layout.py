"""The two dashboards' layout: which panels, in what order, drawing which named query."""

from __future__ import annotations

from typing import Any

from kmon.dashboards import queries as q
from kmon.dashboards.grafana import (
    Row,
    Target,
    dashboard,
    query_variable,
    stat,
    table,
    ts,
)

OVERVIEW_UID = "kmon-overview"
DRILLDOWN_UID = "kmon-drilldown"

_DRILL_LINK = [{
    "title": "Drill down into ${__field.labels.topic}",
    "url": f"/d/{DRILLDOWN_UID}?var-topic=${{__field.labels.topic}}&${{__url_time_range}}",
}]


def overview() -> dict[str, Any]:
    items = [
        Row("Anomalies"),
        stat("Anomalies Kafka's model forbids", Target("invalid_anomalies_in_range",
                                                        "{{cluster}}"),
             description="Verdicts in the time range that page, at the isolation level the "
             f"cluster's probes consume with: every type but {q.ALLOWED.replace('|', ', ')} "
             f"(read_committed) or {q.ALLOWED_RU.replace('|', ', ')} (read_uncommitted).",
             thresholds=[(None, "green"), (1, "red")]),
        stat("Allowed anomalies", Target("allowed_anomalies_in_range", "{{cluster}}"),
             description="Normal in Kafka's model at the probes' isolation level; shown, "
             "never paged on.", thresholds=[(None, "green"), (1, "blue")]),
        stat("Probes up", Target("probes_up", "{{cluster}}"),
             thresholds=[(None, "red"), (1, "green")]),
        stat("Since the monitor's last batch", Target("monitor_since_last_batch", "{{cluster}}"),
             unit="s", thresholds=[(None, "green"), (60, "orange"), (180, "red")]),
        table("Firing kmon alerts", Target("firing_alerts"), width=12, height=6,
              description="kmon's alerts firing now, per cluster (Prometheus' ALERTS series)."),
        ts("Targets up against expected", Target("targets_up", "up {{cluster}} {{job}}"),
           Target("targets_expected", "expected {{cluster}} {{job}}"), height=6,
           description="Scrape targets answering, against the targets Prometheus discovered."),
        ts("Anomalies by type", Target("anomalies_by_type", "{{cluster}} {{anomaly}}"),
           stacked=True, description="New verdicts per rate interval, by anomaly type.",
           width=8),
        ts("Anomalies by topic", Target("anomalies_by_topic", "{{cluster}} {{topic}}"),
           stacked=True, description="New verdicts per rate interval, by probe topic.",
           links=_DRILL_LINK, width=8),
        table("Anomalies by broker", Target("anomalies_by_broker"), width=8,
              description="Verdicts in the time range by the broker that led the partition "
              "when the verdict was decided."),
        table("Anomalies in the last hour", Target("anomalies_last_hour"),
              description="Per type and topic; see the drill-down for partitions.",
              links=_DRILL_LINK),
        ts("Detection latency p99", Target("detection_latency_p99", "{{cluster}} {{anomaly}}"),
           unit="s",
           description="Deciding event's time to verdict emitted."),
        Row("Share groups (KIP-932)"),
        ts("Share-group anomalies by type",
           Target("share_anomalies_by_type", "{{cluster}} {{anomaly}}"), stacked=True, width=10,
           description="New share-group verdicts per rate interval, by type: share-lost (an "
           "acknowledged write the group passed over and never delivered), share-double-accept "
           "(a record accepted twice), share-redelivered (delivered again after an ACCEPT or "
           "REJECT), share-concurrent-delivery (two consumers within one lock), "
           "share-delivery-count (a count out of range, or no higher than an earlier one with "
           "no failover between). Rules: docs/share-groups.md."),
        table("Share-group anomalies in the range",
              Target("share_anomalies_in_range"), width=7,
              description="Share-group verdicts in the time range, per type and topic; the "
              "drill-down has partitions and brokers.", links=_DRILL_LINK),
        ts("Share ops by outcome", Target("share_ops", "{{cluster}} {{f}} {{type}}"), unit="ops",
           stacked=True, width=7,
           description="The probe's share consumers' polls and acknowledgements, by outcome. "
           "No share-poll here: no share consumer runs (share.processes), so no share-group "
           "verdict can come; many info acks: acknowledgements lost (broker failures)."),
        Row("Observability: unseen values and lag"),
        ts("Unseen values", Target("unseen_values", "{{cluster}} {{topic}}"),
           description="Acknowledged values no poll has returned yet."),
        ts("Unseen values by leader", Target("unseen_by_broker", "{{cluster}} broker {{broker}}"),
           description="The same, by the broker leading each partition."),
        ts("Unseen past the grace period", Target("unseen_verdicts", "{{cluster}} {{topic}}"),
           description="Values unseen for longer than the unseen grace period."),
        ts("Realtime lag (worst consumer)", Target("realtime_lag", "{{cluster}} {{topic}}"),
           unit="s",
           description="How far behind the end of the log the worst consumer was at its "
           "latest poll."),
        ts("End-to-end delay p99", Target("end_to_end_p99", "{{cluster}} {{topic}}"), unit="s",
           description="Send acknowledged to the first poll that returned it."),
        ts("End-to-end delay p99 by leader",
           Target("end_to_end_p99_by_broker", "{{cluster}} broker {{broker}}"), unit="s",
           description="The same, by the broker leading the partition."),
        Row("Probes"),
        ts("Op rate by function and outcome", Target("probe_op_rate", "{{cluster}} {{f}} {{type}}"),
           unit="ops", stacked=True),
        ts("Outcomes", Target("probe_outcomes", "{{cluster}} {{type}}"), unit="ops", stacked=True,
           description="ok: done; fail: certainly not done; info: unknown."),
        ts("Op latency", Target("probe_latency_p50", "p50 {{f}} {{cluster}}"),
           Target("probe_latency_p99", "p99 {{f}} {{cluster}}"), unit="s"),
        ts("Op events emitted and dropped", Target("probe_events_emitted", "emitted {{cluster}}"),
           Target("probe_events_dropped", "dropped {{cluster}}"), unit="ops",
           description="Dropped events leave holes in the checked history."),
        ts("Rebalances", Target("probe_rebalances", "{{cluster}} {{kind}}"), width=8),
        ts("Client errors", Target("probe_client_errors", "{{cluster}} {{code}}"), unit="ops",
           width=8),
        ts("Keys live", Target("probe_keys_live", "{{cluster}}"), width=8),
        ts("Brokers covered", Target("probe_brokers", "{{cluster}} {{state}}"), width=8,
           description="Brokers present, and those leading a live probe key (the worst "
           "probe's): below present, loss there goes unseen (KmonProbeBrokersUncovered)."),
        ts("Since the last successful op", Target("probe_since_success", "{{cluster}} {{f}}"),
           unit="s", description="Exported from the probe's start: grows while nothing "
           "succeeds (KmonProbeBlind).", width=16),
        Row("Monitor health"),
        ts("Input rate", Target("monitor_input_rate", "latest batch {{cluster}}"),
           Target("monitor_events_rate", "processed {{cluster}}"), unit="ops"),
        ts("Batch duration", Target("monitor_batch_p99", "p99 {{cluster}}"),
           Target("monitor_batch_mean", "mean {{cluster}}"), unit="s"),
        ts("Watermark delay", Target("monitor_watermark_delay", "delay {{cluster}}"), unit="s",
           description="Wall clock minus the event-time watermark: verdicts wait this long.",
           width=8),
        ts("State rows", Target("monitor_state_rows", "{{cluster}} {{operator}}"), width=8),
        ts("State memory", Target("monitor_state_bytes", "{{cluster}} {{operator}}"), unit="bytes",
           width=8),
        ts("Dead letters", Target("dead_letters", "{{cluster}} {{reason}}"), unit="ops",
           description="Malformed op events sent to the dead-letter topic.", width=24),
    ]
    variables = [*_where_variables(), query_variable("topic", "Topic", q.VARIABLES["topic"])]
    return dashboard(
        OVERVIEW_UID, "kmon / Overview",
        "Anomalies found by the kmon monitor, what the probes see, and the monitor's health.",
        items, q.OVERVIEW, variables, q.ANNOTATIONS,
    )


def drilldown() -> dict[str, Any]:
    items = [
        Row("Anomalies"),
        table("Anomalies so far", Target("anomaly_totals"), width=24,
              description="Verdicts per type and partition since the monitor started."),
        ts("New anomalies by partition",
           Target("anomalies_by_partition", "{{cluster}} {{anomaly}} {{topic}}/{{partition}}"),
           stacked=True, width=24),
        Row("Observability"),
        ts("Unseen values", Target("unseen_values", "{{cluster}} {{topic}}/{{partition}}")),
        ts("Unseen past the grace period",
           Target("unseen_verdicts", "{{cluster}} {{topic}}/{{partition}}")),
        ts("Realtime lag (worst consumer)",
           Target("realtime_lag", "{{cluster}} {{topic}}/{{partition}}"),
           unit="s"),
        ts("End-to-end delay", Target("end_to_end_p50", "p50 {{topic}} {{cluster}}"),
           Target("end_to_end_p99", "p99 {{topic}} {{cluster}}"), unit="s"),
        ts("Detection latency", Target("detection_latency_p50", "p50 {{anomaly}} {{cluster}}"),
           Target("detection_latency_p99", "p99 {{anomaly}} {{cluster}}"), unit="s", width=24),
    ]
    variables = [
        *_where_variables(),
        query_variable("topic", "Topic", q.VARIABLES["topic"]),
        query_variable("partition", "Partition", q.VARIABLES["partition"]),
    ]
    return dashboard(
        DRILLDOWN_UID, "kmon / Topic and partition",
        "One probe topic's partitions: anomalies, unseen values and lag.",
        items, q.DRILLDOWN, variables, q.ANNOTATIONS,
    )


def _where_variables() -> list[dict[str, Any]]:
    return [query_variable(name, name.capitalize(), q.VARIABLES[name])
            for name in ("cluster", "namespace", "job")]


DASHBOARDS = {OVERVIEW_UID: overview, DRILLDOWN_UID: drilldown}
