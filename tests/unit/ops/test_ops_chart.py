"""The Helm chart: helm lint, kubeconform on `helm template`, and what the renderings contain.

Tools come from `make setup` (`kmon dashboards install-tools`): helm and kubeconform built with
`go install` into $KMON_CACHE/bin, standalone strict Kubernetes schemas converted from the
kubernetes-validate wheel, the prometheus-operator CRD schemas from its Go module; the
SparkApplication schema is tests/unit/ops/schemas (the operator's CRD is not reachable here).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kmon.dashboards import generate, rules, tools
from kmon.streaming.config import SOURCE_DEFAULTS
from tests.chart import CHART, KUBE_VERSION, ROOT, TLS_FILES, Pod, by_kind, env_of, objects, render
from tests.chart import pods as _pods
from tests.chart import tool as _tool
from tests.helpers import missing_tool

CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
SPARK_SCHEMA = Path(__file__).parent / "schemas"
BASE = ["--set", "kafka.bootstrapServers=kafka:9092", "--set", "cluster=prod-eu"]
CRD_TEMPLATE = "{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json"


@pytest.fixture(scope="module")
def helm() -> str:
    return _tool("helm")


@pytest.fixture(scope="module")
def kubeconform() -> list[str]:
    binary = _tool("kubeconform")
    k8s = tools.k8s_schema_location()
    if k8s is None:
        missing_tool("Kubernetes schemas", "run `make setup` (kmon dashboards install-tools)")
    return [binary, "-strict", "-summary", "-schema-location", k8s,
            "-schema-location", tools.crd_schema_location(),
            "-schema-location", f"{SPARK_SCHEMA}/{CRD_TEMPLATE}"]


def workloads(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The pods' owners by name: Deployments, and the probes' StatefulSet."""
    return {**by_kind(objs, "Deployment"), **by_kind(objs, "StatefulSet")}


def monitor_settings(objs: list[dict[str, Any]]) -> dict[str, Any]:
    """The monitor's settings file as the chart rendered it."""
    return yaml.safe_load(by_kind(objs, "ConfigMap")["t-kmon-config"]["data"]["monitor.yaml"])


