"""Alert and recording rules: one definition, rendered for Prometheus and for Grafana alerting.

Every alert is an ``Alert`` below. ``prometheus_rules`` renders them as a Prometheus rule file
(also the PrometheusRule of the Helm chart); ``grafana_rules`` renders the very same alerts as
Grafana-managed alert rules (file provisioning format, and ``grafana_api_rules`` for the HTTP
API). Each Grafana rule runs the Prometheus alert's PromQL unchanged as query ``A`` and fires for
every series it returns (condition ``B``: ``is_number($A)``), so the two never drift.

Alerts:
- one ``KmonAnomaly-<anomaly>`` per anomaly type that makes a history invalid at the configured
  consumer isolation level (``kmon.checker.policy``); allowed anomalies are on the dashboards but
  do not page. The suffix is the checker's name, which is also the ``anomaly`` label value and the
  runbook anchor.
- health alerts on the monitor and the probes (``HEALTH_ALERTS``), each with its own anchor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kmon.checker.anomaly import (
    ANOMALY_TYPES,
    DUPLICATE,
    G0,
    G1A,
    G1C,
    INCONSISTENT_OFFSETS,
    INT_NONMONOTONIC_POLL,
    INT_NONMONOTONIC_SEND,
    INT_POLL_SKIP,
    INT_SEND_SKIP,
    LOST_WRITE,
    NONMONOTONIC_POLL,
    NONMONOTONIC_SEND,
    POLL_SKIP,
    PRECOMMITTED_READ,
    TORN_TRANSACTION,
)
from kmon.checker.policy import ISOLATION_LEVELS, allowed_anomalies

# Scrape job names the alerts select on. The Helm chart's ServiceMonitors set these job labels
# and the local stack scrapes under the same names.
MONITOR_JOB = "kmon-monitor"
PROBE_JOB = "kmon-probe"

# Where the runbook is served. Alerts link to RUNBOOK_URL#<anchor>; the Helm chart can point
# them at a copy of docs/runbook.md elsewhere (prometheusRule.runbookBaseUrl).
RUNBOOK_URL = "https://github.com/kmon-dev/kmon/blob/main/docs/runbook.md"

# How long an anomaly alert keeps firing after the verdict: the window of increase().
ANOMALY_WINDOW = "15m"

ANOMALY_ALERT_PREFIX = "KmonAnomaly-"

# One line per anomaly type for the alert's summary: what the monitor saw.
ANOMALY_SUMMARIES: dict[str, str] = {
    INCONSISTENT_OFFSETS: "two different values were seen at the same offset",
    DUPLICATE: "one value was written at more than one offset",
    LOST_WRITE: "an acknowledged write was never read although consumers read past it",
    G1A: "consumers read a value whose write failed or was aborted (aborted read)",
    PRECOMMITTED_READ: "a transaction read its own write before committing",
    POLL_SKIP: "a consumer skipped over records between two polls",
    NONMONOTONIC_POLL: "a consumer went backwards between two polls",
    NONMONOTONIC_SEND: "a producer's sends landed out of order between two ops",
    INT_POLL_SKIP: "a single poll skipped over records",
    INT_NONMONOTONIC_POLL: "a single poll returned records out of offset order",
    INT_SEND_SKIP: "other records interleaved a single op's sends",
    INT_NONMONOTONIC_SEND: "a single op's sends landed out of order",
    G0: "transactions formed a write cycle (G0)",
    G1C: "transactions formed a write-read cycle (G1c)",
    TORN_TRANSACTION: "a transaction is partly visible and partly provably invisible",
}


@dataclass(frozen=True)
class Alert:
    """One alert, whatever renders it. ``summary``/``description`` are Prometheus templates."""

    name: str
    group: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str
    anchor: str
    extra_labels: dict[str, str] = field(default_factory=dict)

    def labels(self) -> dict[str, str]:
        return {"severity": self.severity, **self.extra_labels}

    def annotations(self, runbook_url: str = RUNBOOK_URL) -> dict[str, str]:
        return {
            "summary": self.summary,
            "description": self.description,
            "runbook_url": f"{runbook_url}#{self.anchor}",
        }


@dataclass(frozen=True)
class Recording:
    record: str
    expr: str


def anomaly_alert(anomaly: str) -> Alert:
    """The paging alert for one anomaly type."""
    sel = f'kmon_anomalies_total{{anomaly="{anomaly}"}}'
    by = "sum by (anomaly, topic, partition)"
    expr = (
        # A verdict counted within the window...
        f"{by} (increase({sel}[{ANOMALY_WINDOW}])) > 0\n"
        # ...or the first verdict of a partition, whose series is born at 1 and which increase()
        # cannot see (it needs two samples).
        f"or\n{by} ({sel} unless {sel} offset {ANOMALY_WINDOW}) > 0"
    )
    return Alert(
        name=ANOMALY_ALERT_PREFIX + anomaly,
        group="kmon-anomalies",
        expr=expr,
        # A verdict is final (the monitor already waited its grace period): page at once.
        for_="0m",
        severity="critical",
        summary=f"kmon: {anomaly} on {{{{ $labels.topic }}}}/{{{{ $labels.partition }}}}",
        description=(
            f'The kmon monitor found {{{{ printf "%.0f" $value }}}} new {anomaly} anomalies '
            f"in partition {{{{ $labels.partition }}}} of topic {{{{ $labels.topic }}}} in "
            f"the last {ANOMALY_WINDOW}: {ANOMALY_SUMMARIES[anomaly]}. This is not allowed by "
            "Kafka's model. Find the evidence record on the anomalies topic and run "
            "`kmon investigate <id>`."
        ),
        anchor=anomaly,
    )


M, P = MONITOR_JOB, PROBE_JOB

HEALTH_ALERTS: tuple[Alert, ...] = (
    Alert(
        name="KmonMonitorDown",
        group="kmon-monitor",
        expr=f'up{{job="{M}"}} == 0\nor absent(up{{job="{M}"}})',
        for_="5m",
        severity="critical",
        summary="kmon monitor is down or not scraped",
        description=(
            f"The monitor {{{{ $labels.instance }}}} (job {M}) has been down or missing for 5 "
            "minutes: anomalies are not being detected."
        ),
        anchor="KmonMonitorDown",
    ),
    Alert(
        name="KmonMonitorStale",
        group="kmon-monitor",
        # Stale only matters while probes emit events: an idle stream runs no micro-batches.
        expr=(
            "time() - kmon_monitor_last_batch_timestamp_seconds > 180\n"
            "and on() sum(rate(kmon_probe_events_emitted_total[5m])) > 0"
        ),
        for_="5m",
        severity="critical",
        summary="kmon monitor has run no micro-batch for {{ $value | humanizeDuration }}",
        description=(
            "The monitor {{ $labels.instance }} finished its last micro-batch "
            "{{ $value | humanizeDuration }} ago while probes keep emitting op events: the "
            "stream is stuck and anomalies are not being detected."
        ),
        anchor="KmonMonitorStale",
    ),
    Alert(
        name="KmonMonitorFallingBehind",
        group="kmon-monitor",
        expr="kmon_monitor_watermark_delay_seconds > 600",
        for_="15m",
        severity="warning",
        summary="kmon monitor's watermark is {{ $value | humanizeDuration }} behind",
        description=(
            "The event-time watermark of {{ $labels.instance }} is "
            "{{ $value | humanizeDuration }} behind the wall clock: verdicts (lost writes, "
            "unseen values) are delayed by as much."
        ),
        anchor="KmonMonitorFallingBehind",
    ),
    Alert(
        name="KmonDeadLettersRising",
        group="kmon-monitor",
        expr="sum by (job, instance, reason) (rate(kmon_dead_letters_total[5m])) > 0",
        for_="10m",
        severity="warning",
        summary="kmon monitor is dead-lettering op events ({{ $labels.reason }})",
        description=(
            '{{ $labels.instance }} has sent {{ printf "%.2f" $value }} malformed op events '
            "per second to the dead-letter topic for 10 minutes (reason {{ $labels.reason }}). "
            "The ops they carried are missing from the checked history."
        ),
        anchor="KmonDeadLettersRising",
    ),
    Alert(
        name="KmonProbeDown",
        group="kmon-probe",
        expr=(
            f'up{{job="{P}"}} == 0\n'
            f'or kmon_probe_up{{job="{P}"}} == 0\n'
            f'or absent(up{{job="{P}"}})'
        ),
        for_="5m",
        severity="critical",
        summary="kmon probe {{ $labels.instance }} is down",
        description=(
            "The probe {{ $labels.instance }} has not been running its workload for 5 minutes "
            "(target down, workload loop stopped, or no probe target at all): the cluster is "
            "not being probed."
        ),
        anchor="KmonProbeDown",
    ),
    Alert(
        name="KmonProbeDroppingEvents",
        group="kmon-probe",
        expr="rate(kmon_probe_events_dropped_total[5m]) > 0",
        for_="5m",
        severity="warning",
        summary="kmon probe {{ $labels.instance }} is dropping op events",
        description=(
            'The probe {{ $labels.instance }} drops {{ printf "%.2f" $value }} op events per '
            "second because its buffer to the events topic is full. The monitor checks an "
            "incomplete history: expect spurious unseen values and missed anomalies."
        ),
        anchor="KmonProbeDroppingEvents",
    ),
    Alert(
        name="KmonUnseenValuesGrowing",
        group="kmon-observability",
        expr="max by (topic, partition) (delta(kmon_unseen_values[10m])) > 0",
        for_="15m",
        severity="warning",
        summary="Unseen values keep growing on {{ $labels.topic }}/{{ $labels.partition }}",
        description=(
            "Acknowledged values that no poll has returned grew by "
            '{{ printf "%.0f" $value }} in the last 10 minutes on '
            "{{ $labels.topic }}/{{ $labels.partition }}, and have kept growing for 15 minutes: "
            "consumers are stuck or writes are being lost."
        ),
        anchor="KmonUnseenValuesGrowing",
    ),
    Alert(
        name="KmonUnseenVerdicts",
        group="kmon-observability",
        expr=(
            "sum by (topic, partition) (increase(kmon_unseen_verdicts_total[15m])) > 0"
        ),
        for_="5m",
        severity="warning",
        summary="Acknowledged values unseen past the grace period on "
        "{{ $labels.topic }}/{{ $labels.partition }}",
        description=(
            '{{ printf "%.0f" $value }} acknowledged values of '
            "{{ $labels.topic }}/{{ $labels.partition }} were not returned by any poll within "
            "the unseen grace period in the last 15 minutes."
        ),
        anchor="KmonUnseenVerdicts",
    ),
    Alert(
        name="KmonRealtimeLagHigh",
        group="kmon-observability",
        expr="max by (topic, partition) (kmon_realtime_lag_seconds) > 60",
        for_="10m",
        severity="warning",
        summary="Consumers of {{ $labels.topic }}/{{ $labels.partition }} are "
        "{{ $value | humanizeDuration }} behind",
        description=(
            "The worst realtime lag of a probe consumer on {{ $labels.topic }}/"
            "{{ $labels.partition }} has been above 1 minute for 10 minutes (now "
            "{{ $value | humanizeDuration }}): polls return data long after it was written."
        ),
        anchor="KmonRealtimeLagHigh",
    ),
)

RECORDING_RULES: tuple[Recording, ...] = (
    Recording(
        "anomaly_topic:kmon_anomalies:increase1h",
        "sum by (anomaly, topic) (increase(kmon_anomalies_total[1h]))",
    ),
    Recording("f_type:kmon_probe_ops:rate5m", "sum by (f, type) (rate(kmon_probe_ops_total[5m]))"),
    Recording(
        "f:kmon_probe_op_duration_seconds:p50_5m",
        "histogram_quantile(0.5, sum by (f, le) (rate(kmon_probe_op_duration_seconds_bucket[5m])))",
    ),
    Recording(
        "f:kmon_probe_op_duration_seconds:p99_5m",
        "histogram_quantile(0.99, sum by (f, le) "
        "(rate(kmon_probe_op_duration_seconds_bucket[5m])))",
    ),
    Recording(
        "topic:kmon_end_to_end_delay_seconds:p99_5m",
        "histogram_quantile(0.99, sum by (topic, le) "
        "(rate(kmon_end_to_end_delay_seconds_bucket[5m])))",
    ),
    Recording(
        "anomaly:kmon_detection_latency_seconds:p99_5m",
        "histogram_quantile(0.99, sum by (anomaly, le) "
        "(rate(kmon_detection_latency_seconds_bucket[5m])))",
    ),
    Recording(
        "job:kmon_monitor_batch_duration_seconds:p99_5m",
        "histogram_quantile(0.99, sum by (job, le) "
        "(rate(kmon_monitor_batch_duration_seconds_bucket[5m])))",
    ),
)

GROUP_INTERVAL = "1m"


def paging_anomalies(isolation: str = "read_committed") -> list[str]:
    """The anomaly types that page at ``isolation``: all but those Kafka's model allows."""
    allowed = allowed_anomalies(isolation)
    return [a for a in ANOMALY_TYPES if a not in allowed]


