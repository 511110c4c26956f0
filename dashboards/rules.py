"""Alert and recording rules: one definition, rendered for Prometheus and for Grafana alerting.

Every alert is an ``Alert`` below. ``prometheus_rules`` renders them as a Prometheus rule file
(also the PrometheusRule of the Helm chart); ``grafana_rules`` renders the very same alerts as
Grafana-managed alert rules (file provisioning format, and ``grafana_api_groups`` for the HTTP
API). Each Grafana rule runs the Prometheus alert's PromQL unchanged as query ``A`` and fires for
every series it returns (condition ``B``: ``is_number($A)``), so the two never drift.

Selectors, label conventions and thresholds live in one place, ``RuleConfig`` (the
kubernetes-mixin ``_config`` idea): rules, Grafana rules and dashboards all read it.

Label conventions (why the expressions look the way they do):
- Every kmon metric carries ``cluster`` (the watched Kafka cluster, a kmon setting) and every
  alert keeps it in its ``by (...)``: two releases watching two clusters never mix.
- Per-process labels (``instance``, ``pod``, ``job``'s replicas) are aggregated away on both
  sides before any comparison over time. A restarted monitor restores its counters from the
  checkpoint under a new ``instance``/``pod``; compared per series, that looks like a new
  verdict. Compared after ``max by (cluster, anomaly, topic, partition, broker)``, it does not.
- Anomaly alerts use ``kmon_anomaly_last_timestamp_seconds`` (when the latest verdict of a
  series was counted, restored with the counters), not the counter's increase: a restart after
  any downtime exports the old time again and pages nothing, while a genuinely new verdict moves
  the time forward and pages once.

Alerts:
- one ``KmonAnomaly-<anomaly>`` per anomaly type that the monitor decides online and that makes
  a history invalid at the configured consumer isolation level (``kmon.checker.policy``).
  Allowed anomalies are on the dashboards but do not page; offline-only ones (G0, G1c: decided
  by ``kmon check``) have no alert at all, since no metric can ever carry them. Anomaly alerts
  are critical but those ``ANOMALY_SEVERITY`` makes warnings (two of the share groups' types).
- health alerts on the monitor and the probes (``health_alerts``), each with its runbook anchor;
  the blind-monitor and blind-probe alerts among them read metrics exported from process start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
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
    OFFSET_COMMIT_LOST,
    OFFSET_COMMIT_REREAD,
    OFFSET_COMMIT_SKIP,
    POLL_SKIP,
    PRECOMMITTED_READ,
    SHARE_CONCURRENT_DELIVERY,
    SHARE_DELIVERY_COUNT,
    SHARE_DOUBLE_ACCEPT,
    SHARE_LOST,
    SHARE_REDELIVERED,
    TORN_TRANSACTION,
)
from kmon.checker.policy import ISOLATION_LEVELS, allowed_anomalies

# Scrape job names of the local stack and of the Helm chart's ServiceMonitors.
MONITOR_JOB = "kmon-monitor"
PROBE_JOB = "kmon-probe"

# Where the runbook is served. Alerts link to RUNBOOK_URL#<anchor>; the Helm chart can point
# them at a copy of docs/runbook.md elsewhere (prometheusRule.runbookBaseUrl).
RUNBOOK_URL = "https://github.com/kmon-dev/kmon/blob/main/docs/runbook.md"

ANOMALY_ALERT_PREFIX = "KmonAnomaly-"

# Decided by `kmon check` over a whole history only: no metric carries them, so no alert.
OFFLINE_ONLY = frozenset({G0, G1C})

# The selector every generated file carries for the watched cluster. It matches any cluster;
# the Helm chart replaces it, text for text, with `cluster="<its cluster>"` so that each
# release's rules see only its own cluster's series.
ANY_CLUSTER = 'cluster!=""'


@dataclass(frozen=True)
class RuleConfig:
    """Selectors, label conventions and thresholds shared by rules and dashboards."""

    cluster_selector: str = ANY_CLUSTER
    monitor_selector: str = f'job="{MONITOR_JOB}"'
    probe_selector: str = f'job="{PROBE_JOB}"'
    # How long an anomaly alert keeps firing after its latest verdict.
    anomaly_window: str = "15m"
    # Monitor or probe target down or missing.
    down_for: str = "5m"
    # Monitor up but no micro-batch finished for this long while probes emit.
    monitor_stalled_after_s: int = 300
    # Window over which "probes emit but the monitor's input is flat" is judged.
    input_window: str = "10m"
    blind_for: str = "5m"
    # A probe whose sends/txns succeed less than this share of the time is failing.
    probe_ok_share: float = 0.5
    # A probe with no successful send (or poll) for this long is blind.
    probe_blind_after_s: int = 300

    def sel(self, *matchers: str) -> str:
        """A label selector: the cluster's matcher and ``matchers``."""
        return "{" + ", ".join([self.cluster_selector, *matchers]) + "}"

    def monitor(self, *matchers: str) -> str:
        return self.sel(self.monitor_selector, *matchers)

    def probe(self, *matchers: str) -> str:
        return self.sel(self.probe_selector, *matchers)

    def scaled(self, factor: float) -> RuleConfig:
        """The same rules with every duration multiplied by ``factor`` (live tests)."""
        def d(text: str) -> str:
            return f"{max(1, round(_seconds(text) * factor))}s"
        return replace(
            self, anomaly_window=d(self.anomaly_window), down_for=d(self.down_for),
            monitor_stalled_after_s=max(1, round(self.monitor_stalled_after_s * factor)),
            input_window=d(self.input_window), blind_for=d(self.blind_for),
            probe_blind_after_s=max(1, round(self.probe_blind_after_s * factor)),
        )


