"""Probe settings: defaults < file < environment < flags; every error names its setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from kmon.probes import clients
from kmon.probes.config import SETTINGS, ConfigError, load

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:1"}


def test_defaults_are_safe_and_valid() -> None:
    cfg = load(env={}, overrides={**BOOT, "name": "p1"})
    assert cfg.rate == 50.0
    assert cfg.processes == 4
    assert cfg.topic_prefix == "kmon-probe-p1"
    assert cfg.probe_id.startswith("p1.")
    assert cfg.metrics_port == 9465
    prod = clients.producer_config(cfg, "id")
    assert prod["acks"] == "all" and prod["enable.idempotence"] is True
    cons = clients.consumer_config(cfg, "id", "g")
    assert cons["isolation.level"] == "read_committed"
    assert cons["auto.offset.reset"] == "earliest"
    assert cons["enable.auto.commit"] is False
    assert cfg.start_positions == "probe"  # the librdkafka 2.16 workaround is on


def test_every_setting_has_help_and_env_name() -> None:
    for s in SETTINGS:
        assert s.help and s.env.startswith("KMON_PROBE_")


def test_precedence_file_env_flags(tmp_path: Path) -> None:
    f = tmp_path / "probe.yaml"
    f.write_text("rate: 10\nprocesses: 3\ntxn_share: 0.1\n"
                 "kafka:\n  bootstrap.servers: file:9092\n")
    cfg = load(f, env={"KMON_PROBE_RATE": "20", "KMON_PROBE_PROCESSES": "5"},
               overrides={"processes": "7"})
    assert (cfg.rate, cfg.processes, cfg.txn_share) == (20.0, 7, 0.1)
    assert cfg.bootstrap == "file:9092"


def test_nested_and_dotted_file_keys(tmp_path: Path) -> None:
    f = tmp_path / "probe.yaml"
    f.write_text("events:\n  topic: ev\n  buffer: 5\nmetrics.port: 0\n"
                 "kafka: {bootstrap.servers: 'h:1', sasl: {mechanism: PLAIN}}\n")
    cfg = load(f, env={})
    assert (cfg.events_topic, cfg.events_buffer, cfg.metrics_port) == ("ev", 5, 0)
    assert cfg.clients["kafka"] == {"bootstrap.servers": "h:1", "sasl.mechanism": "PLAIN"}


def test_client_settings_pass_through_from_env_per_section() -> None:
    cfg = load(env={
        "KMON_PROBE_KAFKA_BOOTSTRAP_SERVERS": "a:1",
        "KMON_PROBE_KAFKA_SASL_MECHANISM": "PLAIN",
        "KMON_PROBE_CONSUMER_ISOLATION_LEVEL": "read_uncommitted",
        "KMON_PROBE_EVENTS_KAFKA_BOOTSTRAP_SERVERS": "b:1",
        "KMON_PROBE_EVENTS_PRODUCER_LINGER_MS": "5",
        "KMON_PROBE_EVENTS_TOPIC": "ev",
    })
    assert cfg.client_settings("consumer") == {
        "bootstrap.servers": "a:1", "sasl.mechanism": "PLAIN",
        "isolation.level": "read_uncommitted"}
    # The events cluster differs: it does not inherit the probed cluster's settings.
    assert cfg.client_settings("events") == {"bootstrap.servers": "b:1", "linger.ms": "5"}
    assert cfg.events_topic == "ev"
    # A user override beats the safe default (users may probe the settings they run).
    assert clients.consumer_config(cfg, "id", "g")["isolation.level"] == "read_uncommitted"


def test_events_default_to_the_probed_cluster() -> None:
    cfg = load(env={}, overrides={**BOOT, "kafka.security.protocol": "SSL"})
    assert cfg.client_settings("events") == {"bootstrap.servers": "127.0.0.1:1",
                                             "security.protocol": "SSL"}


@pytest.mark.parametrize(("overrides", "setting", "message"), [
    ({"rate": "fast"}, "rate", "expected a number"),
    ({"rate": "0"}, "rate", "at least"),
    ({"processes": "0"}, "processes", "between"),
    ({"processes": "2.5"}, "processes", "expected an integer"),
    ({"txn_share": "1.5"}, "txn_share", "between"),
    ({"create_topics": "maybe"}, "create_topics", "true or false"),
    ({"name": "a b"}, "name", "letters"),
    ({"events.topic": "bad topic!"}, "events.topic", "topic name"),
    ({"min_insync_replicas": "3", "replication_factor": "2"}, "min_insync_replicas",
     "exceeds"),
    ({"events.enabled": "false"}, "events.enabled", "history"),
    ({"colour": "red"}, "colour", "unknown setting"),
    ({"producer.transactional.id": "x"}, "producer.transactional.id", "set by the probe"),
    ({"consumer.group.id": "x"}, "consumer.group.id", "set by the probe"),
    ({"kafka.": "x"}, "kafka.", "property name"),
    ({"start_positions": "committed"}, "start_positions", "one of probe, client"),
])
def test_bad_settings_are_named(overrides: dict, setting: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        load(env={}, overrides={**BOOT, **overrides})
    assert info.value.setting == setting
    assert str(info.value).startswith(f"{setting}: ")


def test_bootstrap_is_required() -> None:
    with pytest.raises(ConfigError) as info:
        load(env={})
    assert info.value.setting == "kafka.bootstrap.servers"


def test_unknown_environment_variable_is_named() -> None:
    with pytest.raises(ConfigError) as info:
        load(env={"KMON_PROBE_RAET": "5", **{"KMON_PROBE_KAFKA_BOOTSTRAP_SERVERS": "a:1"}})
    assert info.value.setting == "KMON_PROBE_RAET"


def test_bad_file_is_named(tmp_path: Path) -> None:
    f = tmp_path / "probe.yaml"
    f.write_text("rate: [1, 2]\nkafka.bootstrap.servers: a:1\n")
    with pytest.raises(ConfigError) as info:
        load(f, env={})
    assert info.value.setting == "rate"
    f.write_text("- not a mapping\n")
    with pytest.raises(ConfigError, match="mapping"):
        load(f, env={})
    with pytest.raises(ConfigError, match="cannot read"):
        load(tmp_path / "missing.yaml", env={})


def test_librdkafka_rejects_unknown_client_settings_by_name() -> None:
    cfg = load(env={}, overrides={**BOOT, "consumer.no.such.thing": "1"})
    with pytest.raises(ConfigError) as info:
        clients.validate(cfg)
    assert info.value.setting == "consumer.no.such.thing"


def test_librdkafka_rejects_bad_values_by_name() -> None:
    cfg = load(env={}, overrides={**BOOT, "producer.acks": "most"})
    with pytest.raises(ConfigError) as info:
        clients.validate(cfg)
    assert info.value.setting == "producer.acks"


def test_valid_client_settings_pass_validation() -> None:
    cfg = load(env={}, overrides={**BOOT, "kafka.socket.timeout.ms": "5000"})
    clients.validate(cfg)
