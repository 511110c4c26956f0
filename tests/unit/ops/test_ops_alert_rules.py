"""The generated Prometheus rules, checked and unit-tested by promtool.

Each alert has a case at the edge of its ``for:`` window: the last evaluation before the window
ends is silent, the one that ends it fires, with exact labels and annotations (written out here
literally, so a template change shows up as a failure). Anomaly alerts (``for: 0m``) are tested
at the verdict's first evaluation and at the end of their increase() window.
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
MONITOR = {"job": "kmon-monitor", "instance": "monitor:9464"}
PROBE = {"job": "kmon-probe", "instance": "probe-0:9465"}
TP = {"topic": "probe-a", "partition": "3"}


@pytest.fixture(scope="module")
def promtool() -> str:
    path = tools.find("promtool")
    if path is None:
        pytest.skip("promtool not installed: `make setup` (kmon setup) installs Debian's "
                    "prometheus package, which ships it")
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


def _anomaly_annotations(anomaly: str, what: str) -> dict[str, str]:
    return {
        "summary": f"kmon: {anomaly} on probe-a/3",
        "description": (
            f"The kmon monitor found 1 new {anomaly} anomalies in partition 3 of topic probe-a "
            f"in the last 15m: {what}. This is not allowed by Kafka's model. Find the evidence "
            "record on the anomalies topic and run `kmon investigate <id>`."
        ),
        "runbook_url": RUNBOOK + anomaly,
    }


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
    "G1c": "transactions formed a write-read cycle (G1c)",
    "torn-transaction": "a transaction is partly visible and partly provably invisible",
}


def test_one_alert_per_paging_anomaly_and_none_for_allowed() -> None:
    names = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"]
             for r in g["rules"] if "alert" in r}
    anomaly_alerts = {n.removeprefix("KmonAnomaly-") for n in names if n.startswith("KmonAnomaly-")}
    assert anomaly_alerts == set(PAGING)
    # Kafka's transactions interleave: G0 and int-send-skip are normal, never paged on.
    assert {"G0", "int-send-skip"}.isdisjoint(anomaly_alerts)
    # read_uncommitted consumers see aborted and each other's uncommitted writes by design.
    names_ru = {r["alert"] for g in yaml.safe_load(RULES_RU.read_text())["groups"]
                for r in g["rules"] if "alert" in r}
    assert {f"KmonAnomaly-{a}" for a in PAGING} - names_ru == {"KmonAnomaly-G1a",
                                                               "KmonAnomaly-G1c"}


@pytest.mark.parametrize("anomaly", sorted(PAGING))
def test_anomaly_alert_fires_on_the_verdict_and_resolves_after_its_window(
    promtool: str, tmp_path: Path, anomaly: str
) -> None:
    alert = f"KmonAnomaly-{anomaly}"
    labels = {"anomaly": anomaly, **TP, "severity": "critical"}
    ann = _anomaly_annotations(anomaly, PAGING[anomaly])
    metric_labels = {"anomaly": anomaly, **TP, **MONITOR}
    other = {**metric_labels, "anomaly": "G0" if anomaly != "G0" else "duplicate"}
    tests = [
        {   # a counter the monitor exported at 0 counts one verdict at 10m
            "interval": "1m",
            "input_series": [series("kmon_anomalies_total", metric_labels, "0x9 1x30"),
                             series("kmon_anomalies_total", other, "0+1x40")],
            "alert_rule_test": [
                *edge(alert, "9m", "10m", labels, ann),
                # still firing while the verdict is within the 15m window, then resolved
                *edge(alert, "25m", "24m", labels, ann)[::-1],
            ],
        },
        {   # the partition's first verdict: the series is born at 1
            "interval": "1m",
            "input_series": [series("kmon_anomalies_total", metric_labels, "_x10 1x30")],
            "alert_rule_test": [
                *edge(alert, "9m", "10m", labels, ann),
                {"eval_time": "25m", "alertname": alert, "exp_alerts": []},
            ],
        },
    ]
    run_promtool(promtool, tmp_path, RULES, tests)


def test_allowed_anomalies_do_not_page(promtool: str, tmp_path: Path) -> None:
    inputs = [series("kmon_anomalies_total", {"anomaly": a, **TP, **MONITOR}, "0+1x30")
              for a in ("G0", "int-send-skip")]
    checks = [{"eval_time": "20m", "alertname": f"KmonAnomaly-{a}", "exp_alerts": []}
              for a in ("G0", "int-send-skip")]
    run_promtool(promtool, tmp_path, RULES,
                 [{"interval": "1m", "input_series": inputs, "alert_rule_test": checks}])


HEALTH_CASES: dict[str, list[dict[str, Any]]] = {
    "KmonMonitorDown": [
        {   # down from 5m: `for: 5m` ends at 10m
            "input_series": [series("up", MONITOR, "1x4 0x20")],
            "alert_rule_test": edge("KmonMonitorDown", "9m", "10m",
                                    {**MONITOR, "severity": "critical"}, {
                "summary": "kmon monitor is down or not scraped",
                "description": "The monitor monitor:9464 (job kmon-monitor) has been down or "
                               "missing for 5 minutes: anomalies are not being detected.",
                "runbook_url": RUNBOOK + "KmonMonitorDown",
            }),
        },
        {   # not scraped at all (only the probe is)
            "input_series": [series("up", PROBE, "1x20")],
            "alert_rule_test": edge("KmonMonitorDown", "4m", "5m",
                                    {"job": "kmon-monitor", "severity": "critical"}, {
                "summary": "kmon monitor is down or not scraped",
                "description": "The monitor  (job kmon-monitor) has been down or missing for 5 "
                               "minutes: anomalies are not being detected.",
                "runbook_url": RUNBOOK + "KmonMonitorDown",
            }),
        },
    ],
    "KmonMonitorStale": [
        {   # batches every minute until 4m (t=240); stale past 180 s from 8m; fires at 13m
            "input_series": [
                series("kmon_monitor_last_batch_timestamp_seconds", MONITOR, "0+60x4 240x30"),
                series("kmon_probe_events_emitted_total", PROBE, "0+100x40"),
            ],
            "alert_rule_test": edge("KmonMonitorStale", "12m", "13m",
                                    {**MONITOR, "severity": "critical"}, {
                "summary": "kmon monitor has run no micro-batch for 9m 0s",
                "description": "The monitor monitor:9464 finished its last micro-batch 9m 0s "
                               "ago while probes keep emitting op events: the stream is stuck "
                               "and anomalies are not being detected.",
                "runbook_url": RUNBOOK + "KmonMonitorStale",
            }),
        },
        {   # no op events: an idle stream runs no batches, and that is fine
            "input_series": [
                series("kmon_monitor_last_batch_timestamp_seconds", MONITOR, "0+60x4 240x30"),
                series("kmon_probe_events_emitted_total", PROBE, "100x40"),
            ],
            "alert_rule_test": [
                {"eval_time": "20m", "alertname": "KmonMonitorStale", "exp_alerts": []}],
        },
    ],
    "KmonMonitorFallingBehind": [{
        "input_series": [series("kmon_monitor_watermark_delay_seconds", MONITOR,
                                "30x4 900x30")],
        "alert_rule_test": edge("KmonMonitorFallingBehind", "19m", "20m",
                                {**MONITOR, "severity": "warning"}, {
            "summary": "kmon monitor's watermark is 15m 0s behind",
            "description": "The event-time watermark of monitor:9464 is 15m 0s behind the wall "
                           "clock: verdicts (lost writes, unseen values) are delayed by as much.",
            "runbook_url": RUNBOOK + "KmonMonitorFallingBehind",
        }),
    }],
    "KmonDeadLettersRising": [{
        # 6 per minute from 5m: rate > 0 from 6m, fires at 16m
        "input_series": [series("kmon_dead_letters_total", {**MONITOR, "reason": "decode"},
                                "0x4 0+6x30")],
        "alert_rule_test": edge("KmonDeadLettersRising", "15m", "16m",
                                {**MONITOR, "reason": "decode", "severity": "warning"}, {
            "summary": "kmon monitor is dead-lettering op events (decode)",
            "description": "monitor:9464 has sent 0.10 malformed op events per second to the "
                           "dead-letter topic for 10 minutes (reason decode). The ops they "
                           "carried are missing from the checked history.",
            "runbook_url": RUNBOOK + "KmonDeadLettersRising",
        }),
    }],
    "KmonProbeDown": [
        {   # target down from 5m
            "input_series": [series("up", PROBE, "1x4 0x20")],
            "alert_rule_test": edge("KmonProbeDown", "9m", "10m",
                                    {**PROBE, "severity": "critical"}, {
                "summary": "kmon probe probe-0:9465 is down",
                "description": "The probe probe-0:9465 has not been running its workload for 5 "
                               "minutes (target down, workload loop stopped, or no probe "
                               "target at all): the cluster is not being probed.",
                "runbook_url": RUNBOOK + "KmonProbeDown",
            }),
        },
        {   # scraped fine, but its workload loop stopped at 5m
            "input_series": [series("up", PROBE, "1x20"),
                             series("kmon_probe_up", PROBE, "1x4 0x20")],
            "alert_rule_test": edge("KmonProbeDown", "9m", "10m",
                                    {**PROBE, "severity": "critical"}, {
                "summary": "kmon probe probe-0:9465 is down",
                "description": "The probe probe-0:9465 has not been running its workload for 5 "
                               "minutes (target down, workload loop stopped, or no probe "
                               "target at all): the cluster is not being probed.",
                "runbook_url": RUNBOOK + "KmonProbeDown",
            }),
        },
        {   # no probe target at all (only the monitor is scraped)
            "input_series": [series("up", MONITOR, "1x20")],
            "alert_rule_test": edge("KmonProbeDown", "4m", "5m",
                                    {"job": "kmon-probe", "severity": "critical"}, {
                "summary": "kmon probe  is down",
                "description": "The probe  has not been running its workload for 5 minutes "
                               "(target down, workload loop stopped, or no probe target at "
                               "all): the cluster is not being probed.",
                "runbook_url": RUNBOOK + "KmonProbeDown",
            }),
        },
    ],
    "KmonProbeDroppingEvents": [{
        # 60 per minute from 5m: rate > 0 from 6m, fires at 11m
        "input_series": [series("kmon_probe_events_dropped_total", PROBE, "0x4 0+60x30")],
        "alert_rule_test": edge("KmonProbeDroppingEvents", "10m", "11m",
                                {**PROBE, "severity": "warning"}, {
            "summary": "kmon probe probe-0:9465 is dropping op events",
            "description": "The probe probe-0:9465 drops 1.00 op events per second because its "
                           "buffer to the events topic is full. The monitor checks an incomplete "
                           "history: expect spurious unseen values and missed anomalies.",
            "runbook_url": RUNBOOK + "KmonProbeDroppingEvents",
        }),
    }],
    "KmonUnseenValuesGrowing": [{
        # flat at 5 until 10m, +10 a minute after: growing from 11m, fires at 26m
        "input_series": [series("kmon_unseen_values", {**MONITOR, **TP}, "5x10 15+10x40")],
        "alert_rule_test": edge("KmonUnseenValuesGrowing", "25m", "26m",
                                {**TP, "severity": "warning"}, {
            "summary": "Unseen values keep growing on probe-a/3",
            "description": "Acknowledged values that no poll has returned grew by 100 in the "
                           "last 10 minutes on probe-a/3, and have kept growing for 15 minutes: "
                           "consumers are stuck or writes are being lost.",
            "runbook_url": RUNBOOK + "KmonUnseenValuesGrowing",
        }),
    }],
    "KmonUnseenVerdicts": [{
        # three values declared unseen at 10m: fires at 15m
        "input_series": [series("kmon_unseen_verdicts_total", {**MONITOR, **TP}, "0x9 3x40")],
        "alert_rule_test": edge("KmonUnseenVerdicts", "14m", "15m",
                                {**TP, "severity": "warning"}, {
            "summary": "Acknowledged values unseen past the grace period on probe-a/3",
            "description": "3 acknowledged values of probe-a/3 were not returned by any poll "
                           "within the unseen grace period in the last 15 minutes.",
            "runbook_url": RUNBOOK + "KmonUnseenVerdicts",
        }),
    }],
    "KmonRealtimeLagHigh": [{
        "input_series": [series("kmon_realtime_lag_seconds", {**MONITOR, **TP}, "5x4 90x30")],
        "alert_rule_test": edge("KmonRealtimeLagHigh", "14m", "15m",
                                {**TP, "severity": "warning"}, {
            "summary": "Consumers of probe-a/3 are 1m 30s behind",
            "description": "The worst realtime lag of a probe consumer on probe-a/3 has been "
                           "above 1 minute for 10 minutes (now 1m 30s): polls return data long "
                           "after it was written.",
            "runbook_url": RUNBOOK + "KmonRealtimeLagHigh",
        }),
    }],
}


def test_every_health_alert_has_an_edge_case() -> None:
    names = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"]
             for r in g["rules"] if "alert" in r and not r["alert"].startswith("KmonAnomaly-")}
    assert names == set(HEALTH_CASES)


@pytest.mark.parametrize("alert", sorted(HEALTH_CASES))
def test_health_alert_at_the_edge_of_its_for_window(
    promtool: str, tmp_path: Path, alert: str
) -> None:
    tests = [{"interval": "1m", **case} for case in HEALTH_CASES[alert]]
    run_promtool(promtool, tmp_path, RULES, tests)


def test_a_wrong_expectation_fails(promtool: str, tmp_path: Path) -> None:
    """The harness itself: promtool must reject a case whose alert fires a minute late."""
    case = {"interval": "1m", **HEALTH_CASES["KmonMonitorDown"][0]}
    case["alert_rule_test"] = [{**case["alert_rule_test"][1], "eval_time": "9m"}]
    with pytest.raises(AssertionError, match="FAILED"):
        run_promtool(promtool, tmp_path, RULES, [case])


def test_recording_rules_evaluate(promtool: str, tmp_path: Path) -> None:
    tests = [{
        "interval": "1m",
        "input_series": [
            series("kmon_probe_ops_total", {**PROBE, "f": "send", "type": "ok"}, "0+60x20"),
            series("kmon_anomalies_total", {**MONITOR, **TP, "anomaly": "G0"}, "0+1x20"),
        ],
        "promql_expr_test": [
            {"expr": "f_type:kmon_probe_ops:rate5m", "eval_time": "10m",
             "exp_samples": [{"labels": 'f_type:kmon_probe_ops:rate5m{f="send",type="ok"}',
                              "value": 1}]},
            {"expr": "anomaly_topic:kmon_anomalies:increase1h", "eval_time": "10m",
             "exp_samples": [{"labels": 'anomaly_topic:kmon_anomalies:increase1h'
                              '{anomaly="G0",topic="probe-a"}', "value": 10}]},
        ],
    }]
    run_promtool(promtool, tmp_path, RULES, tests)
