"""The Helm chart rendered, and its containers as they would run: shared by the chart's unit
tests (tests/unit/ops/test_ops_chart.py) and the live SASL_SSL test
(tests/integration/test_sasl_ssl.py), which runs the rendered programs against a real broker.

Release ``t`` in namespace ``obs``; a ``Pod`` writes a container's mounts (ConfigMaps, Secrets,
projections of them, as its volumeMounts and the pod's volumes say) under a directory standing
for its file system and resolves its environment the way Kubernetes would.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from kmon.dashboards import tools
from tests.helpers import missing_tool

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "helm" / "kmon"
KUBE_VERSION = "1.34.0"  # helm built by `go install` defaults to v1.20, below kubeVersion

# Stand-ins for the files of a Secret the test does not give (the TLS Secret, where only their
# paths and contents matter).
TLS_FILES = {"ca.crt": "CA\n", "tls.crt": "-----BEGIN CERTIFICATE-----\nC\n",
             "tls.key": "-----BEGIN PRIVATE KEY-----\nK\n"}


def tool(name: str) -> str:
    """A tool `make setup` installs (helm, kubeconform, hadolint); its absence fails the test."""
    path = tools.find(name)
    if path is None:
        missing_tool(name, "run `make setup` (kmon dashboards install-tools "
                     "go-installs it into $KMON_CACHE/bin)")
    return path


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


class Pod:
    """A rendered container as it runs: mounts under ``root``, env as Kubernetes resolves it.

    ``secrets``: the contents of Secrets the chart does not create, by name and key (the chart's
    own come from the rendering); any other Secret holds ``TLS_FILES``. ``volumes``: the pod's
    (a SparkApplication lists them beside its driver).
    """

    def __init__(self, root: Path, objs: list[dict[str, Any]], container: dict[str, Any],
                 secrets: dict[str, dict[str, str]],
                 volumes: list[dict[str, Any]] | None = None) -> None:
        self.root = root
        secrets = {**secrets, **{n: s["stringData"] for n, s in by_kind(objs, "Secret").items()}}
        sources = _Sources(by_kind(objs, "ConfigMap"), secrets)
        by_name = {v["name"]: v for v in volumes or []}
        for mount in container.get("volumeMounts", []):
            for name, text in sources.files(by_name[mount["name"]]).items():
                self._write(f"{mount['mountPath']}/{name}", text)
        self.env = {e["name"]: self.path(self._value(e, secrets))
                    for e in container.get("env", [])}
        self.args = [self.path(a) for a in container.get("args", container.get("arguments"))]

    @staticmethod
    def _value(var: dict[str, Any], secrets: dict[str, dict[str, str]]) -> str:
        if "value" in var:
            return var["value"]
        if ref := var["valueFrom"].get("secretKeyRef"):
            return secrets[ref["name"]][ref["key"]]
        return "t-kmon-monitor-0"  # a fieldRef: the pod's name

    def path(self, text: str) -> str:
        """A container path as the test's file system has it."""
        return text.replace("/etc/kmon/", f"{self.root}/etc/kmon/")

    def _write(self, container_path: str, text: str) -> None:
        assert container_path.startswith("/etc/kmon/"), container_path  # what path() maps
        f = Path(self.path(container_path))
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(self.path(text))


class _Sources:
    """The files a volume shows: a ConfigMap's data or a Secret's, whole or by ``items``."""

    def __init__(self, config_maps: dict[str, dict[str, Any]],
                 secrets: dict[str, dict[str, str]]) -> None:
        self.config_maps = config_maps
        self.secrets = secrets

    def files(self, volume: dict[str, Any]) -> dict[str, str]:
        """File name -> text of a volume (nothing for emptyDir, claims and the like)."""
        if "projected" in volume:
            out: dict[str, str] = {}
            for source in volume["projected"]["sources"]:
                out.update(self.files(source))
            return out
        if "configMap" in volume:
            ref = volume["configMap"]
            return _select(self.config_maps[ref["name"]].get("data", {}), ref)
        if "secret" in volume:
            ref = volume["secret"]
            name = ref.get("secretName", ref.get("name"))
            return _select(self.secrets.get(name, TLS_FILES), ref)
        return {}


def _select(data: Mapping[str, str], ref: dict[str, Any]) -> dict[str, str]:
    if "items" not in ref:
        return dict(data)
    return {item["path"]: data[item["key"]] for item in ref["items"] if item["key"] in data}


def pods(helm: str, root: Path, secrets: dict[str, dict[str, str]], *args: str
         ) -> dict[str, Pod]:
    """The probe and monitor containers of a rendering, by name, as ``Pod``s under ``root``."""
    objs = objects(helm, *args)
    found = {n.removeprefix("t-kmon-"): (d["spec"]["template"]["spec"]["containers"][0],
                                        d["spec"]["template"]["spec"].get("volumes"))
             for n, d in {**by_kind(objs, "Deployment"),
                          **by_kind(objs, "StatefulSet")}.items()}
    for app in by_kind(objs, "SparkApplication").values():
        found["monitor"] = ({**app["spec"]["driver"], "arguments": app["spec"]["arguments"]},
                            app["spec"].get("volumes"))
    return {name: Pod(root / name, objs, c, secrets, volumes)
            for name, (c, volumes) in found.items()}
