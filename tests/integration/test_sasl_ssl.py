"""SASL_SSL for real: the suite's cluster's SASL_SSL listeners (SCRAM-SHA-512 over TLS with the
local CA, kmon.local.tls) refuse what they must, and probe and monitor run through them end to
end with exactly the settings the Helm chart renders.

The chart is rendered for ``kafka.securityProtocol=SASL_SSL``, ``kafka.sasl.mechanism=
SCRAM-SHA-512``, credentials and CA from existing Secrets; the rendered ConfigMaps, the Secrets'
contents (the cluster's real CA, a SCRAM user made for this run) and the containers' args and
environment are laid out under a temp dir standing for the pods (tests.chart.Pod), and the real
``kmon probe --config ...`` and ``kmon monitor --config ...`` run from them as child processes
for about a minute. The bootstrap servers are the SASL_SSL listeners only, and those advertise
only themselves, so every byte either program exchanged with Kafka went through TLS and a SCRAM
login. A second probe, rendered the same but given a wrong password in its Secret, cannot start.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families

from kmon.local.cluster import LocalCluster
from kmon.local.kafka_config import SCRAM_MECHANISM
from kmon.local.stack import Child
from tests.chart import Pod, pods, tool
from tests.helpers import wait_until

RUN_SECONDS = 60.0  # probe and monitor together, from the monitor's first counted event
PROBE_SLOT, BAD_PROBE_SLOT, MONITOR_SLOT = 10, 11, 12  # metrics ports (kmon.local.ports)
TLS_SECRET, SASL_SECRET = "kafka-tls", "kafka-credentials"
# What the child processes inherit from the test's environment; the pod's env does the rest.
KEPT_ENV = ("KMON_HOME", "KMON_CACHE", "KMON_PORT_BASE")


@dataclass(frozen=True)
class ScramUser:
    name: str
    password: str


@dataclass(frozen=True)
class RunResult:
    """What the end-to-end run left: the probe's summary, both programs' last metrics."""

    probe_summary: dict[str, Any]
    probe_errors: dict[str, float]  # kmon_probe_client_errors_total by librdkafka error name
    monitor_metrics: dict[str, float]
    bad_probe_exit: int | None
    bad_probe_log: str


@pytest.fixture(scope="module")
def user(local_cluster: LocalCluster) -> ScramUser:
    """A SCRAM-SHA-512 user of this run only: its logins are this module's alone."""
    made = ScramUser(f"kmon-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex)
    local_cluster.create_scram_user(made.name, made.password)
    return made


def _first_error(config: dict[str, Any]) -> KafkaError:
    """The first error a producer with ``config`` reports while it connects."""
    errors: list[KafkaError] = []
    producer = Producer({**config, "error_cb": errors.append})
    wait_until(lambda: producer.poll(0.2) >= 0 and bool(errors), "a client error", timeout=60)
    return errors[0]


def test_a_wrong_password_is_refused(local_cluster: LocalCluster, user: ScramUser) -> None:
    error = _first_error(local_cluster.sasl_ssl_client_config(user.name, "not-" + user.password))
    assert error.code() == KafkaError._AUTHENTICATION, error
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in error.str()


def test_an_unknown_ca_is_refused(local_cluster: LocalCluster, user: ScramUser) -> None:
    config = local_cluster.sasl_ssl_client_config(user.name, user.password)
    del config["ssl.ca.location"]  # librdkafka falls back to the system's CAs
    error = _first_error(config)
    assert error.code() == KafkaError._SSL, error
    assert "certificate verify failed" in error.str()


def test_the_user_logs_in_and_the_listener_advertises_itself(
        local_cluster: LocalCluster, user: ScramUser) -> None:
    with AdminClient(local_cluster.sasl_ssl_client_config(user.name, user.password)) as admin:
        brokers = admin.list_topics(timeout=30).brokers
    assert {b.id: b.port for b in brokers.values()} == {
        n: local_cluster.ports.sasl_ssl(n) for n in (1, 2, 3)}


# ---------------------------------------------------------------------------------------------
# probe and monitor as the chart deploys them


def _values(cluster: LocalCluster, run: str, tmp: Path) -> Path:
    """The chart's values for this run: the cluster's SASL_SSL listeners, this run's topics."""
    ports = cluster.ports
    values = {
        "cluster": "sasl-live",
        "kafka": {
            "bootstrapServers": cluster.sasl_ssl_bootstrap,
            "eventsTopic": f"kmon-events-{run}",
            "anomaliesTopic": f"kmon-anomalies-{run}",
            "deadLetterTopic": f"kmon-dead-letters-{run}",
            "securityProtocol": "SASL_SSL",
            "sasl": {"mechanism": SCRAM_MECHANISM, "existingSecret": SASL_SECRET},
            "tls": {"existingSecret": TLS_SECRET},
        },
        "probe": {
            "metricsPort": ports.metrics(PROBE_SLOT),
            # a modest workload (2 cores shared), as the full-stack test runs
            "extraArgs": ["--name", f"sasl{run}", "--rate", "20", "--processes", "2",
                          "--set", "catchup_interval=10", "--set", "final_read_timeout=5"],
        },
        "monitor": {
            "metricsPort": ports.metrics(MONITOR_SLOT),
            "extraArgs": ["--set", f"topics.facts=kmon-facts-{run}"],
            "spark": {"master": "local[2]"},
            "checkpoint": {"location": str(tmp / "checkpoint")},
        },
    }
    path = tmp / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def _child(name: str, pod: Pod) -> tuple[Child, dict[str, str]]:
    """``kmon <args>`` as the pod runs it: its args, and its env over the test's basics."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KMON_", "SPARK_")) or k in KEPT_ENV}
    env.update(pod.env)
    argv = [sys.executable, "-m", "kmon.cli", *pod.args]
    return Child(name, argv, pod.root / f"{name}.log"), env


def _start(child: Child, env: dict[str, str], stdout: Path) -> None:
    """Like ``Child.start``, with the pod's environment and stdout (a probe's summary) apart."""
    child.log.parent.mkdir(parents=True, exist_ok=True)
    with open(child.log, "ab") as err, open(stdout, "wb") as out:
        child.proc = subprocess.Popen(child.argv, stdout=out, stderr=err, env=env,
                                      stdin=subprocess.DEVNULL, start_new_session=True)


def _samples(port: int) -> list[Any]:
    """Every sample one /metrics endpoint serves."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def _metrics(port: int) -> dict[str, float]:
    """Every sample of one /metrics endpoint, summed over labels, by sample name."""
    out: dict[str, float] = {}
    for sample in _samples(port):
        out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