DEFAULT_CONFIG = RuleConfig()

# Labels an anomaly alert keeps: where it happened, nothing about which process saw it.
ANOMALY_BY = "cluster, anomaly, topic, partition, broker"
KEY_BY = "cluster, topic, partition, broker"

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
    OFFSET_COMMIT_LOST: "a consumer group lost an acknowledged offset commit",
    OFFSET_COMMIT_REREAD: "a consumer group's committed offset went back: consumers re-read",
    OFFSET_COMMIT_SKIP: "a consumer group's committed offset jumped ahead: consumers skip",
    SHARE_LOST: "a share group was never delivered an acknowledged write, although it was "
                "delivered records below and above it",
    SHARE_DOUBLE_ACCEPT: "two consumers of a share group both accepted one record",
    SHARE_REDELIVERED: "a share group delivered a record again after it was accepted or "
                       "rejected",
    SHARE_CONCURRENT_DELIVERY: "a share group delivered one record to two consumers within "
                               "one acquisition lock",
    SHARE_DELIVERY_COUNT: "a share group delivered a record with a delivery count outside "
                          "[1, limit] or no higher than an earlier delivery's",
}

# Severity of each anomaly alert: critical (a page) unless listed here. Every anomaly alert
# fires at once (``for: 0m``): the monitor already waited for late evidence (its grace period;
# for share-lost also the group's lock and the clock skew) before deciding, so the verdict is
# final, and a ``for`` would only delay the page. Share groups' types (docs/share-groups.md):
# - share-lost: critical (the default). An acknowledged write that the group passed over and
#   never delivered is data loss for the group's consumers, as lost-write is for a partition's.
# - share-double-accept: critical. Two consumers both processed the record and had their
#   ACCEPT acknowledged: the group's at-most-one-accept guarantee broke, and the record's side
#   effects happened twice (data integrity downstream, like duplicate).
# - share-redelivered: critical. A record the group had archived (an ok ACCEPT or REJECT) was
#   delivered again: the acknowledgement was lost, so processed (or poison) records come back.
# - share-concurrent-delivery: warning. Two consumers held the record at once, as their
#   applications saw it. librdkafka 2.16 hands over records it fetched while the application
#   did not poll, after their lock expired (docs/share-groups.md, the finding): the client's
#   doing, not the broker's, and the harm itself (both process it) pages as
#   share-double-accept when both acceptances succeed.
# - share-delivery-count: warning. The count is bookkeeping: a wrong one changes when the
#   broker archives a failing record, not which records are delivered. It also reads out of
#   range when kmon's share.delivery.limit does not match the group's
#   share.delivery.count.limit, or after the group's limit is lowered (KIP-1240 allows one
#   final delivery past it for records then in flight): check those before waking anyone.
ANOMALY_SEVERITY: dict[str, str] = {
    SHARE_CONCURRENT_DELIVERY: "warning",
    SHARE_DELIVERY_COUNT: "warning",
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


WHERE = "{{ $labels.topic }}/{{ $labels.partition }}"
CLUSTER = "{{ $labels.cluster }}"
BROKER = "{{ $labels.broker }}"


def evidence_command(anomaly: str) -> str:
    """The `kmon evidence` call listing an anomaly alert's records, labels filled in."""
    return (
        f"kmon evidence --cluster {CLUSTER} --anomaly {anomaly} --topic {{{{ $labels.topic }}}} "
        f'--partition {{{{ $labels.partition }}}} --at {{{{ printf "%.0f" $value }}}}'
    )


def anomaly_alert(anomaly: str, cfg: RuleConfig = DEFAULT_CONFIG) -> Alert:
    """The paging alert for one anomaly type.

    Its value is the time of the series' latest verdict. It fires while that time is newer than
    the same series' time one window ago (no clock involved), or, for a series born within the
    window, while the verdict is less than a window old by Prometheus' clock.
    """
    matcher = f"anomaly={_q(anomaly)}"
    last = f"max by ({ANOMALY_BY}) (kmon_anomaly_last_timestamp_seconds{cfg.monitor(matcher)}"
    now = f"{last})"
    before = f"{last} offset {cfg.anomaly_window})"
    window_s = _seconds(cfg.anomaly_window)
    expr = f"{now}\n  > {before}\nor\n({now}\n  unless {before}) > time() - {window_s}"
    return Alert(
        name=ANOMALY_ALERT_PREFIX + anomaly,
        group="kmon-anomalies",
        expr=expr,
        # A verdict is final (the monitor already waited its grace period): page at once.
        for_="0m",
        severity=ANOMALY_SEVERITY.get(anomaly, "critical"),
        summary=f"kmon: {anomaly} on {WHERE} (cluster {CLUSTER}, broker {BROKER})",
        description=(
            f"The kmon monitor watching cluster {CLUSTER} counted a new {anomaly} verdict in "
            f"partition {{{{ $labels.partition }}}} of topic {{{{ $labels.topic }}}}, led by "
            f"broker {BROKER} at the time, last at {{{{ $value | humanizeTimestamp }}}}: "
            f"{ANOMALY_SUMMARIES[anomaly]}. This is not allowed by Kafka's model. Evidence: "
            f"`{evidence_command(anomaly)}`, then `kmon investigate <id>`."
        ),
        anchor=anomaly,
    )


def _q(value: str) -> str:
    return f'"{value}"'


def health_alerts(cfg: RuleConfig = DEFAULT_CONFIG) -> tuple[Alert, ...]:
    """The monitor's and the probes' own health, blind spots included."""
    return _monitor_alerts(cfg) + _probe_alerts(cfg) + _observability_alerts(cfg)


def _probes_emitting(cfg: RuleConfig) -> str:
    return (f"sum by (cluster) (rate(kmon_probe_events_emitted_total{cfg.probe()}"
            f"[{cfg.input_window}])) > 0")


def _monitor_alerts(cfg: RuleConfig) -> tuple[Alert, ...]:
    up = f"up{cfg.monitor()}"
    since_batch = (f"time() - max by (cluster) "
                   f"(kmon_monitor_last_batch_timestamp_seconds{cfg.monitor()})")
    stalled = cfg.monitor_stalled_after_s
    return (
        Alert(
            name="KmonMonitorDown",
            group="kmon-monitor",
            expr=f"max by (cluster, job) ({up}) == 0\nor absent({up})",
            for_=cfg.down_for,
            severity="critical",
            summary=f"kmon monitor of cluster {CLUSTER} is down or not scraped",
            description=(
                f"No monitor target of cluster {CLUSTER} (job {{{{ $labels.job }}}}) has been "
                f"up for {cfg.down_for}: anomalies are not being detected."
            ),
            anchor="KmonMonitorDown",
        ),
        Alert(
            name="KmonMonitorStalled",
            group="kmon-monitor",
            # The timestamp is exported from process start, so a monitor that never finishes
            # its first batch ages too. Only while probes emit: an idle stream runs no batches.
            expr=(f"{since_batch} > {stalled}\n"
                  f"and on (cluster) {_probes_emitting(cfg)}"),
            for_=cfg.blind_for,
            severity="critical",
            summary=(f"kmon monitor of cluster {CLUSTER} has finished no micro-batch for "
                     "{{ $value | humanizeDuration }}"),
            description=(
                f"The monitor of cluster {CLUSTER} is up but finished its last micro-batch (or "
                "started) {{ $value | humanizeDuration }} ago while probes keep emitting op "
                "events: the stream is stuck and anomalies are not being detected."
            ),
            anchor="KmonMonitorStalled",
        ),
        Alert(
            name="KmonMonitorInputFlat",
            group="kmon-monitor",
            # Batches finish (timers, no-data batches) but read nothing the probes emit: a
            # wrong events topic, lost access to it, or a reader stuck on one partition.
            # Only once a batch has finished since the start: before that, a monitor starting
            # up reads nothing yet, and one that never gets going is KmonMonitorStalled's.
            expr=(f"sum by (cluster) (rate(kmon_monitor_events_total{cfg.monitor()}"
                  f"[{cfg.input_window}])) == 0\n"
                  f"and on (cluster) {_probes_emitting(cfg)}\n"
                  f"and on (cluster) {since_batch} <= {stalled}\n"
                  f"and on (cluster) max by (cluster) "
                  f"(kmon_monitor_last_batch_timestamp_seconds{cfg.monitor()}\n"
                  f"  - kmon_monitor_start_timestamp_seconds{cfg.monitor()}) > 0"),
            for_=cfg.blind_for,
            severity="critical",
            summary=f"kmon monitor of cluster {CLUSTER} reads no op events while probes emit",
            description=(
                f"Probes of cluster {CLUSTER} have emitted op events for {cfg.input_window} "
                "but the monitor processed none, although its micro-batches run: it is blind."
            ),
            anchor="KmonMonitorInputFlat",
        ),
        Alert(
            name="KmonMonitorFallingBehind",
            group="kmon-monitor",
            expr=(f"max by (cluster) (kmon_monitor_watermark_delay_seconds{cfg.monitor()})"
                  " > 600"),
            for_="15m",
            severity="warning",
            summary=(f"kmon monitor of cluster {CLUSTER} is "
                     "{{ $value | humanizeDuration }} behind"),
            description=(
                f"The monitor's event-time watermark for cluster {CLUSTER} is "
                "{{ $value | humanizeDuration }} behind the wall clock: verdicts (lost writes, "
                "unseen values) are delayed by as much."
            ),
            anchor="KmonMonitorFallingBehind",
        ),
        Alert(
            name="KmonDeadLettersRising",
            group="kmon-monitor",
            expr=(f"sum by (cluster, reason) (rate(kmon_dead_letters_total{cfg.monitor()}[5m]))"
                  " > 0"),
            for_="10m",
            severity="warning",
            summary=(f"kmon monitor of cluster {CLUSTER} is dead-lettering op events "
                     "({{ $labels.reason }})"),
            description=(
                f"The monitor of cluster {CLUSTER} has sent "
                '{{ printf "%.2f" $value }} malformed op events per second to the dead-letter '
                "topic for 10 minutes (reason {{ $labels.reason }}). The ops they carried are "
                "missing from the checked history."
            ),
            anchor="KmonDeadLettersRising",
        ),
        Alert(
            name="KmonOutputTopicSingleReplica",
            group="kmon-monitor",
            # One copy where the cluster could hold several: one disk loses the evidence.
            expr=(f"min by (cluster, topic) (kmon_monitor_output_topic_replicas{cfg.monitor()})"
                  " < 2\nand on (cluster)\n"
                  f"max by (cluster) (kmon_monitor_brokers{cfg.monitor()}) > 1"),
            for_="10m",
            severity="warning",
            summary=(f"kmon output topic {{{{ $labels.topic }}}} of cluster {CLUSTER} has a "
                     "single replica"),
            description=(
                f"The monitor of cluster {CLUSTER} writes to {{{{ $labels.topic }}}}, which has "
                "one replica on a cluster of several brokers: the evidence (or facts, or dead "
                "letters) it holds is lost with that broker's disk."
            ),
            anchor="KmonOutputTopicSingleReplica",
        ),
    )


PROBE_BY = "cluster, job, instance"
PROBE_WHO = "{{ $labels.instance }}"


def _probe_alerts(cfg: RuleConfig) -> tuple[Alert, ...]:
    up = f"up{cfg.probe()}"
    ops = "kmon_probe_ops_total"
    writes, ok, sends_polls = 'f=~"send|txn"', 'type="ok"', 'f=~"send|poll"'
    present, covered = 'state="present"', 'state="covered"'
    share = (f"sum by ({PROBE_BY}) (rate({ops}{cfg.probe(writes, ok)}[5m]))\n"
             f"  / sum by ({PROBE_BY}) (rate({ops}{cfg.probe(writes)}[5m]))")
    last_ok = (f"time() - max by ({PROBE_BY}, f) "
               f"(kmon_probe_last_success_timestamp_seconds{cfg.probe(sends_polls)})")
    return (
        Alert(
            name="KmonProbeDown",
            group="kmon-probe",
            expr=(f"{up} == 0\nor kmon_probe_up{cfg.probe()} == 0\nor absent({up})"),
            for_=cfg.down_for,
            severity="critical",
            summary=f"kmon probe {PROBE_WHO} of cluster {CLUSTER} is down",
            description=(
                f"The probe {PROBE_WHO} of cluster {CLUSTER} has not been running its workload "
                f"for {cfg.down_for} (target down, workload loop stopped, or no probe target at "
                "all): the cluster is not being probed."
            ),
            anchor="KmonProbeDown",
        ),
        Alert(
            name="KmonProbeBlind",
            group="kmon-probe",
            # Exported from start: a probe that never succeeds ages from its start time.
            expr=f"{last_ok} > {cfg.probe_blind_after_s}",
            for_="0m",
            severity="critical",
            summary=(f"kmon probe {PROBE_WHO} of cluster {CLUSTER} has had no successful "
                     "{{ $labels.f }} for {{ $value | humanizeDuration }}"),
            description=(
                f"The probe {PROBE_WHO} of cluster {CLUSTER} is running, but its last "
                "successful {{ $labels.f }} was {{ $value | humanizeDuration }} ago: the "
                "cluster is unreachable, refuses the probe (ACLs, credentials) or has no "
                "leaders. Nothing is being checked."
            ),
            anchor="KmonProbeBlind",
        ),
        Alert(
            name="KmonProbeFailing",
            group="kmon-probe",
            expr=f"{share}\n  < {cfg.probe_ok_share}",
            for_=cfg.blind_for,
            severity="warning",
            summary=(f"kmon probe {PROBE_WHO} of cluster {CLUSTER}: "
                     '{{ $value | humanizePercentage }} of writes succeed'),
            description=(
                f"Only {{{{ $value | humanizePercentage }}}} of the sends and transactions of "
                f"probe {PROBE_WHO} (cluster {CLUSTER}) succeeded over 5 minutes, below "
                f"{cfg.probe_ok_share:.0%}: most of the workload fails or times out, so little "
                "is being checked."
            ),
            anchor="KmonProbeFailing",
        ),
        Alert(
            name="KmonProbeNoLiveKeys",
            group="kmon-probe",
            expr=f"max by ({PROBE_BY}) (kmon_probe_keys_live{cfg.probe()}) == 0",
            for_=cfg.blind_for,
            severity="critical",
            summary=f"kmon probe {PROBE_WHO} of cluster {CLUSTER} writes and reads no key",
            description=(
                f"The probe {PROBE_WHO} of cluster {CLUSTER} has had no live key "
                f"(topic-partition) for {cfg.blind_for}: its topics are missing or have no "
                "leader, so no partition is probed."
            ),
            anchor="KmonProbeNoLiveKeys",
        ),
        Alert(
            name="KmonProbeBrokersUncovered",
            group="kmon-probe",
            # Brokers present minus those leading a live key: loss on the rest goes unseen.
            expr=(f"max by ({PROBE_BY}) (kmon_probe_brokers{cfg.probe(present)})\n"
                  f"  - max by ({PROBE_BY}) (kmon_probe_brokers{cfg.probe(covered)})\n  > 0"),
            for_=cfg.blind_for,
            severity="warning",
            summary=(f"kmon probe {PROBE_WHO} of cluster {CLUSTER}: {{{{ $value }}}} brokers "
                     "lead no probed partition"),
            description=(
                f"For {cfg.blind_for}, {{{{ $value }}}} brokers of cluster {CLUSTER} have led "
                f"no live key of probe {PROBE_WHO}: data loss or stalls on them would go "
                "unseen. The probe elects its keys' preferred leaders back and creates topics "
                "placed on uncovered brokers; this says it could not."
            ),
            anchor="KmonProbeBrokersUncovered",
        ),
        Alert(
            name="KmonProbeDroppingEvents",
            group="kmon-probe",
            expr=(f"sum by ({PROBE_BY}) "
                  f"(rate(kmon_probe_events_dropped_total{cfg.probe()}[5m])) > 0"),
            for_="5m",
            severity="warning",
            summary=f"kmon probe {PROBE_WHO} of cluster {CLUSTER} is dropping op events",
            description=(
                f"The probe {PROBE_WHO} of cluster {CLUSTER} drops "
                '{{ printf "%.2f" $value }} op events per second because its buffer to the '
                "events topic is full. The monitor checks an incomplete history: expect "
                "spurious unseen values and missed anomalies."
            ),
            anchor="KmonProbeDroppingEvents",
        ),
    )


def _observability_alerts(cfg: RuleConfig) -> tuple[Alert, ...]:
    where = f"{WHERE} (cluster {CLUSTER}, broker {BROKER})"
    return (
        Alert(
            name="KmonUnseenValuesGrowing",
            group="kmon-observability",
            expr=f"max by ({KEY_BY}) (delta(kmon_unseen_values{cfg.monitor()}[10m])) > 0",
            for_="15m",
            severity="warning",
            summary=f"Unseen values keep growing on {where}",
            description=(
                "Acknowledged values that no poll has returned grew by "
                f'{{{{ printf "%.0f" $value }}}} in the last 10 minutes on {where}, and have '
                "kept growing for 15 minutes: consumers are stuck or writes are being lost."
            ),
            anchor="KmonUnseenValuesGrowing",
        ),
        Alert(
            name="KmonUnseenVerdicts",
            group="kmon-observability",
            expr=(f"sum by ({KEY_BY}) "
                  f"(increase(kmon_unseen_verdicts_total{cfg.monitor()}[15m])) > 0"),
            for_="5m",
            severity="warning",
            summary=f"Acknowledged values unseen past the grace period on {where}",
            description=(
                f'{{{{ printf "%.0f" $value }}}} acknowledged values of {where} were not '
                "returned by any poll within the unseen grace period in the last 15 minutes. "
                f"Evidence: `kmon evidence --cluster {CLUSTER} --anomaly unseen --topic "
                "{{ $labels.topic }} --partition {{ $labels.partition }} --since 1h`."
            ),
            anchor="KmonUnseenVerdicts",
        ),
        Alert(
            name="KmonRealtimeLagHigh",
            group="kmon-observability",
            expr=f"max by ({KEY_BY}) (kmon_realtime_lag_seconds{cfg.monitor()}) > 60",
            for_="10m",
            severity="warning",
            summary=f"Consumers of {where} are {{{{ $value | humanizeDuration }}}} behind",
            description=(
                f"The worst realtime lag of a probe consumer on {where} has been above 1 "
                "minute for 10 minutes (now {{ $value | humanizeDuration }}): polls return "
                "data long after it was written."
            ),
            anchor="KmonRealtimeLagHigh",
        ),
    )


def recording_rules(cfg: RuleConfig = DEFAULT_CONFIG) -> tuple[Recording, ...]:
    """Dashboard helpers, each keeping ``cluster``."""
    m, p = cfg.monitor(), cfg.probe()

    def quantile(q: str, by: str, metric: str, sel: str) -> str:
        return f"histogram_quantile({q}, sum by ({by}, le) (rate({metric}_bucket{sel}[5m])))"

    return (
        Recording("cluster_anomaly_topic:kmon_anomalies:increase1h",
                  f"sum by (cluster, anomaly, topic) (increase(kmon_anomalies_total{m}[1h]))"),
        Recording("cluster_f_type:kmon_probe_ops:rate5m",
                  f"sum by (cluster, f, type) (rate(kmon_probe_ops_total{p}[5m]))"),
        Recording("cluster_f:kmon_probe_op_duration_seconds:p50_5m",
                  quantile("0.5", "cluster, f", "kmon_probe_op_duration_seconds", p)),
        Recording("cluster_f:kmon_probe_op_duration_seconds:p99_5m",
                  quantile("0.99", "cluster, f", "kmon_probe_op_duration_seconds", p)),
        Recording("cluster_topic:kmon_end_to_end_delay_seconds:p99_5m",
                  quantile("0.99", "cluster, topic", "kmon_end_to_end_delay_seconds", m)),
        Recording("cluster_anomaly:kmon_detection_latency_seconds:p99_5m",
                  quantile("0.99", "cluster, anomaly", "kmon_detection_latency_seconds", m)),
        Recording("cluster:kmon_monitor_batch_duration_seconds:p99_5m",
                  quantile("0.99", "cluster", "kmon_monitor_batch_duration_seconds", m)),
    )


# Alertmanager inhibitions that keep one cause to one page: a probe that cannot reach its
# cluster explains the monitor reading nothing, unseen values and lag on the same cluster.
INHIBIT_RULES: tuple[dict[str, Any], ...] = (
    {
        "source_matchers": ['alertname=~"KmonProbeBlind|KmonProbeDown|KmonProbeNoLiveKeys"'],
        "target_matchers": [
            'alertname=~"KmonMonitorStalled|KmonMonitorInputFlat|KmonProbeFailing|'
            'KmonProbeDroppingEvents|KmonUnseenValuesGrowing|KmonUnseenVerdicts|'
            'KmonRealtimeLagHigh"'
        ],
        "equal": ["cluster"],
    },
    {   # a monitor that is down is not also stalled or blind
        "source_matchers": ['alertname="KmonMonitorDown"'],
        "target_matchers": ['alertname=~"KmonMonitorStalled|KmonMonitorInputFlat|'
                            'KmonMonitorFallingBehind"'],
        "equal": ["cluster"],
    },
)

GROUP_INTERVAL = "1m"


def paging_anomalies(isolation: str = "read_committed") -> list[str]:
    """The anomaly types that page at ``isolation``: those the monitor decides online and that
    Kafka's model forbids."""
    allowed = allowed_anomalies(isolation)
    return [a for a in ANOMALY_TYPES if a not in allowed and a not in OFFLINE_ONLY]


def alerts(isolation: str = "read_committed", cfg: RuleConfig = DEFAULT_CONFIG) -> list[Alert]:
    """Every alert, in file order."""
    return [anomaly_alert(a, cfg) for a in paging_anomalies(isolation)] + list(health_alerts(cfg))


def _groups(isolation: str, cfg: RuleConfig) -> dict[str, list[Alert]]:
    out: dict[str, list[Alert]] = {}
    for a in alerts(isolation, cfg):
        out.setdefault(a.group, []).append(a)
    return out


# ---------------------------------------------------------------------------------------------
# Prometheus


def prometheus_rules(isolation: str = "read_committed",
                     cfg: RuleConfig = DEFAULT_CONFIG) -> dict[str, Any]:
    """The Prometheus rule file (``groups:``), recording rules first."""
    # No group interval: groups follow Prometheus' evaluation_interval (5s locally, 30s in
    # kube-prometheus-stack); promtool tests use 1m.
    groups: list[dict[str, Any]] = [{
        "name": "kmon.rules",
        "rules": [{"record": r.record, "expr": r.expr} for r in recording_rules(cfg)],
    }]
    for name, members in _groups(isolation, cfg).items():
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
    isolation: str = "read_committed", datasource_uid: str = DATASOURCE_UID,
    cfg: RuleConfig = DEFAULT_CONFIG,
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
            for name, members in _groups(isolation, cfg).items()
        ],
    }


def grafana_api_groups(
    isolation: str = "read_committed",
    datasource_uid: str = DATASOURCE_UID,
    folder_uid: str = GRAFANA_FOLDER_UID,
    cfg: RuleConfig = DEFAULT_CONFIG,
) -> list[dict[str, Any]]:
    """The rule groups as the alerting provisioning HTTP API takes them (``AlertRuleGroup``)."""
    out = []
    for g in grafana_rules(isolation, datasource_uid, cfg)["groups"]:
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
    "RuleConfig",
    "alerts",
    "grafana_api_groups",
    "grafana_rules",
    "health_alerts",
    "paging_anomalies",
    "prometheus_rules",
]
