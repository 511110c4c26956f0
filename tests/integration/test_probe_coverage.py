"""Broker coverage and stable topics of the probe, on the real local cluster.

- every broker leads a live probe key from the start, where Kafka's own placement would leave
  one out (1-partition topics, 2 live keys on 3 brokers), and the metric says so;
- with coverage off the same probe reports a broker left out, and a real Prometheus with
  kmon's rules fires KmonProbeBrokersUncovered for it and not for a covering probe;
- a fourth, broker-only node joining the running cluster is covered within a refresh or two;
- five restarts of a probe under the same name create no topic: it adopts its own.

Each probe is a `kmon probe` process, as a pod runs it, scraped live on a metrics port of the
suite's stack (slots 16..18, unused by the other tests) and stopped with SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from kmon import kafka_admin
from kmon.dashboards import rules
from kmon.dashboards.rules import RuleConfig
from kmon.local.cluster import LocalCluster
from kmon.local.extra_broker import ExtraBroker, add_broker
from kmon.local.prometheus import LocalPrometheus
from kmon.probes import values as V
from tests.helpers import wait_until
from tests.integration.promapi import Prom

REFRESH = 2.0  # metadata_refresh of these probes, seconds
QUIET = {"processes": "2", "rate": "10", "catchup_interval": "0",
         "final_read_timeout": "2", "metadata_refresh": str(REFRESH), "seed": "3"}
# Kafka places two 1-partition topics on at most two of three brokers.
SPARSE = {"partitions": "1", "live_keys": "2"}


@dataclass
class Probe:
    """A running `kmon probe` and its metrics port."""

    proc: subprocess.Popen
    port: int

    def samples(self, name: str) -> list[Sample]:
        """The samples of ``name`` the probe serves now; [] before it serves any."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return []
        return [s for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == name]

    def brokers(self) -> dict[str, float]:
        """``kmon_probe_brokers`` by state."""
        return {s.labels["state"]: s.value for s in self.samples("kmon_probe_brokers")}

    def stop(self) -> dict[str, Any]:
        """SIGTERM; the summary it prints."""
        self.proc.send_signal(signal.SIGTERM)
        out, err = self.proc.communicate(timeout=120)
        assert self.proc.returncode == 0, err[-3000:]
        return json.loads(out)


