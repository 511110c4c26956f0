"""The whole stack as `kmon run` runs it: probe and monitor as child processes, Prometheus
scraping them with the generated rules, on the suite's own cluster (no second cluster).

One healthy run of about a minute and a half, then: both jobs scraped, the monitor checking the
probe's events, no anomaly counted (every anomaly series at 0), every rule loaded and none
firing, and every dashboard panel's query returning data from the real targets, except the
panels below that are empty by design on a healthy cluster.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kmon.checker.anomaly import ANOMALY_TYPES
from kmon.dashboards import queries, rules, tools
from kmon.local.cluster import LocalCluster
from kmon.local.stack import LocalStack, StackOptions
from tests.helpers import missing_tool, suite_stack, wait_until
from tests.integration.promapi import Prom, dashboard_queries, query_name, substitute

# Panels with no series on a healthy run, and why. A panel listed here may still have data.
NO_DATA_WHEN_HEALTHY = {
    "overview.anomalies_last_hour": "filters `> 0`: lists only anomalies counted",
    "drilldown.anomaly_totals": "filters `> 0`: lists only anomalies counted",
    "overview.detection_latency_p99": "kmon_detection_latency_seconds is observed per verdict",
    "drilldown.detection_latency_p50": "kmon_detection_latency_seconds is observed per verdict",
    "drilldown.detection_latency_p99": "kmon_detection_latency_seconds is observed per verdict",
    "overview.dead_letters": "kmon_dead_letters_total has a series per reason seen; none here",
    "overview.probe_client_errors": "a series per librdkafka error seen; a quiet run has none",
    "overview.firing_alerts": "ALERTS of kmon's alerts firing: none on a healthy run",
    "annotations.monitor_restarts": "a mark where a monitor (re)started: 2 minutes after start",
    "overview.share_anomalies_in_range": "filters `> 0`: lists only share anomalies counted",
    "overview.share_ops": "the probe's share consumers' ops: share.processes is 0 by default",
}
# Of those, the ones that must be empty: they would list an anomaly.
EMPTY_WHEN_HEALTHY = ("overview.anomalies_last_hour", "drilldown.anomaly_totals",
                      "overview.firing_alerts", "overview.share_anomalies_in_range")
RUN_SECONDS = 75.0  # how long the stack runs before the checks: several catch-up reads


def _tail(log: Path, lines: int = 30) -> str:
    text = log.read_text(errors="replace") if log.exists() else "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def _children_alive(stack: LocalStack) -> bool:
    dead = stack.dead_children()
    assert not dead, "\n".join(f"{c.name} exited:\n{_tail(c.log)}" for c in dead)
    return True


def _options(run: str) -> StackOptions:
    """A modest workload (2 cores shared) on topics of this run only."""
    return StackOptions(
        events_topic=f"kmon-events-{run}", scrape_interval="2s",
        probe_args=["--name", f"fs{run}", "--rate", "20", "--processes", "2",
                    "--set", "catchup_interval=10", "--set", "final_read_timeout=5"],
        monitor_args=["--set", f"topics.anomalies=kmon-anomalies-{run}",
                      "--set", f"topics.facts=kmon-facts-{run}",
                      "--set", f"topics.dead-letters=kmon-dead-letters-{run}"],
    )


@pytest.fixture(scope="module")
def prom(local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[Prom]:
    if tools.find("prometheus") is None or tools.find("promtool") is None:
        missing_tool("prometheus/promtool", "`make setup` installs them")
    _, base = suite_stack()
    stack = LocalStack(local_cluster, _options(uuid.uuid4().hex[:8]),
                       home=tmp_path_factory.mktemp("full-stack"), port_base=base)
    started = time.monotonic()
    stack.start(say=lambda _: None)
    try:
        assert stack.prometheus is not None
        p = Prom(stack.prometheus.url)
        wait_until(lambda: _children_alive(stack) and p.jobs_up() >= {
            rules.PROBE_JOB, rules.MONITOR_JOB}, "both jobs scraped", timeout=120)
        wait_until(lambda: _children_alive(stack) and (
            p.value("kmon_monitor_events_total") or 0) > 0, "the monitor counts events",
            timeout=120)
        time.sleep(max(0.0, RUN_SECONDS - (time.monotonic() - started)))
        _children_alive(stack)
        yield p
    finally:
        stack.stop(say=lambda _: None)


def test_prometheus_scrapes_probe_and_monitor(prom: Prom) -> None:
    for job in (rules.PROBE_JOB, rules.MONITOR_JOB):
        assert prom.value(f'up{{job="{job}"}}') == 1, job


def test_monitor_processes_the_probes_events(prom: Prom) -> None:
    assert (prom.value("kmon_probe_events_emitted_total") or 0) > 0
    assert (prom.value("kmon_monitor_events_total") or 0) > 0
    assert (prom.value("sum(kmon_probe_keys_live)") or 0) > 0


def test_every_kmon_series_names_the_cluster(prom: Prom) -> None:
    """Probe and monitor label every metric with the watched cluster (the stack's default,
    `local`), and Prometheus labels their targets with it too."""
    assert prom.series_of('{__name__=~"kmon_.+"}')
    assert prom.series_of('{__name__=~"kmon_.+", cluster!="local"}') == []
    assert prom.series_of('up{job=~"kmon-.+", cluster!="local"}') == []


def test_a_healthy_run_counts_no_anomaly(prom: Prom) -> None:
    # Every type is exported at 0 for each partition seen, so the sum is a real 0, not absent.
    assert prom.value("sum(kmon_anomalies_total)") == 0
    types = {s["metric"]["anomaly"] for s in prom.series_of("kmon_anomalies_total")}
    assert types == set(ANOMALY_TYPES)


def test_rules_are_loaded_and_none_fires(prom: Prom) -> None:
    wait_until(prom.rules_evaluated, "every rule group loaded and evaluated", timeout=30)
    assert not prom.unhealthy_rules()
    alerts = prom.get("/api/v1/alerts")["data"]["alerts"]
    assert not [a["labels"]["alertname"] for a in alerts if a["state"] == "firing"]
    # Anomaly alerts fire at once (for: 0m): not even pending.
    assert not [a for a in alerts
                if a["labels"]["alertname"].startswith(rules.ANOMALY_ALERT_PREFIX)]


def test_every_dashboard_panel_has_data(prom: Prom) -> None:
    panels = {query_name(expr): substitute(expr) for _, _, expr in dashboard_queries()}
    assert set(NO_DATA_WHEN_HEALTHY) <= set(panels)
    wanted = {name: q for name, q in panels.items() if name not in NO_DATA_WHEN_HEALTHY}

    def missing() -> list[str]:
        return [name for name, q in wanted.items() if not prom.series_of(q)]

    # Rates need two scrapes and recorded series a rule evaluation: a bounded wait for data.
    wait_until(lambda: not missing(), f"panels with data: still empty {missing()}", timeout=60)
    for name in EMPTY_WHEN_HEALTHY:
        assert prom.series_of(panels[name]) == [], name


def test_template_variables_have_values(prom: Prom) -> None:
    for name, query in queries.VARIABLES.items():
        match = query.removeprefix("label_values(").removesuffix(")")
        metric, _, label = match.rpartition(", ")
        values = prom.get(f"/api/v1/label/{label}/values", **{"match[]": substitute(metric)})
        assert values["status"] == "success", name
        assert values["data"] or name in queries.KUBERNETES_ONLY_VARIABLES, name
