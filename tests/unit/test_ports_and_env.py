"""The port layout and the environment variables behind it."""

from __future__ import annotations

import pytest

from kmon import env
from kmon.env import PORT_SPAN, SettingError
from kmon.local.ports import BROKER_IDS, METRICS_SLOTS, Ports


def _all_ports(base: int) -> list[int]:
    ports = Ports(base)
    return [
        *ports.kafka_ports().values(), ports.prometheus,
        *(ports.metrics(s) for s in range(METRICS_SLOTS)), *ports.spark_ports().values(),
        *(ports.extra_broker(n) for n in range(4, 8)), ports.tansu, ports.tansu_direct,
        ports.alertmanager,
        *ports.toxiproxy_ports().values(), *ports.kafka_proxy_ports().values(),
    ]


def test_ports_of_one_stack_are_distinct_and_inside_its_half_span() -> None:
    ports = _all_ports(20000)
    assert len(set(ports)) == len(ports)
    assert all(20000 <= p < 20000 + PORT_SPAN // 2 for p in ports)


def test_the_suites_stack_does_not_overlap_the_run_stack() -> None:
    assert not set(_all_ports(20000)) & set(_all_ports(20000 + PORT_SPAN // 2))


def test_bootstrap_lists_every_broker() -> None:
    assert Ports(19092).bootstrap == "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"
    assert len(BROKER_IDS) == 3


def test_port_base_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KMON_PORT_BASE", raising=False)
    assert env.port_base() == env.DEFAULT_PORT_BASE
    monkeypatch.setenv("KMON_PORT_BASE", "29092")
    assert env.port_base() == 29092
    assert env.port_base(31000) == 31000  # a flag beats the environment
    monkeypatch.setenv("KMON_PORT_BASE", "lots")
    with pytest.raises(SettingError, match="KMON_PORT_BASE"):
        env.port_base()
    with pytest.raises(SettingError, match="out of range"):
        env.port_base(80)


def test_home_and_cache_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    monkeypatch.setenv("KMON_HOME", "/tmp/kmon-x")
    monkeypatch.setenv("KMON_CACHE", "/tmp/kmon-c")
    assert str(env.kmon_home()) == "/tmp/kmon-x"
    assert str(env.kmon_cache()) == "/tmp/kmon-c"
    monkeypatch.delenv("KMON_HOME")
    root = env.repo_root()
    assert root is not None and env.kmon_home() == root / "var"