def _probe(cluster: LocalCluster, tmp_path: Path, name: str, slot: int, **extra: str) -> Probe:
    """`kmon probe` as a pod runs it, serving metrics once its workload runs."""
    port = cluster.ports.metrics(slot)
    history = tmp_path / f"{name}-{uuid.uuid4().hex[:4]}.jsonl"
    sets = [a for k, v in {**QUIET, **extra}.items() for a in ("--set", f"{k}={v}")]
    proc = subprocess.Popen(
        [sys.executable, "-m", "kmon.cli", "probe", "-b", cluster.bootstrap, "--name", name,
         "--no-events", "--history", str(history), "--metrics-port", str(port), *sets],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    probe = Probe(proc, port)
    try:
        # Ops complete once the workload runs, after which SIGTERM stops it cleanly.
        wait_until(lambda: proc.poll() is not None or bool(probe.samples("kmon_probe_ops_total")),
                   f"probe {name} completes ops", timeout=120)
    except AssertionError:
        proc.kill()
        raise
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    return probe


def _topics(cluster: LocalCluster, name: str) -> set[str]:
    prefix = f"kmon-probe-{name}"
    with cluster.admin() as admin:
        names = admin.list_topics(timeout=10).topics
    return {t for t in names if V.topic_number(prefix, t) is not None}


def _leaders(cluster: LocalCluster, topics: set[str]) -> set[int]:
    return {s.leader for t in topics for s in cluster.describe_topic(t).values()
            if s.leader is not None}


def _delete(cluster: LocalCluster, topics: set[str]) -> None:
    with cluster.admin() as admin:
        kafka_admin.delete_topics(admin, topics, timeout=30)


@pytest.fixture
def name(local_cluster: LocalCluster) -> Iterator[str]:
    """A fresh probe name; its topics are deleted afterwards."""
    n = f"cov{uuid.uuid4().hex[:6]}"
    yield n
    _delete(local_cluster, _topics(local_cluster, n))


def test_every_broker_leads_a_live_key_from_the_start(
    local_cluster: LocalCluster, tmp_path: Path, name: str,
) -> None:
    probe = _probe(local_cluster, tmp_path, name, 7, **SPARSE)
    try:
        assert probe.brokers() == {"present": 3.0, "covered": 3.0}
        assert _leaders(local_cluster, _topics(local_cluster, name)) == {1, 2, 3}
    finally:
        summary = probe.stop()
    assert summary["brokers"] == {"present": [1, 2, 3], "covered": [1, 2, 3]}
    assert summary["topics_created"] <= 3  # one topic per live key, or one for the broker left


def test_coverage_off_reports_the_broker_left_out(
    local_cluster: LocalCluster, tmp_path: Path, name: str,
) -> None:
    probe = _probe(local_cluster, tmp_path, name, 8, coverage="false", **SPARSE)
    try:
        got = probe.brokers()
    finally:
        summary = probe.stop()
    assert got["present"] == 3.0 and got["covered"] < 3.0
    assert len(summary["brokers"]["covered"]) < 3 and summary["topics_created"] == 2


def test_the_coverage_alert_fires_live_for_the_probe_leaving_a_broker_out(
    local_cluster: LocalCluster, tmp_path: Path, name: str,
) -> None:
    """Two probes scraped by a real Prometheus with kmon's rules (a 10 s window): the one with
    coverage off pages, the covering one stays silent."""
    rule_file = tmp_path / "rules.yml"
    rule_file.write_text(yaml.safe_dump(rules.prometheus_rules(
        "read_committed", RuleConfig(blind_for="10s"))))
    off = _probe(local_cluster, tmp_path, name, 8, coverage="false", **SPARSE)
    on = _probe(local_cluster, tmp_path, f"{name}on", 7, **SPARSE)
    prom = LocalPrometheus(home=tmp_path, port_base=local_cluster.ports.base,
                           targets={"kmon-probe": [f"127.0.0.1:{off.port}",
                                                   f"127.0.0.1:{on.port}"]},
                           rule_files=[rule_file], scrape_interval="1s")
    firing = 'ALERTS{alertname="KmonProbeBrokersUncovered", alertstate="firing"}'
    try:
        prom.up()
        api = Prom(prom.url)
        wait_until(lambda: bool(api.series_of(firing)), "KmonProbeBrokersUncovered fires",
                   timeout=120)
        alerts = [s["metric"] for s in api.series_of(firing)]
    finally:
        prom.down()
        off.stop()
        on.stop()
        _delete(local_cluster, _topics(local_cluster, f"{name}on"))
    assert [(a["instance"], a["cluster"], a["severity"]) for a in alerts] == [
        (f"127.0.0.1:{off.port}", "local", "warning")]


def test_a_fourth_broker_joining_is_covered(
    local_cluster: LocalCluster, tmp_path: Path, name: str,
) -> None:
    probe = _probe(local_cluster, tmp_path, name, 9)
    extra: ExtraBroker | None = None
    try:
        assert probe.brokers() == {"present": 3.0, "covered": 3.0}
        extra = add_broker(local_cluster, 4)
        wait_until(lambda: probe.brokers() == {"present": 4.0, "covered": 4.0},
                   "the probe covers broker 4", timeout=120)
        assert 4 in _leaders(local_cluster, _topics(local_cluster, name))
    finally:
        summary = probe.stop()
        # Nothing may keep a replica on broker 4 once it is gone (see kmon.local.extra_broker).
        _delete(local_cluster, _topics(local_cluster, name))
        if extra is not None:
            extra.stop()
    assert summary["brokers"]["covered"] == [1, 2, 3, 4]
    wait_until(lambda: local_cluster.live_brokers() == {1, 2, 3}, "broker 4 gone", timeout=60)


def test_five_restarts_create_no_topic(
    local_cluster: LocalCluster, tmp_path: Path, name: str,
) -> None:
    _probe(local_cluster, tmp_path, name, 7).stop()
    before = _topics(local_cluster, name)
    assert before
    created = []
    for _ in range(5):
        created.append(_probe(local_cluster, tmp_path, name, 7).stop()["topics_created"])
    assert _topics(local_cluster, name) == before
    assert created == [0] * 5
