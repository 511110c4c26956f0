"""The generated Prometheus rules, checked and unit-tested by promtool.

Each alert has a case at the edge of its ``for:`` window: the last evaluation before the window
ends is silent, the one that ends it fires, with exact labels and annotations (written out here
literally, so a template change shows up as a failure). Anomaly alerts (``for: 0m``) are tested
at the verdict's first evaluation and at the end of their window, and across what production
changes: a monitor restarted under a new ``instance``/``pod`` with its counters restored (after
a short or a long outage, or overlapping the old one in a rollout), two clusters in one
Prometheus, a leader that moved.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kmon.dashboards import generate, rules, tools

RULES = generate.GENERATED / generate.prometheus_rules_name("read_committed")
RULES_RU = generate.GENERATED / generate.prometheus_rules_name("read_uncommitted")
RUNBOOK = rules.RUNBOOK_URL + "#"
CLUSTER = {"cluster": "prod-eu"}
MONITOR = {"job": "kmon-monitor", "instance": "10.0.0.7:9464", "pod": "kmon-monitor-7d9f-abcde",
           **CLUSTER}
# The same monitor after a restart: a new pod, so a new instance; counters restored.
MONITOR_2 = {**MONITOR, "instance": "10.0.3.12:9464", "pod": "kmon-monitor-7d9f-xyz12"}
PROBE = {"job": "kmon-probe", "instance": "probe-0:9465", **CLUSTER}
TP = {"topic": "probe-a", "partition": "3"}
KEY = {**TP, "broker": "2"}
LAST = "kmon_anomaly_last_timestamp_seconds"


@pytest.fixture(scope="module")
def promtool() -> str:
    path = tools.find("promtool")
    assert path is not None, "promtool not installed: `make setup` (kmon setup) installs it"
    return path


def series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f"{name}{{{inner}}}", "values": values}


def edge(alert: str, before: str, at: str, labels: dict[str, str],
         annotations: dict[str, str]) -> list[dict[str, Any]]:
    """Silent at ``before``, firing at ``at`` with exactly these labels and annotations."""
    return [
        {"eval_time": before, "alertname": alert, "exp_alerts": []},
        {"eval_time": at, "alertname": alert, "exp_alerts": [
            {"exp_labels": {"alertname": alert, **labels}, "exp_annotations": annotations}]},
    ]


def silent(alert: str, *times: str) -> list[dict[str, Any]]:
    return [{"eval_time": t, "alertname": alert, "exp_alerts": []} for t in times]


def firing(alert: str, at: str, *label_sets: dict[str, str]) -> dict[str, Any]:
    """Firing at ``at`` exactly once per label set (annotations not compared: run it on
    ``bare(...)`` rules)."""
    return {"eval_time": at, "alertname": alert,
            "exp_alerts": [{"exp_labels": {"alertname": alert, **labels}}
                           for labels in label_sets]}


def bare(tmp_path: Path, rule_file: Path = RULES) -> Path:
    """``rule_file`` without annotations, for cases about when and with what labels alerts
    fire (promtool compares annotations whole)."""
    doc = yaml.safe_load(rule_file.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    path = tmp_path / f"bare-{rule_file.name}"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run_promtool(promtool: str, tmp_path: Path, rule_file: Path,
                 tests: list[dict[str, Any]]) -> None:
    spec = {"rule_files": [str(rule_file)], "evaluation_interval": "1m", "tests": tests}
    path = tmp_path / "tests.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    done = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_generated_rule_files_pass_promtool_check(promtool: str) -> None:
    for path in (RULES, RULES_RU):
        done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True,
                              text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "SUCCESS" in done.stdout


# What each paging anomaly's description says it means, written out (not read from the code).
PAGING = {
    "inconsistent-offsets": "two different values were seen at the same offset",
    "duplicate": "one value was written at more than one offset",
    "lost-write": "an acknowledged write was never read although consumers read past it",
    "G1a": "consumers read a value whose write failed or was aborted (aborted read)",
    "precommitted-read": "a transaction read its own write before committing",
    "poll-skip": "a consumer skipped over records between two polls",
    "nonmonotonic-poll": "a consumer went backwards between two polls",
    "nonmonotonic-send": "a producer's sends landed out of order between two ops",
    "int-poll-skip": "a single poll skipped over records",
    "int-nonmonotonic-poll": "a single poll returned records out of offset order",
    "int-nonmonotonic-send": "a single op's sends landed out of order",
    "torn-transaction": "a transaction is partly visible and partly provably invisible",
    "offset-commit-lost": "a consumer group lost an acknowledged offset commit",
    "offset-commit-reread": "a consumer group's committed offset went back: consumers re-read",
    "offset-commit-skip": "a consumer group's committed offset jumped ahead: consumers skip",
    "share-lost": "a share group was never delivered an acknowledged write, although it was "
                  "delivered records below and above it",
    "share-double-accept": "two consumers of a share group both accepted one record",
    "share-redelivered": "a share group delivered a record again after it was accepted or "
                         "rejected",
    "share-concurrent-delivery": "a share group delivered one record to two consumers within "
                                 "one acquisition lock",
    "share-delivery-count": "a share group delivered a record with a delivery count outside "
                            "[1, limit] or no higher than an earlier delivery's",
}
# Anomaly alerts are critical but these (dashboards/rules.py, ANOMALY_SEVERITY, says why).
WARNING_ONLY = {"share-concurrent-delivery", "share-delivery-count"}


def _alert_names(path: Path) -> set[str]:
    return {r["alert"] for g in yaml.safe_load(path.read_text())["groups"]
            for r in g["rules"] if "alert" in r}


def test_one_alert_per_paging_anomaly_and_none_for_allowed_or_offline() -> None:
    names = _alert_names(RULES)
    anomaly_alerts = {n.removeprefix("KmonAnomaly-") for n in names if n.startswith("KmonAnomaly-")}
    assert anomaly_alerts == set(PAGING)
    # Kafka's transactions interleave: G0 and int-send-skip are normal, never paged on; G1c is
    # decided offline only (`kmon check`), so no metric could ever make its alert fire.
    assert {"G0", "int-send-skip", "G1c"}.isdisjoint(anomaly_alerts)
    # read_uncommitted consumers see aborted and each other's uncommitted writes by design.
    names_ru = _alert_names(RULES_RU)
    assert {f"KmonAnomaly-{a}" for a in PAGING} - names_ru == {"KmonAnomaly-G1a"}


def test_every_metric_an_alert_reads_can_carry_it() -> None:
    """An alert on a metric the monitor never exports can never fire (G1c's old alert)."""
    exported = {"kmon_anomaly_last_timestamp_seconds"}
    for alert in rules.alerts():
        if alert.name.startswith(rules.ANOMALY_ALERT_PREFIX):
            assert any(m in alert.expr for m in exported), alert.name
            assert alert.anchor not in rules.OFFLINE_ONLY


def _anomaly_annotations(anomaly: str, what: str, at: int) -> dict[str, str]:
    return {
        "summary": f"kmon: {anomaly} on probe-a/3 (cluster prod-eu, broker 2)",
        "description": (
            f"The kmon monitor watching cluster prod-eu counted a new {anomaly} verdict in "
            "partition 3 of topic probe-a, led by broker 2 at the time, last at "
            f"1970-01-01 00:{at // 60:02d}:00 +0000 UTC: {what}. This is not allowed by "
            "Kafka's model. Evidence: `kmon evidence --cluster prod-eu --anomaly "
            f"{anomaly} --topic probe-a --partition 3 --at {at}`, then `kmon investigate <id>`."
        ),
        "runbook_url": RUNBOOK + anomaly,
    }


@pytest.mark.parametrize("anomaly", sorted(PAGING))
def test_anomaly_alert_fires_on_the_verdict_and_resolves_after_its_window(
    promtool: str, tmp_path: Path, anomaly: str
) -> None:
    alert = f"KmonAnomaly-{anomaly}"
    severity = "warning" if anomaly in WARNING_ONLY else "critical"
    labels = {"anomaly": anomaly, **KEY, **CLUSTER, "severity": severity}
    metric = {"anomaly": anomaly, **KEY, **MONITOR}
    tests = [
        {   # the series' first verdict, counted at 10m (600 s)
            "interval": "1m",
            "input_series": [series(LAST, metric, "_x10 600x30")],
            "alert_rule_test": [
                *edge(alert, "9m", "10m", labels,
                      _anomaly_annotations(anomaly, PAGING[anomaly], 600)),
                # still firing while the verdict is within the 15m window, then resolved
                *edge(alert, "25m", "24m", labels,
                      _anomaly_annotations(anomaly, PAGING[anomaly], 600))[::-1],
            ],
        },
        {   # a second verdict on a series that has had one before: fires on the new one
            "interval": "1m",
            "input_series": [series(LAST, metric, "60x19 1200x30")],
            "alert_rule_test": [
                *silent(alert, "16m", "19m"),
                *edge(alert, "19m", "20m", labels,
                      _anomaly_annotations(anomaly, PAGING[anomaly], 1200))[1:],
                *silent(alert, "35m"),
            ],
        },
    ]
    run_promtool(promtool, tmp_path, RULES, tests)


LOST = {"anomaly": "lost-write", **KEY}
LOST_ALERT = "KmonAnomaly-lost-write"
LOST_LABELS = {**LOST, **CLUSTER, "severity": "critical"}


@pytest.mark.parametrize(("case", "old", "new"), [
    # the verdict at 1m (60 s); the monitor restarts at 30m under a new pod and instance
    ("restart within the window", "60x29", "_x32 60x40"),
    ("restart after a long outage", "60x29", "_x75 60x40"),
    ("rollout: old and new overlap", "60x35", "_x31 60x40"),
])
def test_a_restored_verdict_under_a_new_instance_does_not_page(
    promtool: str, tmp_path: Path, case: str, old: str, new: str
) -> None:
    tests = [{
        "interval": "1m",
        "input_series": [
            series(LAST, {**LOST, **MONITOR}, old),
            series(LAST, {**LOST, **MONITOR_2}, new),
            # the counter the dashboards read, restored likewise: the alert does not read it
            series("kmon_anomalies_total", {**LOST, **MONITOR}, "1x29"),
            series("kmon_anomalies_total", {**LOST, **MONITOR_2}, "_x32 1x40"),
        ],
        "alert_rule_test": [
            firing(LOST_ALERT, "5m", LOST_LABELS),  # the original page, once
            *silent(LOST_ALERT, "16m", "31m", "33m", "34m", "40m", "47m", "76m", "80m", "100m"),
        ],
    }]
    run_promtool(promtool, tmp_path, bare(tmp_path), tests)


def test_a_new_verdict_after_the_restart_pages_once(promtool: str, tmp_path: Path) -> None:
    tests = [{
        "interval": "1m",
        "input_series": [
            series(LAST, {**LOST, **MONITOR}, "60x29"),
            # restarted at 32m with the old time; a new verdict counted at 40m (2400 s)
            series(LAST, {**LOST, **MONITOR_2}, "_x32 60x7 2400x30"),
        ],
        "alert_rule_test": [
            *silent(LOST_ALERT, "33m", "39m"),
            firing(LOST_ALERT, "40m", LOST_LABELS),
            firing(LOST_ALERT, "54m", LOST_LABELS),
            *silent(LOST_ALERT, "55m"),
        ],
    }]
    run_promtool(promtool, tmp_path, bare(tmp_path), tests)


def test_two_clusters_page_apart(promtool: str, tmp_path: Path) -> None:
    other = {**MONITOR, "cluster": "prod-us", "instance": "10.9.0.1:9464"}
    tests = [{
        "interval": "1m",
        "input_series": [
            series(LAST, {**LOST, **MONITOR}, "_x10 600x10"),
            series(LAST, {**LOST, **other}, "_x10 600x10"),
        ],
        "alert_rule_test": [firing(LOST_ALERT, "10m", LOST_LABELS,
                                   {**LOST_LABELS, "cluster": "prod-us"})],
    }]
    run_promtool(promtool, tmp_path, bare(tmp_path), tests)


def test_a_verdict_under_a_new_leader_pages_naming_it(promtool: str, tmp_path: Path) -> None:
    tests = [{
        "interval": "1m",
        "input_series": [
            series(LAST, {**LOST, **MONITOR}, "60x40"),
            series(LAST, {**LOST, **MONITOR, "broker": "0"}, "_x30 1800x10"),
        ],
        "alert_rule_test": [
            *silent(LOST_ALERT, "20m"),
            firing(LOST_ALERT, "30m", {**LOST_LABELS, "broker": "0"}),
        ],
    }]
    run_promtool(promtool, tmp_path, bare(tmp_path), tests)


def test_allowed_anomalies_do_not_page(promtool: str, tmp_path: Path) -> None:
    inputs = [series(LAST, {"anomaly": a, **KEY, **MONITOR}, "0+60x30")
              for a in ("G0", "int-send-skip", "G1c")]
    checks = silent("KmonAnomaly-G0", "20m") + silent("KmonAnomaly-int-send-skip", "20m")
    run_promtool(promtool, tmp_path, RULES,
                 [{"interval": "1m", "input_series": inputs, "alert_rule_test": checks}])


EMITTING = series("kmon_probe_events_emitted_total", PROBE, "0+100x40")
MON_LABELS = {**CLUSTER, "severity": "critical"}
PROBE_LABELS = {**PROBE, "severity": "critical"}

HEALTH_CASES: dict[str, list[dict[str, Any]]] = {
    "KmonMonitorDown": [
        {   # down from 5m: `for: 5m` ends at 10m
            "input_series": [series("up", MONITOR, "1x4 0x20")],
            "alert_rule_test": edge("KmonMonitorDown", "9m", "10m",
                                    {**CLUSTER, "job": "kmon-monitor", "severity": "critical"}, {
                "summary": "kmon monitor of cluster prod-eu is down or not scraped",
                "description": "No monitor target of cluster prod-eu (job kmon-monitor) has "
                               "been up for 5m: anomalies are not being detected.",
                "runbook_url": RUNBOOK + "KmonMonitorDown",
            }),
        },
        {   # not scraped at all (only the probe is)
            "input_series": [series("up", PROBE, "1x20")],
            "alert_rule_test": edge("KmonMonitorDown", "4m", "5m",
                                    {"job": "kmon-monitor", "severity": "critical"}, {
                "summary": "kmon monitor of cluster  is down or not scraped",
                "description": "No monitor target of cluster  (job kmon-monitor) has been up "
                               "for 5m: anomalies are not being detected.",
                "runbook_url": RUNBOOK + "KmonMonitorDown",
            }),
        },
        {   # restarted under a new pod within the window: never down
            "input_series": [series("up", MONITOR, "1x10"), series("up", MONITOR_2, "_x11 1x20")],
            "alert_rule_test": silent("KmonMonitorDown", "12m", "20m"),
        },
    ],
    "KmonMonitorStalled": [
        {   # batches every minute until 4m (t=240); stalled past 300 s from 10m; fires at 15m
            "input_series": [
                series("kmon_monitor_last_batch_timestamp_seconds", MONITOR, "0+60x4 240x30"),
                EMITTING,
            ],
            "alert_rule_test": edge("KmonMonitorStalled", "14m", "15m", MON_LABELS, {
                "summary": "kmon monitor of cluster prod-eu has finished no micro-batch for "
                           "11m 0s",
                "description": "The monitor of cluster prod-eu is up but finished its last "
                               "micro-batch (or started) 11m 0s ago while probes keep emitting "
                               "op events: the stream is stuck and anomalies are not being "
                               "detected.",
                "runbook_url": RUNBOOK + "KmonMonitorStalled",
            }),
        },
        {   # started at 0 and never finished a batch: the start time ages from the start
            "input_series": [
                series("kmon_monitor_last_batch_timestamp_seconds", MONITOR, "0x30"), EMITTING],
            "alert_rule_test": [*silent("KmonMonitorStalled", "10m"),
                                firing("KmonMonitorStalled", "11m", MON_LABELS)],
        },
        {   # no op events: an idle stream runs no batches, and that is fine
            "input_series": [
                series("kmon_monitor_last_batch_timestamp_seconds", MONITOR, "0+60x4 240x30"),
                series("kmon_probe_events_emitted_total", PROBE, "100x40"),
            ],
            "alert_rule_test": silent("KmonMonitorStalled", "20m"),
        },
    ],
    "KmonMonitorInputFlat": [
        {   # batches run (timers) but the input counter is flat while probes emit
            "input_series": [
                series("kmon_monitor_start_timestamp_seconds", MONITOR, "0x40"),
                series("kmon_monitor_last_batch_timestamp_seconds", MONITOR, "0+60x30"),
                series("kmon_monitor_events_total", MONITOR, "5000+100x4 5400x30"),
                EMITTING,
            ],
            "alert_rule_test": edge("KmonMonitorInputFlat", "18m", "19m", MON_LABELS, {
                "summary": "kmon monitor of cluster prod-eu reads no op events while probes "
                           "emit",
                "description": "Probes of cluster prod-eu have emitted op events for 10m but "
                               "the monitor processed none, although its micro-batches run: it "
                               "is blind.",
                "runbook_url": RUNBOOK + "KmonMonitorInputFlat",
            }),
        },
        {   # restarted with its counter restored under a new instance, reading again
            "input_series": [
                series("kmon_monitor_last_batch_timestamp_seconds", MONITOR, "0+60x10"),
                series("kmon_monitor_last_batch_timestamp_seconds", MONITOR_2, "_x11 660+60x30"),
                series("kmon_monitor_start_timestamp_seconds", MONITOR, "0x10"),
                series("kmon_monitor_start_timestamp_seconds", MONITOR_2, "_x11 650x30"),
                series("kmon_monitor_events_total", MONITOR, "0+100x10"),
                series("kmon_monitor_events_total", MONITOR_2, "_x11 1000+100x30"),
                EMITTING,
            ],
            "alert_rule_test": silent("KmonMonitorInputFlat", "12m", "20m", "30m"),
        },
    ],
    "KmonMonitorFallingBehind": [{
        "input_series": [series("kmon_monitor_watermark_delay_seconds", MONITOR,
                                "30x4 900x30")],
        "alert_rule_test": edge("KmonMonitorFallingBehind", "19m", "20m",
                                {**CLUSTER, "severity": "warning"}, {
            "summary": "kmon monitor of cluster prod-eu is 15m 0s behind",
            "description": "The monitor's event-time watermark for cluster prod-eu is 15m 0s "
                           "behind the wall clock: verdicts (lost writes, unseen values) are "
                           "delayed by as much.",
            "runbook_url": RUNBOOK + "KmonMonitorFallingBehind",
        }),
    }],
    "KmonDeadLettersRising": [{
        # 6 per minute from 5m: rate > 0 from 6m, fires at 16m
        "input_series": [series("kmon_dead_letters_total", {**MONITOR, "reason": "decode"},
                                "0x4 0+6x30")],
        "alert_rule_test": edge("KmonDeadLettersRising", "15m", "16m",
                                {**CLUSTER, "reason": "decode", "severity": "warning"}, {
            "summary": "kmon monitor of cluster prod-eu is dead-lettering op events (decode)",
            "description": "The monitor of cluster prod-eu has sent 0.10 malformed op events "
                           "per second to the dead-letter topic for 10 minutes (reason decode). "
                           "The ops they carried are missing from the checked history.",
            "runbook_url": RUNBOOK + "KmonDeadLettersRising",
        }),
    }],
    "KmonOutputTopicSingleReplica": [
        {   # the anomalies topic has one replica of 3 brokers from the start: fires at 10m
            "input_series": [
                series("kmon_monitor_output_topic_replicas", {**MONITOR, "topic": "kmon-anomalies"},
                       "1x20"),
                series("kmon_monitor_output_topic_replicas", {**MONITOR, "topic": "kmon-facts"},
                       "3x20"),
                series("kmon_monitor_brokers", MONITOR, "3x20"),
            ],
            "alert_rule_test": edge("KmonOutputTopicSingleReplica", "9m", "10m",
                                    {**CLUSTER, "topic": "kmon-anomalies",
                                     "severity": "warning"}, {
                "summary": "kmon output topic kmon-anomalies of cluster prod-eu has a single "
                           "replica",
                "description": "The monitor of cluster prod-eu writes to kmon-anomalies, which "
                               "has one replica on a cluster of several brokers: the evidence "
                               "(or facts, or dead letters) it holds is lost with that broker's "
                               "disk.",
                "runbook_url": RUNBOOK + "KmonOutputTopicSingleReplica",
            }),
        },
        {   # a one-broker cluster cannot hold more copies: never fires
            "input_series": [
                series("kmon_monitor_output_topic_replicas", {**MONITOR, "topic": "kmon-anomalies"},
                       "1x20"),
                series("kmon_monitor_brokers", MONITOR, "1x20"),
            ],
            "alert_rule_test": silent("KmonOutputTopicSingleReplica", "10m", "20m"),
        },
    ],
    "KmonProbeDown": [
        {   # target down from 5m
            "input_series": [series("up", PROBE, "1x4 0x20")],
            "alert_rule_test": edge("KmonProbeDown", "9m", "10m", PROBE_LABELS, {
                "summary": "kmon probe probe-0:9465 of cluster prod-eu is down",
                "description": "The probe probe-0:9465 of cluster prod-eu has not been running "
                               "its workload for 5m (target down, workload loop stopped, or no "
                               "probe target at all): the cluster is not being probed.",
                "runbook_url": RUNBOOK + "KmonProbeDown",
            }),
        },
        {   # scraped fine, but its workload loop stopped at 5m
            "input_series": [series("up", PROBE, "1x20"),
                             series("kmon_probe_up", PROBE, "1x4 0x20")],
            "alert_rule_test": [*silent("KmonProbeDown", "9m"),
                                firing("KmonProbeDown", "10m", PROBE_LABELS)],
        },
        {   # no probe target at all (only the monitor is scraped)
            "input_series": [series("up", MONITOR, "1x20")],
            "alert_rule_test": [*silent("KmonProbeDown", "4m"),
                                firing("KmonProbeDown", "5m",
                                       {"job": "kmon-probe", "severity": "critical"})],
        },
    ],
    "KmonProbeBlind": [
        {   # started at 0; polls succeed every minute, no send ever does: fires past 300 s
            "input_series": [
                series("kmon_probe_last_success_timestamp_seconds", {**PROBE, "f": "send"},
                       "0x20"),
                series("kmon_probe_last_success_timestamp_seconds", {**PROBE, "f": "poll"},
                       "0+60x20"),
            ],
            "alert_rule_test": edge("KmonProbeBlind", "5m", "6m",
                                    {**PROBE_LABELS, "f": "send"}, {
                "summary": "kmon probe probe-0:9465 of cluster prod-eu has had no successful "
                           "send for 6m 0s",
                "description": "The probe probe-0:9465 of cluster prod-eu is running, but its "
                               "last successful send was 6m 0s ago: the cluster is "
                               "unreachable, refuses the probe (ACLs, credentials) or has no "
                               "leaders. Nothing is being checked.",
                "runbook_url": RUNBOOK + "KmonProbeBlind",
            }),
        },
    ],
    "KmonProbeFailing": [
        {   # 60 ok sends a minute until 5m, then 60 info (timed out) a minute
            "input_series": [
                series("kmon_probe_ops_total", {**PROBE, "f": "send", "type": "ok"},
                       "0+60x5 300x30"),
                series("kmon_probe_ops_total", {**PROBE, "f": "send", "type": "info"},
                       "0x5 0+60x30"),
                # polls of nothing still succeed: they do not count
                series("kmon_probe_ops_total", {**PROBE, "f": "poll", "type": "ok"},
                       "0+600x35"),
            ],
            # the share over 5m: 0.75 at 7m, 0.5 at 8m, 0.25 at 9m (pending), 0 from 10m
            "alert_rule_test": edge("KmonProbeFailing", "13m", "14m",
                                    {**PROBE, "severity": "warning"}, {
                "summary": "kmon probe probe-0:9465 of cluster prod-eu: 0% of writes succeed",
                "description": "Only 0% of the sends and transactions of probe probe-0:9465 "
                               "(cluster prod-eu) succeeded over 5 minutes, below 50%: most of "
                               "the workload fails or times out, so little is being checked.",
                "runbook_url": RUNBOOK + "KmonProbeFailing",
            }),
        },
    ],
    "KmonProbeNoLiveKeys": [{
        "input_series": [series("kmon_probe_keys_live", PROBE, "8x4 0x20")],
        "alert_rule_test": edge("KmonProbeNoLiveKeys", "9m", "10m", PROBE_LABELS, {
            "summary": "kmon probe probe-0:9465 of cluster prod-eu writes and reads no key",
            "description": "The probe probe-0:9465 of cluster prod-eu has had no live key "
                           "(topic-partition) for 5m: its topics are missing or have no leader, "
                           "so no partition is probed.",
            "runbook_url": RUNBOOK + "KmonProbeNoLiveKeys",
        }),
    }],
    "KmonProbeBrokersUncovered": [
        {   # one of 3 brokers uncovered from 5m: `for: 5m` ends at 10m; $value counts them
            "input_series": [
                series("kmon_probe_brokers", {**PROBE, "state": "present"}, "3x20"),
                series("kmon_probe_brokers", {**PROBE, "state": "covered"}, "3x4 2x16"),
            ],
            "alert_rule_test": edge("KmonProbeBrokersUncovered", "9m", "10m",
                                    {**PROBE, "severity": "warning"}, {
                "summary": "kmon probe probe-0:9465 of cluster prod-eu: 1 brokers lead no "
                           "probed partition",
                "description": "For 5m, 1 brokers of cluster prod-eu have led no live key of "
                               "probe probe-0:9465: data loss or stalls on them would go "
                               "unseen. The probe elects its keys' preferred leaders back and "
                               "creates topics placed on uncovered brokers; this says it could "
                               "not.",
                "runbook_url": RUNBOOK + "KmonProbeBrokersUncovered",
            }),
        },
        {   # a broker joins at 5m and is covered 4 minutes later: never for 5m, silent
            "input_series": [
                series("kmon_probe_brokers", {**PROBE, "state": "present"}, "3x4 4x16"),
                series("kmon_probe_brokers", {**PROBE, "state": "covered"}, "3x8 4x12"),
            ],
            "alert_rule_test": [{"eval_time": t, "alertname": "KmonProbeBrokersUncovered",
                                 "exp_alerts": []} for t in ("8m", "10m", "15m")],
        },
    ],
    "KmonProbeDroppingEvents": [{
        # 60 per minute from 5m: rate > 0 from 6m, fires at 11m
        "input_series": [series("kmon_probe_events_dropped_total", PROBE, "0x4 0+60x30")],
        "alert_rule_test": edge("KmonProbeDroppingEvents", "10m", "11m",
                                {**PROBE, "severity": "warning"}, {
            "summary": "kmon probe probe-0:9465 of cluster prod-eu is dropping op events",
            "description": "The probe probe-0:9465 of cluster prod-eu drops 1.00 op events per "
                           "second because its buffer to the events topic is full. The monitor "
                           "checks an incomplete history: expect spurious unseen values and "
                           "missed anomalies.",
            "runbook_url": RUNBOOK + "KmonProbeDroppingEvents",
        }),
    }],
    "KmonUnseenValuesGrowing": [{
        # flat at 5 until 10m, +10 a minute after: growing from 11m, fires at 26m
        "input_series": [series("kmon_unseen_values", {**MONITOR, **KEY}, "5x10 15+10x40")],
        "alert_rule_test": edge("KmonUnseenValuesGrowing", "25m", "26m",
                                {**KEY, **CLUSTER, "severity": "warning"}, {
            "summary": "Unseen values keep growing on probe-a/3 (cluster prod-eu, broker 2)",
            "description": "Acknowledged values that no poll has returned grew by 100 in the "
                           "last 10 minutes on probe-a/3 (cluster prod-eu, broker 2), and have "
                           "kept growing for 15 minutes: consumers are stuck or writes are "
                           "being lost.",
            "runbook_url": RUNBOOK + "KmonUnseenValuesGrowing",
        }),
    }],
    "KmonUnseenVerdicts": [
        {   # three values declared unseen at 10m: fires at 15m
            "input_series": [series("kmon_unseen_verdicts_total", {**MONITOR, **KEY},
                                    "0x9 3x40")],
            "alert_rule_test": edge("KmonUnseenVerdicts", "14m", "15m",
                                    {**KEY, **CLUSTER, "severity": "warning"}, {
                "summary": "Acknowledged values unseen past the grace period on probe-a/3 "
                           "(cluster prod-eu, broker 2)",
                "description": "3 acknowledged values of probe-a/3 (cluster prod-eu, broker 2) "
                               "were not returned by any poll within the unseen grace period "
                               "in the last 15 minutes. Evidence: `kmon evidence --cluster "
                               "prod-eu --anomaly unseen --topic probe-a --partition 3 "
                               "--since 1h`.",
                "runbook_url": RUNBOOK + "KmonUnseenVerdicts",
            }),
        },
        {   # restored at 3 under a new instance: nothing new
            "input_series": [
                series("kmon_unseen_verdicts_total", {**MONITOR, **KEY}, "3x10"),
                series("kmon_unseen_verdicts_total", {**MONITOR_2, **KEY}, "_x12 3x30"),
            ],
            "alert_rule_test": silent("KmonUnseenVerdicts", "13m", "20m", "30m"),
        },
    ],
    "KmonRealtimeLagHigh": [{
        "input_series": [series("kmon_realtime_lag_seconds", {**MONITOR, **KEY}, "5x4 90x30")],
        "alert_rule_test": edge("KmonRealtimeLagHigh", "14m", "15m",
                                {**KEY, **CLUSTER, "severity": "warning"}, {
            "summary": "Consumers of probe-a/3 (cluster prod-eu, broker 2) are 1m 30s behind",
            "description": "The worst realtime lag of a probe consumer on probe-a/3 (cluster "
                           "prod-eu, broker 2) has been above 1 minute for 10 minutes (now 1m "
                           "30s): polls return data long after it was written.",
            "runbook_url": RUNBOOK + "KmonRealtimeLagHigh",
        }),
    }],
}


def test_a_monitor_starting_up_is_not_input_flat(promtool: str, tmp_path: Path) -> None:
    """Before its first batch a monitor reads nothing yet: not blind, only starting (and
    KmonMonitorStalled's if it lasts). With a stall threshold longer than `for:`, an input-flat
    rule without the first-batch condition would fire here at 6m."""
    slow_start = tmp_path / "slow-start.yml"
    slow_start.write_text(yaml.safe_dump(rules.prometheus_rules(
        "read_committed", rules.RuleConfig(monitor_stalled_after_s=900))))
    tests = [{
        "interval": "1m",
        "input_series": [
            series("kmon_monitor_start_timestamp_seconds", MONITOR, "0x20"),
            series("kmon_monitor_last_batch_timestamp_seconds", MONITOR, "0x20"),
            series("kmon_monitor_events_total", MONITOR, "0x20"),
            EMITTING,
        ],
        "alert_rule_test": silent("KmonMonitorInputFlat", "6m", "10m", "14m"),
    }]
    run_promtool(promtool, tmp_path, bare(tmp_path, slow_start), tests)


def test_every_health_alert_has_an_edge_case() -> None:
    names = {n for n in _alert_names(RULES) if not n.startswith("KmonAnomaly-")}
    assert names == set(HEALTH_CASES)


@pytest.mark.parametrize("alert", sorted(HEALTH_CASES))
def test_health_alert_at_the_edge_of_its_for_window(
    promtool: str, tmp_path: Path, alert: str
) -> None:
    full = [{"interval": "1m", **c} for c in HEALTH_CASES[alert] if not _uses_firing(c)]
    labels_only = [{"interval": "1m", **c} for c in HEALTH_CASES[alert] if _uses_firing(c)]
    if full:
        run_promtool(promtool, tmp_path, RULES, full)
    if labels_only:
        run_promtool(promtool, tmp_path, bare(tmp_path), labels_only)


def _uses_firing(case: dict[str, Any]) -> bool:
    return any(t["exp_alerts"] and "exp_annotations" not in t["exp_alerts"][0]
               for t in case["alert_rule_test"])


def test_a_wrong_expectation_fails(promtool: str, tmp_path: Path) -> None:
    """The harness itself: promtool must reject a case whose alert fires a minute late."""
    case = {"interval": "1m", **HEALTH_CASES["KmonMonitorDown"][0]}
    case["alert_rule_test"] = [{**case["alert_rule_test"][1], "eval_time": "9m"}]
    with pytest.raises(AssertionError, match="FAILED"):
        run_promtool(promtool, tmp_path, RULES, [case])


def test_a_chart_scoped_rule_file_ignores_other_clusters(promtool: str, tmp_path: Path) -> None:
    """The chart replaces the any-cluster matcher with its own cluster's: another release's
    verdict (another cluster) does not page from this release's rules."""
    scoped = tmp_path / "scoped.yml"
    scoped.write_text(RULES.read_text().replace(rules.ANY_CLUSTER, 'cluster="prod-eu"'))
    other = {**MONITOR, "cluster": "prod-us"}
    tests = [{
        "interval": "1m",
        "input_series": [series(LAST, {**LOST, **MONITOR}, "_x10 600x10"),
                         series(LAST, {**LOST, **other}, "_x10 600x10"),
                         series("up", other, "0x20")],
        "alert_rule_test": [firing(LOST_ALERT, "10m", LOST_LABELS),
                            # prod-eu's monitor is not scraped at all: down; prod-us' is not
                            # this release's business
                            firing("KmonMonitorDown", "6m", {"job": "kmon-monitor",
                                                            "cluster": "prod-eu",
                                                            "severity": "critical"})],
    }]
    run_promtool(promtool, tmp_path, bare(tmp_path, scoped), tests)


def test_recording_rules_evaluate(promtool: str, tmp_path: Path) -> None:
    tests = [{
        "interval": "1m",
        "input_series": [
            series("kmon_probe_ops_total", {**PROBE, "f": "send", "type": "ok"}, "0+60x20"),
            series("kmon_anomalies_total", {**MONITOR, **KEY, "anomaly": "G0"}, "0+1x20"),
        ],
        "promql_expr_test": [
            {"expr": "cluster_f_type:kmon_probe_ops:rate5m", "eval_time": "10m",
             "exp_samples": [{"labels": 'cluster_f_type:kmon_probe_ops:rate5m'
                              '{cluster="prod-eu",f="send",type="ok"}', "value": 1}]},
            {"expr": "cluster_anomaly_topic:kmon_anomalies:increase1h", "eval_time": "10m",
             "exp_samples": [{"labels": 'cluster_anomaly_topic:kmon_anomalies:increase1h'
                              '{anomaly="G0",cluster="prod-eu",topic="probe-a"}',
                              "value": 10}]},
        ],
    }]
    run_promtool(promtool, tmp_path, RULES, tests)