def _client_errors(port: int) -> dict[str, float]:
    return {s.labels["code"]: s.value for s in _samples(port)
            if s.name == "kmon_probe_client_errors_total"}


def _tail(path: Path, lines: int = 30) -> str:
    text = path.read_text(errors="replace") if path.exists() else "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def _alive(*children: Child) -> bool:
    dead = [c for c in children if not c.running()]
    assert not dead, "\n".join(f"{c.name} exited:\n{_tail(c.log)}" for c in dead)
    return True


def _monitor_events(port: int) -> float:
    try:
        return _metrics(port).get("kmon_monitor_events_total", 0.0)
    except OSError:  # not serving yet
        return 0.0


@pytest.fixture(scope="module")
def run(local_cluster: LocalCluster, user: ScramUser,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunResult]:
    helm = tool("helm")
    tmp = tmp_path_factory.mktemp("sasl-ssl")
    values = str(_values(local_cluster, uuid.uuid4().hex[:8], tmp))
    tls = {"ca.crt": local_cluster.ca_path.read_text()}  # the Secret's contents
    good = pods(helm, tmp / "pods", {TLS_SECRET: tls, SASL_SECRET: {
        "username": user.name, "password": user.password}}, "-f", values)
    bad_port = local_cluster.ports.metrics(BAD_PROBE_SLOT)  # beside the good probe's
    bad = pods(helm, tmp / "bad", {TLS_SECRET: tls, SASL_SECRET: {
        "username": user.name, "password": "wrong"}},
        "-f", values, "--set", f"probe.metricsPort={bad_port}")["probe"]
    monitor, monitor_env = _child("monitor", good["monitor"])
    probe, probe_env = _child("probe", good["probe"])
    bad_probe, bad_env = _child("bad-probe", bad)
    summary_path = tmp / "probe-summary.json"
    monitor_port = local_cluster.ports.metrics(MONITOR_SLOT)
    try:
        _start(monitor, monitor_env, tmp / "monitor.out")
        _start(probe, probe_env, summary_path)
        _start(bad_probe, bad_env, tmp / "bad-probe.out")
        wait_until(lambda: _alive(monitor, probe) and _monitor_events(monitor_port) > 0,
                   "the monitor counts events", timeout=600)
        time.sleep(RUN_SECONDS)
        _alive(monitor, probe)
        probe_errors = _client_errors(local_cluster.ports.metrics(PROBE_SLOT))
        assert probe.stop() == 0, _tail(probe.log)
        summary = yaml.safe_load(summary_path.read_text())  # JSON is YAML
        delivered = summary["events_emitted"] - summary["events_undelivered_at_exit"]
        wait_until(lambda: _alive(monitor) and _monitor_events(monitor_port) >= delivered,
                   f"the monitor has read all {delivered} events", timeout=600)
        monitor_metrics = _metrics(monitor_port)
        bad_exit = bad_probe.proc.wait(120) if bad_probe.proc else None
        yield RunResult(summary, probe_errors, monitor_metrics, bad_exit,
                        bad_probe.log.read_text(errors="replace"))
    finally:
        for child in (bad_probe, probe, monitor):
            child.stop()


def test_probe_and_monitor_run_through_sasl_ssl_with_no_anomaly(run: RunResult) -> None:
    summary = run.probe_summary
    ok = sum(n for outcome, n in summary["outcomes"].items() if outcome.endswith(" ok"))
    assert ok > 100, summary["outcomes"]
    assert summary["events_dropped"] == 0 and summary["events_emitted"] > 0
    assert run.monitor_metrics["kmon_monitor_events_total"] >= summary["events_emitted"] - (
        summary["events_undelivered_at_exit"])
    assert run.monitor_metrics["kmon_anomalies_total"] == 0
    assert run.monitor_metrics.get("kmon_dead_letters_total", 0) == 0
    # the probe's clients saw no TLS or login error: every connection was accepted
    assert not {"_AUTHENTICATION", "_SSL"} & set(run.probe_errors), run.probe_errors


def test_the_probe_cannot_start_with_a_wrong_password(run: RunResult) -> None:
    """The same rendering with a wrong password in the Secret: the credentials are used."""
    assert run.bad_probe_exit == 1, run.bad_probe_log
    assert "kmon probe: could not start" in run.bad_probe_log

