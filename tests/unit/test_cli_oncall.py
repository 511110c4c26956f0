"""What on-call meets at the command line: `kmon --version`, the probe's cluster setting, a
metrics port already taken, and where a bare `kmon probe` / `kmon monitor` points."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

import kmon
from kmon.cli import main
from kmon.local.ports import Ports

BASE = 23092  # the suite's own base; nothing listens: these tests never reach a cluster


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in [v for v in os.environ if v.startswith("KMON_PROBE_")]:
        monkeypatch.delenv(var)
    monkeypatch.delenv("KMON_MONITOR_CONFIG", raising=False)
    monkeypatch.setenv("KMON_PORT_BASE", str(BASE))


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port something listens on, on every address."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"kmon {kmon.__version__}\n"
    assert kmon.__version__ == metadata.version("kmon")


# -- the probe's cluster setting ---------------------------------------------------------------


def _probe_cfg(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> Any:
    """The config `kmon probe argv` would run with (the workload itself is not started)."""
    seen: list[Any] = []
    monkeypatch.setattr("kmon.cli.probe._run", lambda cfg: seen.append(cfg) or 0)
    assert main(["probe", *argv]) == 0
    return seen[0]


def test_cluster_defaults_to_local(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _probe_cfg(monkeypatch, ["-b", "h:1"]).cluster == "local"


def test_cluster_from_env_file_and_set(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KMON_PROBE_CLUSTER", "from-env")
    assert _probe_cfg(monkeypatch, ["-b", "h:1"]).cluster == "from-env"
    (tmp_path / "p.yaml").write_text("cluster: prod.eu-1\n")
    monkeypatch.delenv("KMON_PROBE_CLUSTER")
    assert _probe_cfg(monkeypatch, ["--config", str(tmp_path / "p.yaml")]).cluster == "prod.eu-1"
    assert _probe_cfg(monkeypatch, ["--set", "cluster=c_2"]).cluster == "c_2"


@pytest.mark.parametrize("bad", ["", "-lead", "a/b", "a b", "x" * 64, "é"])
def test_a_bad_cluster_is_a_usage_error(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "-b", "h:1", "--set", f"cluster={bad}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kmon: error: cluster: use 1-63 letters, digits"), err


def test_a_63_character_cluster_is_fine(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _probe_cfg(monkeypatch, ["--set", "cluster=" + "x" * 63]).cluster == "x" * 63


# -- a metrics port in use -----------------------------------------------------------------------


def test_probe_metrics_port_in_use_fails_fast(
        taken_port: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    history = tmp_path / "h.jsonl"
    argv = ["probe", "-b", "127.0.0.1:1", "--metrics-port", str(taken_port),
            "--history", str(history)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kmon: error: metrics.port {taken_port} is in use"), err
    assert "Traceback" not in err
    assert not history.exists()  # before anything else: no history file truncated


@pytest.fixture
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError("Spark started although the metrics port is taken")

    monkeypatch.setattr("kmon.streaming.session.build_spark_session", refuse)


@pytest.mark.usefixtures("no_spark")
def test_monitor_metrics_port_in_use_fails_before_spark(
        taken_port: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["monitor", "-b", "127.0.0.1:1", "--checkpoint", str(tmp_path / "ck"),
            "--metrics-port", str(taken_port)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kmon: error: metrics.port {taken_port} is in use"), err


@pytest.mark.usefixtures("no_spark")
def test_monitor_under_spark_submit_reports_the_port_too(
        taken_port: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kmon.streaming.main import main as monitor_main

    argv = ["-b", "127.0.0.1:1", "--checkpoint", str(tmp_path / "ck"),
            "--metrics-port", str(taken_port)]
    assert monitor_main(argv) == 2
    assert f"metrics.port {taken_port} is in use" in capsys.readouterr().err


# -- a bare command: the local cluster, for both -------------------------------------------------


def _monitor_cfg(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> Any:
    seen: list[Any] = []
    monkeypatch.setattr("kmon.streaming.main.run", lambda cfg: seen.append(cfg) or 0)
    assert main(["monitor", *argv]) == 0
    return seen[0]


def test_bare_probe_and_monitor_both_use_the_local_cluster(
        monkeypatch: pytest.MonkeyPatch) -> None:
    local = Ports(BASE).bootstrap
    assert _probe_cfg(monkeypatch, []).bootstrap == local
    assert _monitor_cfg(monkeypatch, []).bootstrap_servers == local


def test_a_given_bootstrap_wins_over_the_local_cluster(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert _probe_cfg(monkeypatch, ["-b", "flag:1"]).bootstrap == "flag:1"
    assert _monitor_cfg(monkeypatch, ["-b", "flag:1"]).bootstrap_servers == "flag:1"
    (tmp_path / "p.yaml").write_text("kafka:\n  bootstrap.servers: file:1\n")
    assert _probe_cfg(monkeypatch, ["--config", str(tmp_path / "p.yaml")]).bootstrap == "file:1"
    monkeypatch.setenv("KMON_PROBE_KAFKA_BOOTSTRAP_SERVERS", "env:1")
    assert _probe_cfg(monkeypatch, []).bootstrap == "env:1"


@pytest.mark.parametrize("command", ["probe", "monitor"])
def test_help_says_a_bare_command_uses_the_local_cluster(
        command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "default: the local stack's cluster" in help_text


def test_the_helm_chart_style_load_still_requires_a_bootstrap() -> None:
    """Only the command line falls back to the local cluster; the library does not guess."""
    from kmon.probes import config as probe_config

    with pytest.raises(probe_config.ConfigError, match=r"kafka\.bootstrap\.servers"):
        probe_config.load(env={})