def alerts(isolation: str = "read_committed") -> list[Alert]:
    """Every alert, in file order."""
    return [anomaly_alert(a) for a in paging_anomalies(isolation)] + list(HEALTH_ALERTS)


def _groups(isolation: str) -> dict[str, list[Alert]]:
    out: dict[str, list[Alert]] = {}
    for a in alerts(isolation):
        out.setdefault(a.group, []).append(a)
    return out


# ---------------------------------------------------------------------------------------------
# Prometheus


def prometheus_rules(isolation: str = "read_committed") -> dict[str, Any]:
    """The Prometheus rule file (``groups:``), recording rules first."""
    # No group interval: groups follow Prometheus' evaluation_interval (5s locally, 30s in
    # kube-prometheus-stack); promtool tests use 1m.
    groups: list[dict[str, Any]] = [{
        "name": "kmon.rules",
        "rules": [{"record": r.record, "expr": r.expr} for r in RECORDING_RULES],
    }]
    for name, members in _groups(isolation).items():
        groups.append({
            "name": name,
            "rules": [
                {
                    "alert": a.name,
                    "expr": a.expr,
                    "for": a.for_,
                    "labels": a.labels(),
                    "annotations": a.annotations(),
                }
                for a in members
            ],
        })
    return {"groups": groups}


