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

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "helm" / "kmon"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
SPARK_SCHEMA = Path(__file__).parent / "schemas"
KUBE_VERSION = "1.34.0"  # helm built by `go install` defaults to v1.20, below kubeVersion
BASE = ["--set", "kafka.bootstrapServers=kafka:9092"]
CRD_TEMPLATE = "{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json"


def _tool(name: str) -> str:
    path = tools.find(name)
    if path is None:
        pytest.skip(f"{name} not installed: run `make setup` (kmon dashboards install-tools "
                    "go-installs it into $KMON_CACHE/bin)")
    return path


@pytest.fixture(scope="module")
def helm() -> str:
    return _tool("helm")


@pytest.fixture(scope="module")
def kubeconform() -> list[str]:
    binary = _tool("kubeconform")
    k8s = tools.k8s_schema_location()
    if k8s is None:
        pytest.skip("Kubernetes schemas missing: run `make setup` (kmon dashboards install-tools)")
    return [binary, "-strict", "-summary", "-schema-location", k8s,
            "-schema-location", tools.crd_schema_location(),
            "-schema-location", f"{SPARK_SCHEMA}/{CRD_TEMPLATE}"]


def render(helm: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [helm, "template", "t", str(CHART), "--namespace", "obs", "--kube-version", KUBE_VERSION,
         *args], capture_output=True, text=True)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def objects(helm: str, *args: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(render(helm, *args).stdout) if d]


def by_kind(objs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


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
        if o["kind"] == "Deployment":
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
    deployments = by_kind(objects(helm, *BASE), "Deployment")
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
    env = env_of(pod["containers"][0])
    assert env["KMON_SPARK_MASTER"] == "k8s://https://kubernetes.default.svc:443"
    assert env["KMON_CHECKPOINT"] == "/var/lib/kmon/checkpoint"
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
    assert {v["name"] for v in template["spec"]["volumes"]} >= {"checkpoint", "kafka-config"}


def test_local_master_needs_no_api_access(helm: str) -> None:
    objs = objects(helm, "-f", str(CHART / "ci" / "local-master-values.yaml"))
    pod = by_kind(objs, "Deployment")["t-kmon-monitor"]["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == "kmon"
    assert env_of(pod["containers"][0])["KMON_SPARK_MASTER"] == "local[2]"
    assert env_of(pod["containers"][0])["KMON_CHECKPOINT"] == "s3a://kmon-checkpoints/prod"
    assert by_kind(objs, "Role") == {} and by_kind(objs, "PersistentVolumeClaim") == {}
    assert "t-kmon-driver" not in by_kind(objs, "Service")
    assert "t-kmon-probe" not in by_kind(objs, "Deployment")
    assert "executor-pod-template.yaml" not in by_kind(objs, "ConfigMap")["t-kmon-spark"]["data"]


def test_operator_mode_renders_a_spark_application_the_service_selects(helm: str) -> None:
    objs = objects(helm, *BASE, "--set", "monitor.mode=operator")
    assert "t-kmon-monitor" not in by_kind(objs, "Deployment")
    app = by_kind(objs, "SparkApplication")["t-kmon-monitor"]["spec"]
    assert app["type"] == "Python" and app["mode"] == "cluster"
    assert app["mainApplicationFile"] == "local:///opt/kmon/kmon_main.py"
    assert app["arguments"] == ["monitor"]
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
    props = by_kind(objs, "ConfigMap")["t-kmon-kafka"]["data"]["client.properties"]
    assert props.splitlines() == [
        "security.protocol=SASL_SSL",
        "sasl.mechanism=SCRAM-SHA-256",
        "ssl.ca.location=/etc/kmon/kafka-tls/ca.crt",
        "ssl.endpoint.identification.algorithm=https",
        "ssl.certificate.location=/etc/kmon/kafka-tls/tls.crt",
        "ssl.key.location=/etc/kmon/kafka-tls/tls.key",
        "client.rack=eu-west-1a",
    ]
    assert "s3cret" not in props
    probe = by_kind(objs, "Deployment")["t-kmon-probe"]["spec"]["template"]["spec"]
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
    ([], "kafka.bootstrapServers is required"),
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
        .replace(rules.RUNBOOK_URL, url))["groups"]
    assert groups == expected
    alerts = {r["alert"] for g in groups for r in g["rules"] if "alert" in r}
    assert ("KmonAnomaly-G1a" in alerts) == (isolation == "read_committed")
    assert all(r["annotations"]["runbook_url"].startswith(url + "#")
               for g in groups for r in g["rules"] if "alert" in r)


def test_service_monitor_gives_the_jobs_the_alerts_select(helm: str) -> None:
    objs = objects(helm, *BASE, "--set", "serviceMonitor.enabled=true")
    sm = by_kind(objs, "ServiceMonitor")["t-kmon"]["spec"]
    assert sm["jobLabel"] == "kmon.io/job"
    jobs = {s["metadata"]["labels"].get("kmon.io/job") for s in by_kind(objs, "Service").values()}
    assert {rules.MONITOR_JOB, rules.PROBE_JOB} <= jobs
    for name, svc in by_kind(objs, "Service").items():
        if "kmon.io/job" in svc["metadata"]["labels"]:
            labels = svc["metadata"]["labels"]
            assert sm["selector"]["matchLabels"].items() <= labels.items(), name
            assert [p["name"] for p in svc["spec"]["ports"]] == ["metrics"]


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


def test_dockerfile_entrypoint_is_valid_bash() -> None:
    assert subprocess.run(["bash", "-n", str(ROOT / "docker" / "entrypoint.sh")]).returncode == 0
