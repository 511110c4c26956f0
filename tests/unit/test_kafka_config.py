"""Broker settings: kmon's defaults are real Kafka settings; bad overrides fail by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from kmon.env import SettingError
from kmon.local.artifacts import installed_kafka
from kmon.local.kafka_config import (
    DEFAULTS,
    RESERVED,
    broker_properties,
    load_config_defs,
    parse_overrides,
    read_properties,
    validate_overrides,
)
from kmon.local.ports import Ports


@pytest.fixture(scope="module")
def defs() -> dict[str, str]:
    """Kafka's settings table, as set-up asked the cached jars for it."""
    return load_config_defs(installed_kafka().config_defs)


def test_the_settings_table_is_kafkas(defs: dict[str, str]) -> None:
    assert defs["min.insync.replicas"] == "INT"
    assert defs["unclean.leader.election.enable"] == "BOOLEAN"
    assert defs["transaction.max.timeout.ms"] == "INT"
    assert len(defs) > 300


def test_kmon_defaults_and_reserved_names_are_real_settings(defs: dict[str, str]) -> None:
    validate_overrides(DEFAULTS, defs)  # every default is a known, well-typed setting
    assert RESERVED - {"broker.id", "log.dir"} <= set(defs)  # two synonyms Kafka also takes


@pytest.mark.parametrize(
    "overrides",
    [
        {"min.insync.replicas": "3"},
        {"unclean.leader.election.enable": "true"},
        {"transaction.max.timeout.ms": "60000", "transactional.id.expiration.ms": "600000"},
        {"listener.name.plaintext.ssl.client.auth": "none"},
    ],
)
def test_known_overrides_pass(defs: dict[str, str], overrides: dict[str, str]) -> None:
    validate_overrides(overrides, defs)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"min.insync.replica": "2"}, "unknown Kafka broker setting 'min.insync.replica'"),
        ({"no.such.setting": "1"}, "unknown Kafka broker setting 'no.such.setting'"),
        ({"min.insync.replicas": "two"}, "min.insync.replicas='two': expected an integer"),
        ({"unclean.leader.election.enable": "yes"}, "'yes': expected true or false"),
        ({"node.id": "7"}, "'node.id' is set by kmon"),
        ({"log.dirs": "/tmp/x"}, "'log.dirs' is set by kmon"),
    ],
)
def test_bad_overrides_fail_naming_the_setting(
    defs: dict[str, str], overrides: dict[str, str], named: str
) -> None:
    with pytest.raises(SettingError) as error:
        validate_overrides(overrides, defs)
    assert named in str(error.value)


def test_parse_overrides() -> None:
    assert parse_overrides(["a.b=1", " c = x=y "]) == {"a.b": "1", "c": "x=y"}
    with pytest.raises(SettingError, match=r"'min\.insync\.replicas' is not key=value"):
        parse_overrides(["min.insync.replicas"])


def test_read_properties(tmp_path: Path) -> None:
    good = tmp_path / "good.properties"
    good.write_text("# comment\n\nmin.insync.replicas = 3\n! also a comment\na.b:c\n")
    assert read_properties(good) == {"min.insync.replicas": "3", "a.b": "c"}
    bad = tmp_path / "bad.properties"
    bad.write_text("min.insync.replicas=2\njust-a-word\n")
    with pytest.raises(SettingError, match=r"bad\.properties:2"):
        read_properties(bad)
    with pytest.raises(SettingError, match="not found"):
        read_properties(tmp_path / "missing.properties")


def test_broker_properties_layout_and_precedence(tmp_path: Path) -> None:
    props = broker_properties(2, Ports(30000), tmp_path, {"min.insync.replicas": "3"})
    assert props["node.id"] == "2"
    assert props["process.roles"] == "broker,controller"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:30001,CONTROLLER://127.0.0.1:30011"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:30001"
    voters = "1@127.0.0.1:30010,2@127.0.0.1:30011,3@127.0.0.1:30012"
    assert props["controller.quorum.voters"] == voters
    assert props["log.dirs"] == str(tmp_path)
    assert props["min.insync.replicas"] == "3"  # the override beats kmon's default of 2
    assert props["offsets.topic.num.partitions"] == DEFAULTS["offsets.topic.num.partitions"]


def test_the_sasl_ssl_listener_and_its_settings(defs: dict[str, str], tmp_path: Path) -> None:
    pem = tmp_path / "broker-2.pem"
    props = broker_properties(2, Ports(30000), tmp_path, {}, sasl_ssl_keystore=pem)
    assert props["listeners"].endswith(",SASL_SSL://127.0.0.1:30014")
    assert props["advertised.listeners"].endswith(",SASL_SSL://127.0.0.1:30014")
    assert "SASL_SSL:SASL_SSL" in props["listener.security.protocol.map"].split(",")
    assert props["inter.broker.listener.name"] == "PLAINTEXT"  # brokers among themselves
    assert props["listener.name.sasl_ssl.ssl.keystore.location"] == str(pem)
    # Every per-listener name, without its listener (and mechanism) prefix, is Kafka's own.
    own = {k.removeprefix("listener.name.sasl_ssl.").removeprefix("scram-sha-512.")
           for k in props if k.startswith("listener.name.sasl_ssl.")}
    assert own == {"ssl.keystore.type", "ssl.keystore.location", "sasl.enabled.mechanisms",
                   "sasl.jaas.config"}
    assert own <= set(defs)
    assert "SASL_SSL" not in broker_properties(2, Ports(30000), tmp_path, {})["listeners"]