# ---------------------------------------------------------------------------------------------
# Grafana

GRAFANA_FOLDER = "kmon"
GRAFANA_FOLDER_UID = "kmon"
DATASOURCE_UID = "prometheus"  # override with --datasource-uid
CONDITION = "is_number($A)"  # fire for every series query A returns, as Prometheus would
_VALUE = re.compile(r"\$value\b")


def grafana_template(text: str) -> str:
    """A Prometheus annotation template in Grafana's dialect: ``$value`` is query A's value."""
    return _VALUE.sub("$values.A.Value", text)


def grafana_uid(alert: Alert) -> str:
    """A stable rule uid (Grafana allows 40 characters of [A-Za-z0-9_-])."""
    uid = "kmon-" + alert.anchor
    assert len(uid) <= 40 and re.fullmatch(r"[A-Za-z0-9_-]+", uid), uid
    return uid


def _grafana_rule(alert: Alert, datasource_uid: str) -> dict[str, Any]:
    ann = alert.annotations()
    return {
        "uid": grafana_uid(alert),
        "title": alert.name,
        "condition": "B",
        "data": [
            {
                "refId": "A",
                "relativeTimeRange": {"from": 600, "to": 0},
                "datasourceUid": datasource_uid,
                "model": {"refId": "A", "expr": alert.expr, "instant": True, "range": False},
            },
            {
                "refId": "B",
                "relativeTimeRange": {"from": 0, "to": 0},
                "datasourceUid": "__expr__",
                "model": {"refId": "B", "type": "math", "expression": CONDITION},
            },
        ],
        # No series means nothing to alert on, as in Prometheus.
        "noDataState": "OK",
        "execErrState": "Error",
        "for": alert.for_,
        "labels": alert.labels(),
        "annotations": {k: grafana_template(v) for k, v in ann.items()},
        "isPaused": False,
    }


