"""Output topics: replication, min.insync.replicas and retention settings, validated; what
``ensure_topics`` creates and what it reports of existing ones (against a fake admin client)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import pytest

from kmon.streaming import kafka
from kmon.streaming.config import ConfigError, MonitorConfig, load
from kmon.streaming.metrics import MonitorMetrics, registry_with

REQUIRED = {"kafka.bootstrap.servers": "b:9092", "checkpoint": "/tmp/ck"}
DAY_MS = 86_400_000


def cfg(**settings: Any) -> MonitorConfig:
    return load(overrides={**REQUIRED, **{k.replace("_", "."): v for k, v in settings.items()}},
                env={})


def test_defaults_decide_from_the_cluster() -> None:
    out = cfg().output
    assert out.replication_factor is None and out.min_insync_replicas is None
    assert [out.replicas_for(n) for n in (1, 2, 3, 5)] == [1, 2, 3, 3]
    assert [out.min_insync_for(r) for r in (1, 2, 3)] == [1, 1, 2]
    assert out.retention_ms == {"kmon-anomalies": 30 * DAY_MS, "kmon-facts": 7 * DAY_MS,
                                "kmon-dead-letters": 14 * DAY_MS}
    assert cfg().drained_after_s == 3600


def test_explicit_settings() -> None:
    c = load(overrides={**REQUIRED, "topics.replication.factor": "2",
                        "topics.min.insync.replicas": 2, "topics.retention.anomalies": "forever",
                        "topics.retention.facts": "36h", "topics.anomalies": "ev",
                        "metrics.drained.after": "10min"}, env={})
    assert c.output.replicas_for(3) == 2 and c.output.min_insync_for(2) == 2
    assert c.output.retention_ms["ev"] == -1
    assert c.output.retention_ms["kmon-facts"] == 36 * 3600_000
    assert c.drained_after_s == 600


@pytest.mark.parametrize(("setting", "value", "message"), [
    ("topics.replication.factor", "0", r"^topics\.replication\.factor: must be in 1\.\.32767"),
    ("topics.replication.factor", "three", r"^topics\.replication\.factor: expected an integer"),
    ("topics.min.insync.replicas", "-1", r"^topics\.min\.insync\.replicas: must be in"),
    ("topics.retention.anomalies", "10s", r"^topics\.retention\.anomalies: must be at least 1min"),
    ("topics.retention.dead-letters", "a week", r"^topics\.retention\.dead-letters: expected a "),
    ("metrics.drained.after", "0", r"^metrics\.drained\.after: must be positive"),
])
def test_bad_values_fail_naming_the_setting(setting: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(overrides={**REQUIRED, setting: value}, env={})


def test_min_insync_above_the_replication_factor_fails_naming_both() -> None:
    with pytest.raises(ConfigError, match=r"^topics\.min\.insync\.replicas: 3 exceeds "
                                          r"topics\.replication\.factor 2$"):
        load(overrides={**REQUIRED, "topics.replication.factor": 2,
                        "topics.min.insync.replicas": 3}, env={})


def test_min_insync_above_the_automatic_replication_factor_fails(admin: FakeAdmin) -> None:
    admin.brokers = 2  # auto: 2 replicas
    with pytest.raises(ConfigError, match=r"^topics\.min\.insync\.replicas: 3 exceeds the "
                                          r"replication factor 2$"):
        kafka.ensure_topics(cfg(topics_min_insync_replicas=3))
    assert admin.created == []


def test_kmon_monitor_refuses_a_bad_replication_factor_at_once(capsys) -> None:
    from kmon.cli import main

    assert main(["monitor", "-b", "b:9092", "--checkpoint", "/tmp/ck",
                 "--set", "topics.replication.factor=0"]) == 2
    assert capsys.readouterr().err.startswith("kmon: error: topics.replication.factor: ")


# -- ensure_topics against a fake admin client ---------------------------------------------
@dataclass
class Part:
    replicas: list[int]


@dataclass
class Topic:
    partitions: dict[int, Part]


@dataclass
class Meta:
    brokers: dict[int, Any]
    topics: dict[str, Topic]


class Done:
    def result(self, timeout: float) -> None:
        return None


@dataclass
class FakeAdmin:
    brokers: int
    topics: dict[str, Topic] = field(default_factory=dict)
    created: list[Any] = field(default_factory=list)

    def __call__(self, conf: dict[str, Any]) -> FakeAdmin:  # the AdminClient constructor
        return self

    def __enter__(self) -> FakeAdmin:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def list_topics(self, timeout: float) -> Meta:
        return Meta(dict.fromkeys(range(self.brokers)), dict(self.topics))

    def create_topics(self, new: list[Any], request_timeout: float) -> dict[str, Done]:
        for t in new:
            self.created.append(t)
            self.topics[t.topic] = Topic({p: Part(list(range(t.replication_factor)))
                                          for p in range(t.num_partitions)})
        return {t.topic: Done() for t in new}


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch) -> FakeAdmin:
    fake = FakeAdmin(brokers=3)
    monkeypatch.setattr("confluent_kafka.admin.AdminClient", fake)
    return fake


def test_missing_topics_are_created_replicated_with_their_settings(admin: FakeAdmin) -> None:
    found = kafka.ensure_topics(cfg())
    made = {t.topic: t for t in admin.created}
    assert set(made) == {"kmon-anomalies", "kmon-facts", "kmon-dead-letters"}
    assert {t.replication_factor for t in made.values()} == {3}
    assert made["kmon-anomalies"].config == {"min.insync.replicas": "2",
                                             "retention.ms": str(30 * DAY_MS)}
    assert made["kmon-facts"].config["retention.ms"] == str(7 * DAY_MS)
    assert [(t.topic, t.replicas, t.single_copy) for t in found] == [
        ("kmon-anomalies", 3, False), ("kmon-facts", 3, False), ("kmon-dead-letters", 3, False)]


def test_more_replicas_than_brokers_fails_naming_both(admin: FakeAdmin) -> None:
    with pytest.raises(ConfigError, match=r"^topics\.replication\.factor: 4 exceeds the "
                                          r"cluster's 3 broker\(s\)$"):
        kafka.ensure_topics(cfg(topics_replication_factor=4))
    assert admin.created == []


def test_a_single_replica_topic_on_several_brokers_is_warned_and_exported(
        admin: FakeAdmin, caplog: pytest.LogCaptureFixture) -> None:
    admin.topics["kmon-anomalies"] = Topic({0: Part([2]), 1: Part([0])})
    with caplog.at_level(logging.WARNING, "kmon.monitor"):
        found = kafka.ensure_topics(cfg())
    assert [t.topic for t in admin.created] == ["kmon-facts", "kmon-dead-letters"]
    assert [t.single_copy for t in found] == [True, False, False]
    assert any("kmon-anomalies has a single replica on a cluster of 3 brokers" in r.message
               for r in caplog.records)
    m = MonitorMetrics(cluster="c1")
    m.output_topics({t.topic: t.replicas for t in found}, found[0].brokers)
    reg = registry_with(m)
    assert reg.get_sample_value("kmon_monitor_output_topic_replicas",
                                {"cluster": "c1", "topic": "kmon-anomalies"}) == 1
    assert reg.get_sample_value("kmon_monitor_output_topic_replicas",
                                {"cluster": "c1", "topic": "kmon-facts"}) == 3
    assert reg.get_sample_value("kmon_monitor_brokers", {"cluster": "c1"}) == 3


def test_one_broker_one_replica_is_not_warned(monkeypatch: pytest.MonkeyPatch,
                                              caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeAdmin(brokers=1)
    monkeypatch.setattr("confluent_kafka.admin.AdminClient", fake)
    with caplog.at_level(logging.WARNING, "kmon.monitor"):
        found = kafka.ensure_topics(cfg())
    assert {t.replicas for t in found} == {1} and not any(t.single_copy for t in found)
    assert fake.created[0].config["min.insync.replicas"] == "1"
    assert not caplog.records