# ---------------------------------------------------------------------------------------------
# helm lint and kubeconform


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_helm_lint_strict(helm: str, values: Path) -> None:
    done = subprocess.run([helm, "lint", "--strict", str(CHART), "-f", str(values),
                           "--kube-version", KUBE_VERSION], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_rendering_is_valid_kubernetes(helm: str, kubeconform: list[str], values: Path,
                                       tmp_path: Path) -> None:
    out = tmp_path / "rendered.yaml"
    out.write_text(render(helm, "-f", str(values)).stdout)
    # The executor pod template travels inside a ConfigMap: validate it as the Pod it is.
    for cm in by_kind(list(yaml.safe_load_all(out.read_text())), "ConfigMap").values():
        if "executor-pod-template.yaml" in cm.get("data", {}):
            (tmp_path / "executor-pod.yaml").write_text(cm["data"]["executor-pod-template.yaml"])
    files = sorted(str(p) for p in tmp_path.glob("*.yaml"))
    done = subprocess.run([*kubeconform, *files], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Invalid: 0, Errors: 0, Skipped: 0" in done.stdout


def test_kubeconform_catches_a_bad_manifest(kubeconform: list[str], tmp_path: Path) -> None:
    """The harness itself: a misspelt field and a kind without schema both fail."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n"
                   "spec: {replica: 1, selector: {}, template: {}}\n---\n"
                   "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: y}\n")
    done = subprocess.run([*kubeconform, str(bad)], capture_output=True, text=True)
    assert done.returncode != 0
    assert "'replica' not allowed" in done.stdout
    assert "could not find schema for Widget" in done.stdout


# ---------------------------------------------------------------------------------------------
# What the renderings say


def _containers(objs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(owner, pod security context, container) of every workload container, Spark's included."""
    out = []
    for o in objs:
        if o["kind"] in ("Deployment", "StatefulSet"):
            pod = o["spec"]["template"]["spec"]
            out += [(o["metadata"]["name"], pod["securityContext"], c) for c in pod["containers"]]
        elif o["kind"] == "SparkApplication":
            for role in ("driver", "executor"):
                spec = o["spec"][role]
                out.append((f"{o['metadata']['name']}/{role}", spec["podSecurityContext"], spec))
        elif o["kind"] == "ConfigMap" and "executor-pod-template.yaml" in o["data"]:
            pod = yaml.safe_load(o["data"]["executor-pod-template.yaml"])["spec"]
            out += [("executor-template", pod["securityContext"], c) for c in pod["containers"]]
    return out


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_every_container_is_non_root_without_capabilities(helm: str, values: Path) -> None:
    found = _containers(objects(helm, "-f", str(values)))
    assert found
    for owner, pod, c in found:
        sc = c["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] != 0, owner
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, owner
        assert sc["capabilities"] == {"drop": ["ALL"]}, owner
        assert sc["allowPrivilegeEscalation"] is False, owner
        assert sc["readOnlyRootFilesystem"] is True, owner


def test_probe_and_client_mode_monitor_have_resource_requests(helm: str) -> None:
    deployments = workloads(objects(helm, *BASE))
    assert set(deployments) == {"t-kmon-probe", "t-kmon-monitor"}
    for d in deployments.values():
        for c in d["spec"]["template"]["spec"]["containers"]:
            assert {"cpu", "memory"} <= set(c["resources"]["requests"]), d["metadata"]["name"]


def test_client_mode_with_kubernetes_executors(helm: str) -> None:
    objs = objects(helm, *BASE)
    assert by_kind(objs, "SparkApplication") == {}
    monitor = by_kind(objs, "Deployment")["t-kmon-monitor"]
    pod = monitor["spec"]["template"]["spec"]
    assert monitor["spec"]["replicas"] == 1 and monitor["spec"]["strategy"]["type"] == "Recreate"
    settings = monitor_settings(objs)
    assert settings["spark.master"] == "k8s://https://kubernetes.default.svc:443"
    assert settings["checkpoint"] == "/var/lib/kmon/checkpoint"
    assert pod["automountServiceAccountToken"] is True  # it creates executor pods
    services = by_kind(objs, "Service")
    assert services["t-kmon-driver"]["spec"]["clusterIP"] == "None"
    conf = by_kind(objs, "ConfigMap")["t-kmon-spark"]["data"]["spark-defaults.conf"]
    assert "spark.driver.host t-kmon-driver.obs.svc" in conf
    assert "spark.kubernetes.namespace obs" in conf
    assert "spark.kubernetes.container.image ghcr.io/kmon-dev/kmon:0.1.0" in conf
    role = by_kind(objs, "Role")["t-kmon-spark-driver"]
    assert "pods" in role["rules"][0]["resources"] and "create" in role["rules"][0]["verbs"]
    pvc = by_kind(objs, "PersistentVolumeClaim")["t-kmon-checkpoint"]
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    template = yaml.safe_load(by_kind(objs, "ConfigMap")["t-kmon-spark"]["data"][
        "executor-pod-template.yaml"])
    assert {v["name"] for v in template["spec"]["volumes"]} >= {"checkpoint", "config"}


def test_local_master_needs_no_api_access(helm: str) -> None:
    objs = objects(helm, "-f", str(CHART / "ci" / "local-master-values.yaml"))
    pod = by_kind(objs, "Deployment")["t-kmon-monitor"]["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == "kmon"
    assert monitor_settings(objs)["spark.master"] == "local[2]"
    assert monitor_settings(objs)["checkpoint"] == "s3a://kmon-checkpoints/prod"
    assert by_kind(objs, "Role") == {} and by_kind(objs, "PersistentVolumeClaim") == {}
    assert "t-kmon-driver" not in by_kind(objs, "Service")
    assert "t-kmon-probe" not in workloads(objs)
    assert "executor-pod-template.yaml" not in by_kind(objs, "ConfigMap")["t-kmon-spark"]["data"]


def test_standalone_master_ships_the_images_kmon_pack_archive(helm: str) -> None:
    objs = objects(helm, "-f", str(CHART / "ci" / "local-master-values.yaml"),
                   "--set", "monitor.spark.master=spark://spark-master:7077")
    assert monitor_settings(objs)["spark.master"] == "spark://spark-master:7077"
    defaults = by_kind(objs, "ConfigMap")["t-kmon-spark"]["data"]["spark-defaults.conf"]
    # The Dockerfile's `kmon pack` output, run by executors that do not have kmon.
    assert "spark.archives file:///opt/kmon/kmon-env.tar.gz#environment" in defaults
    assert "spark.pyspark.python ./environment/bin/python" in defaults
    assert "kmon pack --source /src -o /opt/kmon/kmon-env.tar.gz" in (
        CHART.parents[1] / "Dockerfile").read_text()


def test_operator_mode_renders_a_spark_application_the_service_selects(helm: str) -> None:
    objs = objects(helm, *BASE, "--set", "monitor.mode=operator")
    assert "t-kmon-monitor" not in by_kind(objs, "Deployment")
    app = by_kind(objs, "SparkApplication")["t-kmon-monitor"]["spec"]
    assert app["type"] == "Python" and app["mode"] == "cluster"
    assert app["mainApplicationFile"] == "local:///opt/kmon/kmon_main.py"
    assert app["arguments"] == ["monitor", "--config", "/etc/kmon/config/monitor.yaml"]
    assert "spark.master" not in monitor_settings(objs)  # spark-submit's
    selector = by_kind(objs, "Service")["t-kmon-monitor"]["spec"]["selector"]
    assert selector.items() <= app["driver"]["labels"].items()
    assert not selector.items() <= app["executor"]["labels"].items()
    assert app["driver"]["ports"] == [{"name": "metrics", "protocol": "TCP",
                                       "containerPort": 9464}]
    assert app["executor"]["instances"] == 2
    assert "t-kmon-driver" not in by_kind(objs, "Service")


def test_sasl_ssl_with_mutual_tls(helm: str) -> None:
    objs = objects(helm, "-f", str(CHART / "ci" / "operator-sasl-ssl-values.yaml"))
    secret = by_kind(objs, "Secret")["t-kmon-kafka"]
    assert secret["stringData"] == {"username": "kmon", "password": "s3cret"}
    data = by_kind(objs, "ConfigMap")["t-kmon-config"]["data"]
    assert sorted(data["client.properties"].splitlines()) == [
        "client.rack=eu-west-1a",
        "sasl.mechanism=SCRAM-SHA-256",
        "security.protocol=SASL_SSL",
        "ssl.ca.location=/etc/kmon/kafka-tls/ca.crt",
        "ssl.certificate.location=/etc/kmon/kafka-tls/tls.crt",
        "ssl.endpoint.identification.algorithm=https",
        "ssl.key.location=/etc/kmon/kafka-tls/tls.key",
    ]
    assert all("s3cret" not in text for text in data.values())
    probe = workloads(objs)["t-kmon-probe"]["spec"]["template"]["spec"]
    env = env_of(probe["containers"][0])
    assert env["KMON_SASL_PASSWORD"] == {"secretKeyRef": {"name": "t-kmon-kafka",
                                                          "key": "password"}}
    assert env["KMON_EVENTS_BOOTSTRAP"] == "events.example.com:9093"
    assert {"name": "kafka-tls", "secret": {"secretName": "kafka-tls"}} in probe["volumes"]


def test_existing_sasl_secret_is_used_not_created(helm: str) -> None:
    objs = objects(helm, "-f", str(CHART / "ci" / "local-master-values.yaml"))
    assert by_kind(objs, "Secret") == {}
    env = env_of(by_kind(objs, "Deployment")["t-kmon-monitor"]["spec"]["template"]["spec"][
        "containers"][0])
    assert env["KMON_SASL_USERNAME"]["secretKeyRef"]["name"] == "kafka-credentials"


@pytest.mark.parametrize(("args", "message"), [
    (["--set", "cluster=prod-eu"], "kafka.bootstrapServers is required"),
    (["--set", "kafka.bootstrapServers=kafka:9092"], "cluster is required"),
    ([*BASE, "--set", "cluster=prod eu"], "does not match pattern"),
    ([*BASE, "--set", "kafka.securityProtocol=SASL_PLAINTEXT"], "kafka.sasl.username is required"),
    ([*BASE, "--set", "kafka.securityProtocol=SSL"], "kafka.tls.existingSecret is required"),
])
def test_missing_settings_fail_the_rendering_naming_them(helm: str, args: list[str],
                                                         message: str) -> None:
    done = render(helm, *args, check=False)
    assert done.returncode != 0 and message in done.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--set", "probe.replcas=2"], "additional properties 'replcas' not allowed"),
    (["--set", "isolation=serializable"], "value must be one of"),
    (["--set", "kafka.securityProtocol=TLS"], "value must be one of"),
    (["--set", "kafka.bootstrapServers=kafka"], "does not match pattern"),
    (["--set", "kafka.extraConfig.sasl\\.password=x"], "invalid propertyName 'sasl.password'"),
    (["--set", "monitor.spark.conf.shuffle=4"], "'shuffle' does not match pattern '^spark"),
    (["--set", "monitor.mode=operator", "--set", "monitor.spark.master=local[2]"],
     "monitor/spark/master"),
    (["--set", "monitor.spark.executorMemory=2GB"], "does not match pattern"),
    (["--set", "probe.resources.requests.cpu=lots"], "probe/resources/requests/cpu"),
    (["--set", "share.lock=30 seconds"], "share/lock"),
    (["--set", "share.deliveryLimit=0"], "share/deliveryLimit"),
    (["--set", "share.deliveryLimit=17"], "share/deliveryLimit"),
    (["--set", "share.skew=-1s"], "share/skew"),
    (["--set", "share.skew=-1"], "share/skew"),
    (["--set", "share.lock=0"], "share/lock"),
    (["--set", "share.lockMs=30000"], "additional properties 'lockMs' not allowed"),
])
def test_values_schema_rejects_bad_values(helm: str, args: list[str], message: str) -> None:
    done = render(helm, *BASE, *args, check=False)
    assert done.returncode != 0 and message in done.stderr, done.stderr


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_prometheus_rule_is_the_generated_rules(helm: str, isolation: str) -> None:
    url = "https://wiki.example.com/runbook"
    objs = objects(helm, *BASE, "--set", "prometheusRule.enabled=true",
                   "--set", f"isolation={isolation}",
                   "--set", f"prometheusRule.runbookBaseUrl={url}")
    groups = by_kind(objs, "PrometheusRule")["t-kmon"]["spec"]["groups"]
    expected = yaml.safe_load(
        (generate.GENERATED / generate.prometheus_rules_name(isolation)).read_text()
        .replace(rules.RUNBOOK_URL, url)
        .replace(rules.ANY_CLUSTER, 'cluster="prod-eu"'))["groups"]
    assert groups == expected
    # Each release's rules select its own cluster only: two releases in one Prometheus never
    # evaluate each other's series, nor double each other's alerts.
    exprs = [r["expr"] for g in groups for r in g["rules"]]
    assert all('cluster="prod-eu"' in e and rules.ANY_CLUSTER not in e for e in exprs)
    alerts = {r["alert"] for g in groups for r in g["rules"] if "alert" in r}
    assert ("KmonAnomaly-G1a" in alerts) == (isolation == "read_committed")
    assert all(r["annotations"]["runbook_url"].startswith(url + "#")
               for g in groups for r in g["rules"] if "alert" in r)


def test_service_monitor_gives_the_jobs_the_alerts_select(helm: str) -> None:
    objs = objects(helm, *BASE, "--set", "serviceMonitor.enabled=true")
    sm = by_kind(objs, "ServiceMonitor")["t-kmon"]["spec"]
    assert sm["jobLabel"] == "kmon.io/job"
    # every target labelled with the watched cluster (what `up`-based alerts select), the
    # exporters' own cluster label kept
    for endpoint in sm["endpoints"]:
        assert endpoint["honorLabels"] is True
        assert {"targetLabel": "cluster", "replacement": "prod-eu"} in endpoint["relabelings"]
    jobs = {s["metadata"]["labels"].get("kmon.io/job") for s in by_kind(objs, "Service").values()}
    assert {rules.MONITOR_JOB, rules.PROBE_JOB} <= jobs
    for name, svc in by_kind(objs, "Service").items():
        if "kmon.io/job" in svc["metadata"]["labels"]:
            labels = svc["metadata"]["labels"]
            assert sm["selector"]["matchLabels"].items() <= labels.items(), name
            assert [p["name"] for p in svc["spec"]["ports"]] == ["metrics"]


def test_renamed_jobs_are_what_the_rules_select(helm: str) -> None:
    objs = objects(helm, *BASE, "--set", "serviceMonitor.enabled=true",
                   "--set", "prometheusRule.enabled=true",
                   "--set", "serviceMonitor.jobs.monitor=kafka-prod-kmon-monitor",
                   "--set", "serviceMonitor.jobs.probe=kafka-prod-kmon-probe")
    jobs = {s["metadata"]["labels"].get("kmon.io/job") for s in by_kind(objs, "Service").values()}
    assert {"kafka-prod-kmon-monitor", "kafka-prod-kmon-probe"} <= jobs
    exprs = " ".join(r["expr"] for g in by_kind(objs, "PrometheusRule")["t-kmon"]["spec"]["groups"]
                     for r in g["rules"])
    assert 'job="kafka-prod-kmon-monitor"' in exprs and 'job="kafka-prod-kmon-probe"' in exprs
    assert f'job="{rules.MONITOR_JOB}"' not in exprs and f'job="{rules.PROBE_JOB}"' not in exprs
    objs = objects(helm, *BASE, "--set", "grafanaDashboards.enabled=true",
                   "--set", "serviceMonitor.jobs.monitor=kafka-prod-kmon-monitor")
    overview = by_kind(objs, "ConfigMap")["t-kmon-dashboards"]["data"]["kmon-overview.json"]
    assert 'job=~\\"kafka-prod-kmon-monitor|kmon-probe\\"' in overview


def test_dashboards_config_map_carries_the_generated_dashboards(helm: str) -> None:
    objs = objects(helm, *BASE, "--set", "grafanaDashboards.enabled=true")
    cm = by_kind(objs, "ConfigMap")["t-kmon-dashboards"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    for name in ("kmon-overview.json", "kmon-drilldown.json"):
        assert cm["data"][name] == (generate.GENERATED / name).read_text().rstrip("\n")


def test_optional_objects_are_off_by_default(helm: str) -> None:
    kinds = {o["kind"] for o in objects(helm, *BASE)}
    assert {"ServiceMonitor", "PrometheusRule", "SparkApplication", "Secret"}.isdisjoint(kinds)


# ---------------------------------------------------------------------------------------------
# What the deployed programs read: the rendered args, environment and files fed to the real
# loaders of `kmon probe` and `kmon monitor`, in a pod file system simulated under tmp_path
# (tests.chart.Pod; tests/integration/test_sasl_ssl.py runs them against a SASL_SSL broker).

def _probe_settings(pod: Pod) -> Any:
    from kmon.cli import build_parser
    from kmon.cli.probe import overrides_from_args
    from kmon.probes import config as probe_config

    args = build_parser().parse_args(pod.args)
    return probe_config.load(args.config, env=pod.env, overrides=overrides_from_args(args))


def _monitor_settings(pod: Pod, monkeypatch: pytest.MonkeyPatch) -> Any:
    from kmon.cli import build_parser
    from kmon.cli.monitor import _local_defaults
    from kmon.streaming import main

    for var in [v for v in __import__("os").environ if v.startswith(("KMON_", "SPARK_"))]:
        if var not in ("KMON_HOME", "KMON_CACHE", "KMON_PORT_BASE"):
            monkeypatch.delenv(var)
    for var, value in pod.env.items():
        monkeypatch.setenv(var, value)
    args = build_parser().parse_args(pod.args)
    return main.load_config(args, defaults=_local_defaults())  # as `kmon monitor` does


def test_probe_and_monitor_read_what_the_chart_sets_sasl_ssl(
        helm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pods = _pods(helm, tmp_path, {}, "-f", str(CHART / "ci" / "operator-sasl-ssl-values.yaml"))
    tls = f"{tmp_path}/probe/etc/kmon/kafka-tls"
    probe = _probe_settings(pods["probe"])
    security = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": "kmon", "sasl.password": "s3cret",
                "ssl.ca.location": f"{tls}/ca.crt", "ssl.certificate.location": f"{tls}/tls.crt",
                "ssl.key.location": f"{tls}/tls.key",
                "ssl.endpoint.identification.algorithm": "https", "client.rack": "eu-west-1a"}
    assert probe.client_settings("producer") == {"bootstrap.servers": "broker.example.com:9093",
                                                 **security}
    assert probe.client_settings("events") == {"bootstrap.servers": "events.example.com:9093",
                                               **security}
    assert probe.client_settings("consumer")["isolation.level"] == "read_uncommitted"
    assert (probe.events_topic, probe.metrics_port) == ("kmon-events", 9465)

    monitor = _monitor_settings(pods["monitor"], monkeypatch)
    tls = f"{tmp_path}/monitor/etc/kmon/kafka-tls"
    assert monitor.bootstrap_servers == "events.example.com:9093"  # kmon's own topics only
    assert monitor.producer() == {"bootstrap.servers": "events.example.com:9093",
                                  **security | {k: v.replace("/probe/", "/monitor/")
                                                for k, v in security.items() if "location" in k}}
    assert monitor.kafka_options() == {
        **SOURCE_DEFAULTS,
        "kafka.bootstrap.servers": "events.example.com:9093",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                                  'required username="kmon" password="s3cret";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": f"{tls}/ca.crt",
        "kafka.ssl.endpoint.identification.algorithm": "https",
        "kafka.ssl.keystore.type": "PEM",
        "kafka.ssl.keystore.certificate.chain": TLS_FILES["tls.crt"],
        "kafka.ssl.keystore.key": TLS_FILES["tls.key"],
    }
    assert (monitor.events_topic, monitor.anomalies_topic, monitor.dead_letter_topic) == (
        "kmon-events", "kmon-anomalies", "kmon-dead-letters")
    assert (monitor.metrics_port, monitor.checkpoint) == (9464, "/var/lib/kmon/checkpoint")
    assert "master" not in monitor.spark_conf  # the operator's spark-submit sets it


def test_monitor_reads_an_existing_secret_and_plain_sasl(
        helm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = {"kafka-credentials": {"username": "u1", "password": "pw1"}}
    pods = _pods(helm, tmp_path, secrets, "-f", str(CHART / "ci" / "local-master-values.yaml"))
    assert set(pods) == {"monitor"}
    monitor = _monitor_settings(pods["monitor"], monkeypatch)
    assert monitor.producer() == {"bootstrap.servers": "kafka:9092",
                                  "security.protocol": "SASL_PLAINTEXT",
                                  "sasl.mechanism": "PLAIN", "sasl.username": "u1",
                                  "sasl.password": "pw1"}
    assert monitor.kafka_options()["kafka.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="u1" '
        'password="pw1";')
    assert not any("ssl" in k for k in monitor.kafka_options())
    assert (monitor.checkpoint, monitor.spark_conf["master"]) == (
        "s3a://kmon-checkpoints/prod", "local[2]")


def test_plaintext_values_reach_probe_and_monitor(
        helm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pods = _pods(helm, tmp_path, {}, *BASE, "--set", "probe.metricsPort=9101",
                 "--set", "monitor.metricsPort=9102", "--set", "kafka.eventsTopic=ev",
                 "--set", "kafka.anomaliesTopic=an", "--set", "kafka.deadLetterTopic=dl",
                 "--set", "probe.extraArgs={--rate}", "--set-string", "probe.extraArgs[1]=7")
    probe = _probe_settings(pods["probe"])
    assert probe.client_settings("events") == {"bootstrap.servers": "kafka:9092",
                                               "security.protocol": "PLAINTEXT"}
    assert (probe.events_topic, probe.metrics_port, probe.rate) == ("ev", 9101, 7.0)
    assert probe.client_settings("consumer")["isolation.level"] == "read_committed"
    monitor = _monitor_settings(pods["monitor"], monkeypatch)
    assert monitor.kafka_options() == {**SOURCE_DEFAULTS, "kafka.bootstrap.servers": "kafka:9092",
                                       "kafka.security.protocol": "PLAINTEXT"}
    assert (monitor.events_topic, monitor.anomalies_topic, monitor.dead_letter_topic) == (
        "ev", "an", "dl")
    assert monitor.metrics_port == 9102
    assert monitor.spark_conf["master"] == "k8s://https://kubernetes.default.svc:443"
    # both name the watched cluster the chart was given: every metric and evidence record
    assert (probe.cluster, monitor.cluster) == ("prod-eu", "prod-eu")


def test_share_group_settings_reach_the_monitor(
        helm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kmon.streaming.monitor import fold_settings

    default = _monitor_settings(_pods(helm, tmp_path / "d", {}, *BASE)["monitor"], monkeypatch)
    assert (default.share_lock_s, default.share_delivery_limit, default.share_skew_s) == (
        30.0, 5, 1.0)
    pods = _pods(helm, tmp_path / "s", {}, *BASE, "--set", "share.lock=1500ms",
                 "--set", "share.deliveryLimit=3", "--set", "share.skew=0")
    monitor = _monitor_settings(pods["monitor"], monkeypatch)
    assert (monitor.share_lock_s, monitor.share_delivery_limit, monitor.share_skew_s) == (
        1.5, 3, 0.0)
    assert fold_settings(monitor).fold_config().share_settings.row() == (1_500_000_000, 3, 0)


# ---------------------------------------------------------------------------------------------
# Chart conventions


def test_named_templates_are_prefixed_with_the_chart_name() -> None:
    names = re.findall(r'define "([^"]+)"', (CHART / "templates" / "_helpers.tpl").read_text())
    assert names and all(n.startswith("kmon.") for n in names)
    for tpl in (CHART / "templates").glob("*"):
        for used in re.findall(r'include "([^"]+)"', tpl.read_text()):
            assert used in names, (tpl.name, used)


def _schema_keys(schema: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths of the values the schema names (not inside free-form maps)."""
    out = []
    for key, sub in schema.get("properties", {}).items():
        out.append(prefix + key)
        if key != "resources":  # Kubernetes' own ResourceRequirements: requests, limits
            out += _schema_keys(sub, f"{prefix}{key}.")
    return out


def test_every_value_is_documented_in_values_yaml() -> None:
    import json

    schema = json.loads((CHART / "values.schema.json").read_text())
    lines = (CHART / "values.yaml").read_text().splitlines()
    documented: set[str] = set()
    stack: list[tuple[int, str]] = []
    for i, line in enumerate(lines):
        m = re.match(r"^( *)([A-Za-z][\w.-]*):", line)
        if not m:
            continue
        indent, key = len(m[1]), m[2]
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([k for _, k in stack] + [key])
        stack.append((indent, key))
        if i > 0 and lines[i - 1].strip().startswith("#"):
            documented.add(path)
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def present(path: str) -> bool:
        node: Any = values
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    undocumented = [k for k in _schema_keys(schema) if present(k) and k not in documented]
    assert not undocumented
    assert set(values) <= set(schema["properties"])


def test_dockerfile_passes_hadolint(tmp_path: Path) -> None:
    hadolint = _tool("hadolint")
    done = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN apt-get install curl\n")
    assert subprocess.run([hadolint, str(bad)], capture_output=True).returncode != 0
    text = (ROOT / "Dockerfile").read_text()
    assert "USER 10001:10001" in text
    # the chart's SparkApplication runs local:///opt/kmon/kmon_main.py
    assert "COPY docker/entrypoint.sh docker/kmon_main.py /opt/kmon/" in text


def test_dockerfile_copies_only_what_the_build_context_keeps() -> None:
    # .dockerignore drops everything but an allow list; a COPY of anything else fails the build.
    lines = [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()]
    assert "*" in lines
    allowed = {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}
    copies = re.findall(r"^COPY (?!--from)(.+) \S+$", (ROOT / "Dockerfile").read_text(), re.M)
    sources = {src.split("/")[0] for line in copies for src in line.split()}
    assert sources and sources <= allowed, sources - allowed


def test_dockerfile_entrypoint_is_valid_bash() -> None:
    assert subprocess.run(["bash", "-n", str(ROOT / "docker" / "entrypoint.sh")]).returncode == 0


# ---------------------------------------------------------------------------------------------
# Production deployment: checkpoint volume and S3A, Strimzi's Secrets, disruption budgets,
# executors' pull secrets and resources, the `helm test` hook.

STRIMZI_CA = "my-cluster-cluster-ca-cert"
# The Secrets exactly as Strimzi creates them: the cluster CA, a KafkaUser `kmon` with
# authentication scram-sha-512, the same KafkaUser with authentication tls.
STRIMZI_SECRETS = {
    STRIMZI_CA: {"ca.crt": "-----BEGIN CERTIFICATE-----\nCLUSTER-CA\n",
                 "ca.p12": "P12", "ca.password": "p12pw"},
    "kmon": {"password": "scram-pw",
             "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                                 'required username="kmon" password="scram-pw";'},
}
STRIMZI_TLS_USER = {"ca.crt": "-----BEGIN CERTIFICATE-----\nCLIENTS-CA\n",
                    "user.crt": "-----BEGIN CERTIFICATE-----\nUSER-CERT\n",
                    "user.key": "-----BEGIN PRIVATE KEY-----\nUSER-KEY\n",
                    "user.p12": "P12", "user.password": "p12pw"}
STRIMZI_SCRAM = [*BASE, "--set", "kafka.securityProtocol=SASL_SSL",
                 "--set", "kafka.sasl.existingSecret=kmon", "--set", "kafka.sasl.username=kmon",
                 "--set", f"kafka.tls.caSecret={STRIMZI_CA}"]
STRIMZI_MTLS = CHART / "ci" / "strimzi-s3a-values.yaml"


def _pod_specs(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Pod specs by role: probe, monitor (driver), executor (template or SparkApplication)."""
    specs = {n.removeprefix("t-kmon-"): d["spec"]["template"]["spec"]
             for n, d in workloads(objs).items()}
    for app in by_kind(objs, "SparkApplication").values():
        specs["monitor"] = {**app["spec"]["driver"], "volumes": app["spec"]["volumes"]}
        specs["executor"] = {**app["spec"]["executor"], "volumes": app["spec"]["volumes"]}
    spark = by_kind(objs, "ConfigMap").get("t-kmon-spark", {}).get("data", {})
    if "executor-pod-template.yaml" in spark:
        specs["executor"] = yaml.safe_load(spark["executor-pod-template.yaml"])["spec"]
    return specs


def _tls_mount(spec: dict[str, Any], secrets: dict[str, dict[str, str]]) -> dict[str, str]:
    """The files of /etc/kmon/kafka-tls as Kubernetes projects them from ``secrets``."""
    volume = next(v for v in spec["volumes"] if v["name"] == "kafka-tls")
    if "secret" in volume:  # every key of one Secret, as a file of its name
        return dict(secrets[volume["secret"]["secretName"]])
    return {item["path"]: secrets[src["secret"]["name"]][item["key"]]
            for src in volume["projected"]["sources"] for item in src["secret"]["items"]}


def _mount(pod: Pod, files: dict[str, str]) -> None:
    """Replace the Pod's stand-in TLS files with what the rendered volume really projects."""
    folder = Path(pod.path("/etc/kmon/kafka-tls"))
    for old in folder.glob("*"):
        old.unlink()
    for name, text in files.items():
        (folder / name).write_text(text)


@pytest.mark.parametrize(("args", "modes"), [
    (["--set", "monitor.spark.master=local[2]"], ["ReadWriteOnce"]),
    ([], ["ReadWriteMany"]),  # executors on other pods mount it too
    (["--set", "monitor.mode=operator"], ["ReadWriteMany"]),
    (["--set", "monitor.spark.master=local[2]",
      "--set", "monitor.checkpoint.persistence.accessModes={ReadWriteOncePod}"],
     ["ReadWriteOncePod"]),
])
def test_checkpoint_access_mode_follows_the_spark_mode(helm: str, args: list[str],
                                                       modes: list[str]) -> None:
    pvc = by_kind(objects(helm, *BASE, *args), "PersistentVolumeClaim")["t-kmon-checkpoint"]
    assert pvc["spec"]["accessModes"] == modes


def test_strimzi_scram_user_and_cluster_ca_reach_probe_and_monitor(
        helm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    objs = objects(helm, *STRIMZI_SCRAM, "--set", "kafka.sasl.mechanism=SCRAM-SHA-512")
    assert by_kind(objs, "Secret") == {}  # Strimzi's own Secrets, no copy
    pods = _pods(helm, tmp_path, STRIMZI_SECRETS, *STRIMZI_SCRAM)
    specs = _pod_specs(objs)
    for role in ("probe", "monitor", "executor"):
        assert _tls_mount(specs[role], STRIMZI_SECRETS) == {
            "ca.crt": STRIMZI_SECRETS[STRIMZI_CA]["ca.crt"]}, role
    for name, pod in pods.items():
        _mount(pod, _tls_mount(specs[name], STRIMZI_SECRETS))
    probe = _probe_settings(pods["probe"])
    ca = f"{tmp_path}/probe/etc/kmon/kafka-tls/ca.crt"
    assert probe.client_settings("producer") == {
        "bootstrap.servers": "kafka:9092", "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "kmon", "sasl.password": "scram-pw",
        "ssl.ca.location": ca, "ssl.endpoint.identification.algorithm": "https"}
    assert Path(ca).read_text() == STRIMZI_SECRETS[STRIMZI_CA]["ca.crt"]
    monitor = _monitor_settings(pods["monitor"], monkeypatch)
    assert (monitor.producer()["sasl.username"], monitor.producer()["sasl.password"]) == (
        "kmon", "scram-pw")
    options = monitor.kafka_options()
    assert options["kafka.sasl.jaas.config"] == STRIMZI_SECRETS["kmon"]["sasl.jaas.config"]
    assert Path(options["kafka.ssl.truststore.location"]).read_text() == (
        STRIMZI_SECRETS[STRIMZI_CA]["ca.crt"])
    assert not any("keystore" in k for k in options)


def test_strimzi_tls_user_gives_the_client_certificate(
        helm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = {STRIMZI_CA: STRIMZI_SECRETS[STRIMZI_CA], "kmon": STRIMZI_TLS_USER,
               "kmon-s3": {"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "SK"}}
    objs = objects(helm, "-f", str(STRIMZI_MTLS))
    pods = _pods(helm, tmp_path, secrets, "-f", str(STRIMZI_MTLS))
    specs = _pod_specs(objs)
    # the cluster CA (which signed the brokers), not the clients CA in the KafkaUser's Secret
    expected = {"ca.crt": STRIMZI_SECRETS[STRIMZI_CA]["ca.crt"],
                "tls.crt": STRIMZI_TLS_USER["user.crt"], "tls.key": STRIMZI_TLS_USER["user.key"]}
    for role in ("probe", "monitor", "executor"):
        assert _tls_mount(specs[role], secrets) == expected, role
    for name, pod in pods.items():
        _mount(pod, _tls_mount(specs[name], secrets))
    tls = f"{tmp_path}/probe/etc/kmon/kafka-tls"
    probe = _probe_settings(pods["probe"])
    assert probe.client_settings("producer") == {
        "bootstrap.servers": "my-cluster-kafka-bootstrap.kafka:9093", "security.protocol": "SSL",
        "ssl.ca.location": f"{tls}/ca.crt", "ssl.certificate.location": f"{tls}/tls.crt",
        "ssl.key.location": f"{tls}/tls.key", "ssl.endpoint.identification.algorithm": "https"}
    monitor = _monitor_settings(pods["monitor"], monkeypatch)
    options = monitor.kafka_options()
    assert options["kafka.ssl.keystore.certificate.chain"] == STRIMZI_TLS_USER["user.crt"]
    assert options["kafka.ssl.keystore.key"] == STRIMZI_TLS_USER["user.key"]
    # ... and the checkpoint on the S3-compatible store, with the Secret's keys
    assert monitor.checkpoint == "s3a://kmon-checkpoints/my-cluster"
    assert {k: v for k, v in monitor.spark_conf.items() if k.startswith("hadoop.")} == {
        "hadoop.fs.s3a.endpoint": "http://minio.storage:9000",
        "hadoop.fs.s3a.endpoint.region": "us-east-1",
        "hadoop.fs.s3a.path.style.access": "true",
        "hadoop.fs.s3a.aws.credentials.provider":
            "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"}
    assert (pods["monitor"].env["AWS_ACCESS_KEY_ID"],
            pods["monitor"].env["AWS_SECRET_ACCESS_KEY"]) == ("AKID", "SK")
    assert env_of(specs["executor"]["containers"][0])["AWS_SECRET_ACCESS_KEY"] == {
        "secretKeyRef": {"name": "kmon-s3", "key": "AWS_SECRET_ACCESS_KEY"}}
    assert "AWS_ACCESS_KEY_ID" not in pods["probe"].env
    assert by_kind(objs, "PersistentVolumeClaim") == {}


def test_sasl_secret_key_names_are_configurable(helm: str, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = {"creds": {"user": "u2", "pass": "pw2"}}
    pods = _pods(helm, tmp_path, secrets, *BASE, "--set", "kafka.securityProtocol=SASL_PLAINTEXT",
                 "--set", "kafka.sasl.existingSecret=creds", "--set", "kafka.sasl.usernameKey=user",
                 "--set", "kafka.sasl.passwordKey=pass")
    probe = _probe_settings(pods["probe"])
    assert (probe.client_settings("producer")["sasl.username"],
            probe.client_settings("producer")["sasl.password"]) == ("u2", "pw2")
    monitor = _monitor_settings(pods["monitor"], monkeypatch)
    assert 'username="u2" password="pw2"' in monitor.kafka_options()["kafka.sasl.jaas.config"]


def test_legacy_tls_secret_still_gives_all_three_files(helm: str) -> None:
    objs = objects(helm, "-f", str(CHART / "ci" / "operator-sasl-ssl-values.yaml"))
    legacy = {"kafka-tls": TLS_FILES}
    for role, spec in _pod_specs(objs).items():
        assert _tls_mount(spec, legacy) == TLS_FILES, role


@pytest.mark.parametrize("mode", ["client", "operator"])
def test_s3a_without_a_secret_uses_the_default_credentials_chain(helm: str, mode: str) -> None:
    objs = objects(helm, *BASE, "--set", f"monitor.mode={mode}",
                   "--set", "monitor.checkpoint.location=s3a://b/kmon")
    settings = monitor_settings(objs)
    assert settings["spark.hadoop.fs.s3a.aws.credentials.provider"] == (
        "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider")  # IRSA's web identity
    assert "spark.hadoop.fs.s3a.endpoint" not in settings  # AWS itself
    for role, spec in _pod_specs(objs).items():
        assert not any(k.startswith("AWS_") for c in spec.get("containers", [spec])
                       for k in env_of(c)), role
    # a path, not s3a: no S3A settings at all
    assert not any("s3a" in k for k in monitor_settings(objects(helm, *BASE)))


def test_operator_executors_get_s3a_credentials_and_resources(helm: str) -> None:
    objs = objects(helm, *BASE, "--set", "monitor.mode=operator",
                   "--set", "monitor.checkpoint.location=s3a://b/kmon",
                   "--set", "monitor.checkpoint.s3a.credentials.existingSecret=s3",
                   "--set", "monitor.checkpoint.s3a.credentials.accessKeyKey=id",
                   "--set", "monitor.checkpoint.s3a.credentials.secretKeyKey=key",
                   "--set", "monitor.spark.executorRequestCores=500m",
                   "--set-string", "monitor.spark.executorLimitCores=2",
                   "--set", "monitor.spark.executorMemoryOverhead=1g",
                   "--set", "imagePullSecrets[0].name=regcred")
    app = by_kind(objs, "SparkApplication")["t-kmon-monitor"]["spec"]
    ex = app["executor"]
    assert (ex["coreRequest"], ex["coreLimit"], ex["memoryOverhead"]) == ("500m", "2", "1g")
    assert app["imagePullSecrets"] == ["regcred"]
    for role in ("driver", "executor"):
        assert env_of(app[role])["AWS_ACCESS_KEY_ID"] == {
            "secretKeyRef": {"name": "s3", "key": "id"}}, role
        assert env_of(app[role])["AWS_SECRET_ACCESS_KEY"] == {
            "secretKeyRef": {"name": "s3", "key": "key"}}, role


def test_executor_pod_template_has_pull_secrets_and_resources(helm: str) -> None:
    objs = objects(helm, "-f", str(STRIMZI_MTLS))
    template = _pod_specs(objs)["executor"]
    assert template["imagePullSecrets"] == [{"name": "regcred"}]
    assert template["containers"][0]["resources"] == {"limits": {"ephemeral-storage": "4Gi"}}
    conf = by_kind(objs, "ConfigMap")["t-kmon-spark"]["data"]["spark-defaults.conf"]
    for line in ("spark.kubernetes.executor.request.cores 500m",
                 "spark.kubernetes.executor.limit.cores 2", "spark.executor.memoryOverhead 1g"):
        assert line in conf.splitlines()
    assert "imagePullSecrets" not in _pod_specs(objects(helm, *BASE))["executor"]


def test_disruption_budgets_cover_the_probes_and_the_driver(helm: str) -> None:
    objs = objects(helm, *BASE, "--set", "probe.replicas=3",
                   "--set", "probe.podDisruptionBudget.maxUnavailable=1",
                   "--set", "monitor.podDisruptionBudget.minAvailable=1")
    pdbs = by_kind(objs, "PodDisruptionBudget")
    assert set(pdbs) == {"t-kmon-probe", "t-kmon-monitor"}
    assert pdbs["t-kmon-probe"]["spec"]["maxUnavailable"] == 1
    assert pdbs["t-kmon-monitor"]["spec"] == {
        "minAvailable": 1, "selector": pdbs["t-kmon-monitor"]["spec"]["selector"]}
    deployments = workloads(objs)
    for name, pdb in pdbs.items():
        labels = deployments[name]["spec"]["template"]["metadata"]["labels"]
        assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items(), name
    executor = _pod_specs(objs)["executor"]
    executor_labels = yaml.safe_load(by_kind(objs, "ConfigMap")["t-kmon-spark"]["data"][
        "executor-pod-template.yaml"])["metadata"]["labels"]
    assert executor and not pdbs["t-kmon-monitor"]["spec"]["selector"]["matchLabels"].items() <= (
        executor_labels.items())
    # operator mode: the SparkApplication's driver pod carries the same labels
    app = by_kind(objects(helm, *BASE, "--set", "monitor.mode=operator"), "SparkApplication")
    assert pdbs["t-kmon-monitor"]["spec"]["selector"]["matchLabels"].items() <= (
        app["t-kmon-monitor"]["spec"]["driver"]["labels"].items())
    off = objects(helm, *BASE, "--set", "probe.podDisruptionBudget.enabled=false",
                  "--set", "monitor.enabled=false")
    assert by_kind(off, "PodDisruptionBudget") == {}


def test_helm_test_hook_checks_the_cluster_with_the_probes_settings(helm: str) -> None:
    from kmon.cli import build_parser

    objs = objects(helm, *STRIMZI_SCRAM)
    hook = by_kind(objs, "Pod")["t-kmon-test-connection"]
    assert hook["metadata"]["annotations"]["helm.sh/hook"] == "test"
    spec, probe = hook["spec"], _pod_specs(objs)["probe"]
    assert spec["restartPolicy"] == "Never"
    # The probe's own settings file, environment and mounts (the loader tests above show what
    # the probe reads from them), plus --check, which the real parser takes.
    check, container = spec["containers"][0], probe["containers"][0]
    assert check["args"] == [*container["args"], "--check"]
    # all but the probe's name (its pod's, from the StatefulSet): --check creates no topic
    env = [e for e in container["env"] if e["name"] != "KMON_PROBE_NAME"]
    assert check["env"] == env and check["volumeMounts"] == container["volumeMounts"]
    assert spec["volumes"] == probe["volumes"]
    assert _tls_mount(spec, STRIMZI_SECRETS) == {"ca.crt": STRIMZI_SECRETS[STRIMZI_CA]["ca.crt"]}
    args = build_parser().parse_args(check["args"])
    assert (args.check, str(args.config)) == (True, "/etc/kmon/config/probe.yaml")


@pytest.mark.parametrize(("args", "message"), [
    (["--set", "monitor.checkpoint.s3a.endpoint=minio:9000"], "does not match pattern"),
    (["--set", "monitor.checkpoint.s3a.credentials.secretKey=x"],
     "additional properties 'secretKey' not allowed"),
    (["--set", "kafka.tls.certKey=user crt"], "does not match pattern"),
    (["--set", "monitor.spark.executorRequestCores=half"], "does not match pattern"),
    (["--set", "probe.podDisruptionBudget.maxUnavailable=-1"], "podDisruptionBudget"),
    (["--set", "monitor.checkpoint.persistence.accessModes={ReadWriteAlways}"],
     "value must be one of"),
])
def test_values_schema_rejects_bad_production_values(helm: str, args: list[str],
                                                     message: str) -> None:
    done = render(helm, *BASE, *args, check=False)
    assert done.returncode != 0 and message in done.stderr, done.stderr


# ---------------------------------------------------------------------------------------------
# Stable probe identity (issue 24): the name is the pod's, which a StatefulSet keeps


def test_probes_are_a_statefulset_named_after_their_pods(helm: str) -> None:
    objs = objects(helm, *BASE, "--set", "probe.replicas=3")
    assert "t-kmon-probe" not in by_kind(objs, "Deployment")
    sts = by_kind(objs, "StatefulSet")["t-kmon-probe"]["spec"]
    assert sts["replicas"] == 3 and sts["podManagementPolicy"] == "Parallel"
    assert sts["serviceName"] in by_kind(objs, "Service")
    env = env_of(sts["template"]["spec"]["containers"][0])
    # t-kmon-probe-0, -1, -2 across every restart and rollout: topics reused, never leaked
    assert env["KMON_PROBE_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_a_stopping_probe_pod_has_time_for_its_whole_shutdown(helm: str) -> None:
    """Kubernetes kills a pod 30 s after SIGTERM unless told; the probe's shutdown, every
    bound waited out (the cluster gone), takes longer, and its last op events would be lost."""
    from kmon.probes import config as probe_config
    from kmon.probes.workload import shutdown_bound

    defaults = probe_config.load(env={}, overrides={"kafka.bootstrap.servers": "k:9092"})
    spec = by_kind(objects(helm, *BASE), "StatefulSet")["t-kmon-probe"]["spec"]["template"][
        "spec"]
    assert spec["terminationGracePeriodSeconds"] >= shutdown_bound(defaults) > 30
    custom = objects(helm, *BASE, "--set", "probe.terminationGracePeriodSeconds=400")
    assert by_kind(custom, "StatefulSet")["t-kmon-probe"]["spec"]["template"]["spec"][
        "terminationGracePeriodSeconds"] == 400


def test_an_explicit_probe_name_overrides_the_pod_name(helm: str) -> None:
    objs = objects(helm, *BASE, "--set", "probe.extraEnv[0].name=KMON_PROBE_NAME",
                   "--set", "probe.extraEnv[0].value=eu-canary")
    container = by_kind(objs, "StatefulSet")["t-kmon-probe"]["spec"]["template"]["spec"][
        "containers"][0]
    # Kubernetes takes the last of duplicate names, as env_of does
    assert env_of(container)["KMON_PROBE_NAME"] == "eu-canary"