def grafana_rules(
    isolation: str = "read_committed", datasource_uid: str = DATASOURCE_UID
) -> dict[str, Any]:
    """The same alerts as Grafana-managed rules, in Grafana's file provisioning format."""
    return {
        "apiVersion": 1,
        "groups": [
            {
                "orgId": 1,
                "name": name,
                "folder": GRAFANA_FOLDER,
                "interval": GROUP_INTERVAL,
                "rules": [_grafana_rule(a, datasource_uid) for a in members],
            }
            for name, members in _groups(isolation).items()
        ],
    }


def grafana_api_groups(
    isolation: str = "read_committed",
    datasource_uid: str = DATASOURCE_UID,
    folder_uid: str = GRAFANA_FOLDER_UID,
) -> list[dict[str, Any]]:
    """The rule groups as the alerting provisioning HTTP API takes them (``AlertRuleGroup``)."""
    out = []
    for g in grafana_rules(isolation, datasource_uid)["groups"]:
        rules = [
            {**r, "folderUID": folder_uid, "ruleGroup": g["name"], "orgID": g["orgId"]}
            for r in g["rules"]
        ]
        out.append({
            "title": g["name"],
            "folderUid": folder_uid,
            "interval": _seconds(g["interval"]),
            "rules": rules,
        })
    return out


def _seconds(duration: str) -> int:
    n, unit = int(duration[:-1]), duration[-1]
    return n * {"s": 1, "m": 60, "h": 3600}[unit]


__all__ = [
    "ISOLATION_LEVELS",
    "Alert",
    "Recording",
    "alerts",
    "grafana_api_groups",
    "grafana_rules",
    "paging_anomalies",
    "prometheus_rules",
]
