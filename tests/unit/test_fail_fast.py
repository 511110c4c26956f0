"""A bad setting stops `kmon cluster up` before any JVM starts, with a message naming it."""

from __future__ import annotations

import random
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from kmon.cli import main
from kmon.env import SettingError
from kmon.local import procs
from kmon.local.cluster import LocalCluster
from kmon.local.ports import Ports
from tests.helpers import leave_time_wait

# Bases below Linux's ephemeral range (32768-60999 by default), where the suite's servers on
# port 0 and its clients leave closed connections in TIME_WAIT: one made the squatter's bind
# fail in a fresh-clone run (2026-11-28), before the squatter set SO_REUSEADDR as servers do.
BASES = range(20000, 32000, 100)


@pytest.fixture
def free_base() -> int:
    """A port base whose Kafka and Prometheus ports are all free right now."""
    for _ in range(100):
        base = random.choice(BASES)
        ports = Ports(base)
        if not any(procs.port_in_use(p) for p in [*ports.kafka_ports().values(), ports.prometheus]):
            return base
    raise AssertionError("no free port base found")


@pytest.fixture
def no_processes_started(tmp_path: Path) -> Iterator[Path]:
    """A fresh home; afterwards, no broker may have been started in it."""
    yield tmp_path
    assert not list(tmp_path.glob("kafka/broker-*/pid"))
    assert not list(tmp_path.glob("kafka/broker-*/server.log"))


def test_unknown_override(no_processes_started: Path, free_base: int) -> None:
    cluster = LocalCluster(
        home=no_processes_started, port_base=free_base, overrides={"no.such.setting": "1"}
    )
    with pytest.raises(SettingError, match=r"unknown Kafka broker setting 'no\.such\.setting'"):
        cluster.up()


def test_port_in_use(no_processes_started: Path, free_base: int) -> None:
    taken = Ports(free_base).controller(2)
    leave_time_wait(taken)  # as an earlier server may have: no reason to think it in use
    with socket.socket() as squatter:
        # As a server binds: a connection lingering in TIME_WAIT does not stop it listening.
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        cluster = LocalCluster(home=no_processes_started, port_base=free_base)
        with pytest.raises(SettingError, match=rf"port {taken} \(controller 2 listener\)"):
            cluster.up()


def test_missing_java(
    no_processes_started: Path, free_base: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KMON_JAVA", raising=False)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(no_processes_started))  # a PATH without java
    cluster = LocalCluster(home=no_processes_started, port_base=free_base)
    with pytest.raises(SettingError, match="Java not found"):
        cluster.up()


def test_kafka_not_set_up(no_processes_started: Path, free_base: int) -> None:
    cluster = LocalCluster(
        home=no_processes_started, port_base=free_base, cache=no_processes_started / "empty"
    )
    with pytest.raises(SettingError, match=r"not in the cache .* run `kmon setup`"):
        cluster.up()


def test_start_before_up(no_processes_started: Path, free_base: int) -> None:
    cluster = LocalCluster(home=no_processes_started, port_base=free_base)
    with pytest.raises(SettingError, match="run `kmon cluster up`"):
        cluster.start(1)


def test_cli_reports_a_bad_setting_as_a_usage_error(
    no_processes_started: Path, free_base: int, capsys: pytest.CaptureFixture[str]
) -> None:
    where = ["--home", str(no_processes_started), "--port-base", str(free_base)]
    assert main(["cluster", "up", *where, "--set", "min.insync.replica=2"]) == 2
    err = capsys.readouterr().err
    assert "kmon: error: unknown Kafka broker setting 'min.insync.replica'" in err
    assert main(["cluster", "up", *where, "--set", "min.insync.replicas"]) == 2
    assert "is not key=value" in capsys.readouterr().err
    assert main(["cluster", "pause", "4", *where]) == 2
    assert "no broker 4" in capsys.readouterr().err
