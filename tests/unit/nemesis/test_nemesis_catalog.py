"""Presets, matrix scenarios and the port layout the nemesis adds: consistent with librdkafka,
the probe's settings, the checker's anomaly names and the rest of the stack's ports.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from kmon.checker import ANOMALY_TYPES
from kmon.checker.anomaly import UNSEEN
from kmon.env import PORT_SPAN, SettingError
from kmon.local.cluster import LocalCluster
from kmon.local.kafka_config import broker_properties
from kmon.local.ports import BROKER_IDS, METRICS_SLOTS, Ports
from kmon.local.toxiproxy import LocalToxiproxy
from kmon.nemesis import presets, scenarios
from kmon.nemesis.network import KINDS
from kmon.probes import config as probe_config


@pytest.mark.parametrize("name", list(presets.PRESETS))
def test_librdkafka_accepts_every_preset(name: str) -> None:
    presets.check_librdkafka(presets.get(name))


def test_a_bad_client_setting_is_named() -> None:
    bad = dataclasses.replace(
        presets.get("read-uncommitted"),
        settings={"consumer.isolation.level": "dirty"},
    )
    with pytest.raises(SettingError, match=r"read-uncommitted: consumer\.isolation\.level=dirty"):
        presets.check_librdkafka(bad)


def test_presets_render_for_the_probe(tmp_path: Path) -> None:
    cluster = LocalCluster(home=tmp_path, port_base=40000)
    args = presets.render(presets.get("idempotence-off"), cluster)
    assert "--set producer.enable.idempotence=false" in args
    assert "--set kafka.bootstrap.servers=127.0.0.1:40006,127.0.0.1:40007,127.0.0.1:40008" in args
    doc = yaml.safe_load(presets.render(presets.get("unclean"), None, "yaml"))
    assert doc == {"producer.acks": "1", "producer.enable.idempotence": "false",
                   "replication_factor": "2", "min_insync_replicas": "1", "txn_share": "0"}
    assert presets.render(presets.get("safe"), cluster) == ""


def test_presets_reach_the_probe_as_given() -> None:
    """Every setting a preset names lands in the probe's loaded config with the preset's value:
    a client setting in its client section, a probe setting among the probe's values
    (test_matrix only checks that presets pass the probe's validation)."""
    for preset in presets.PRESETS.values():
        cfg = probe_config.load(env={}, overrides={
            "kafka.bootstrap.servers": "127.0.0.1:1", **preset.probe_settings()})
        for name, value in preset.settings.items():
            section, _, rest = name.partition(".")
            got = cfg.clients[section][rest] if section in cfg.clients else cfg.values[name]
            assert got == _typed(value, got), (preset.name, name, got, value)


def _typed(value: str, like: object) -> object:
    """A preset's string value as the type the probe's config gave it."""
    if isinstance(like, bool):
        return {"true": True, "false": False}[value.lower()]
    return type(like)(value) if isinstance(like, int | float) else value


def test_scenarios_name_real_anomalies_and_presets() -> None:
    known = {*ANOMALY_TYPES, UNSEEN}
    names = [s.name for s in scenarios.SCENARIOS]
    assert len(names) == len(set(names)) and names[0] == "healthy"
    for s in scenarios.SCENARIOS:
        assert s.preset in presets.PRESETS, s.name
        assert {*s.must, *s.any_of, *s.allowed} <= known, s.name
        assert s.origin in ("real", "proxy", "injected"), s.name
    healthy = scenarios.BY_NAME["healthy"]
    assert not healthy.must and not healthy.any_of and healthy.make_fault is None


def test_the_nemesis_ports_fit_the_layout() -> None:
    ports = Ports(20000)
    kafka, proxy = ports.kafka_ports(), ports.toxiproxy_ports()
    every = [*kafka.values(), *proxy.values(), *ports.kafka_proxy_ports().values(),
             ports.kafka_proxy + 4, ports.prometheus, ports.alertmanager,
             *(ports.metrics(s) for s in range(METRICS_SLOTS)),
             *ports.spark_ports().values()]
    assert len(every) == len(set(every))
    assert all(20000 <= p < 20000 + PORT_SPAN // 2 for p in every)
    assert [ports.proxied_listener(n) for n in BROKER_IDS] == [20003, 20004, 20005]
    assert [ports.proxy(n) for n in BROKER_IDS] == [20006, 20007, 20008]
    assert ports.toxiproxy_api == 20009
    assert ports.proxied_bootstrap == "127.0.0.1:20006,127.0.0.1:20007,127.0.0.1:20008"


def test_the_proxied_listener_advertises_the_proxy(tmp_path: Path) -> None:
    props = broker_properties(2, Ports(30000), tmp_path, {}, proxied_listener=True)
    assert props["listeners"] == (
        "PLAINTEXT://127.0.0.1:30001,CONTROLLER://127.0.0.1:30011,PROXIED://127.0.0.1:30004"
    )
    assert props["advertised.listeners"] == (
        "PLAINTEXT://127.0.0.1:30001,PROXIED://127.0.0.1:30007"
    )
    assert props["inter.broker.listener.name"] == "PLAINTEXT"  # replication never proxied
    assert "PROXIED:PLAINTEXT" in props["listener.security.protocol.map"]
    assert "PROXIED" not in broker_properties(2, Ports(30000), tmp_path, {})["listeners"]


def test_toxiproxy_proxies_point_at_the_proxied_listeners(tmp_path: Path) -> None:
    config = LocalToxiproxy(home=tmp_path, port_base=30000).proxies_config()
    assert [(p["name"], p["listen"], p["upstream"]) for p in config] == [
        (f"broker-{n}", f"127.0.0.1:{30005 + n}", f"127.0.0.1:{30002 + n}") for n in BROKER_IDS
    ]


def test_every_network_kind_has_a_cli_option() -> None:
    from kmon.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["nemesis", "net", "slicer", "--average-size", "10",
                              "--delay-us", "5", "--node", "1", "--node", "3"])
    assert (args.kind, args.average_size, args.delay_us, args.node) == ("slicer", 10, 5, [1, 3])
    for kind in KINDS:
        parser.parse_args(["nemesis", "net", kind])
