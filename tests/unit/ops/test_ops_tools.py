"""The set-up of the operations tools: cached steps stay offline, schema conversions are right."""

from __future__ import annotations

from pathlib import Path

import pytest

from kmon.dashboards import tools
from tests.helpers import missing_tool


def test_warm_install_builds_and_downloads_nothing(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tools.bin_dir(tmp_path)
    bin_dir.mkdir(parents=True)
    for name, (_, version) in tools.GO_TOOLS.items():
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / f".{name}.version").write_text(version + "\n")
    crds = tools.schema_dir(tmp_path)
    crds.mkdir(parents=True)
    (crds / ".version").write_text(tools.PROMETHEUS_OPERATOR[1] + "\n")
    k8s = tools.k8s_schema_dir(tmp_path)
    if k8s is None:
        missing_tool("kubernetes-validate", "a test extra: `make setup` (pip install -e '.[test]')")
    k8s.mkdir(parents=True)
    (k8s / tools.COMPLETE).write_text("x\n")
    monkeypatch.setattr(tools.subprocess, "run", _forbidden)
    log: list[str] = []
    tools.install(tmp_path, log=log.append, apt=False)
    assert all("cached" in line for line in log) and len(log) == 4


def _forbidden(*args: object, **kwargs: object) -> None:
    raise AssertionError(f"a warm install ran {args}")


def test_a_stale_tool_version_is_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tools.bin_dir(tmp_path)
    bin_dir.mkdir(parents=True)
    (bin_dir / "helm").write_text("old")
    (bin_dir / ".helm.version").write_text("v0.0.1\n")
    calls: list[list[str]] = []

    def fake_run(cmd: list[str], env: dict[str, str], check: bool) -> None:
        calls.append(cmd)
        Path(env["GOBIN"], "helm").write_text("new")

    monkeypatch.setattr(tools.subprocess, "run", fake_run)
    monkeypatch.setattr(tools.shutil, "which", lambda name: "/usr/bin/go")
    package, version = tools.GO_TOOLS["helm"]
    tools._go_install("helm", package, version, tmp_path, lambda _: None)
    assert calls == [["/usr/bin/go", "install", f"{package}@{version}"]]
    assert (bin_dir / "helm").read_text() == "new"
    assert (bin_dir / ".helm.version").read_text().strip() == version


def test_strict_denies_unknown_fields_but_not_where_the_crd_keeps_them() -> None:
    schema = {"type": "object", "properties": {
        "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
        "spec": {"type": "object", "properties": {
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "raw": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                    "properties": {"a": {"type": "string"}}},
            "items": {"type": "array", "items": {"type": "object",
                                                 "properties": {"b": {"type": "integer"}}}},
        }},
    }}
    out = tools.strict(schema)
    assert out["additionalProperties"] is False
    assert "additionalProperties" not in out["properties"]["metadata"]
    spec = out["properties"]["spec"]
    assert spec["additionalProperties"] is False
    assert spec["properties"]["labels"]["additionalProperties"] == {"type": "string"}
    assert "additionalProperties" not in spec["properties"]["raw"]
    assert spec["properties"]["items"]["items"]["additionalProperties"] is False


def test_standalone_carries_only_the_definitions_it_reaches() -> None:
    ref = "/api/_definitions.json#/$defs/"
    defs = {
        "Meta": {"type": "object", "properties": {"owner": {"$ref": ref + "Owner"}}},
        "Owner": {"type": "object", "properties": {"self": {"$ref": ref + "Owner"}}},
        "Unrelated": {"type": "string"},
    }
    kind = {"$id": "https://kubernetes.io/api/x", "x-kubernetes-group-version-kind": [{}],
            "properties": {"metadata": {"$ref": ref + "Meta"}}}
    out = tools.standalone(kind, defs)
    assert "$id" not in out
    assert out["properties"]["metadata"]["$ref"] == "#/$defs/Meta"
    assert set(out["$defs"]) == {"Meta", "Owner"}  # recursion terminates, Unrelated left out
    assert out["$defs"]["Owner"]["properties"]["self"]["$ref"] == "#/$defs/Owner"
