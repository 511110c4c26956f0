"""The monitor's output topics on the real local cluster (3 brokers): created replicated, with
``min.insync.replicas`` and retention set; a pre-existing single-replica one is warned about
and exported; more replicas than brokers is refused before anything starts."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic

from kmon.streaming import config, kafka
from kmon.streaming.metrics import MonitorMetrics, registry_with
from tests.helpers import wait_until

DAY_MS = 86_400_000


def _config(bootstrap: str, tag: str, **extra: Any) -> config.MonitorConfig:
    return config.load(overrides={
        "kafka.bootstrap.servers": bootstrap, "checkpoint": "/tmp/unused",
        "topics.anomalies": f"an-{tag}", "topics.facts": f"fa-{tag}",
        "topics.dead-letters": f"dl-{tag}", "cluster": "it", **extra}, env={})


def _describe(bootstrap: str, topic: str) -> tuple[int, dict[str, str]]:
    """(the fewest replicas of any partition, the configs set on the topic itself: not the
    broker's defaults) via the Admin API, once every broker knows the new topic
    (describe_configs asks any one of them)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    got: dict[str, str] = {}

    def described() -> bool:
        try:
            entries = admin.describe_configs([res])[res].result(30)
        except KafkaException:
            return False
        got.update({k: v.value for k, v in entries.items()
                    if v.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value})
        return True

    wait_until(described, f"{topic}'s configs")
    parts = admin.list_topics(topic, timeout=30).topics[topic].partitions.values()
    return min(len(p.replicas) for p in parts), got


def test_output_topics_are_created_with_3_replicas_min_isr_2_and_retention(
        kafka_bootstrap: str) -> None:
    cfg = _config(kafka_bootstrap, uuid.uuid4().hex[:8])
    found = kafka.ensure_topics(cfg)
    assert [(t.replicas, t.brokers) for t in found] == [(3, 3)] * 3
    for topic, days in ((cfg.anomalies_topic, 30), (cfg.facts_topic, 7),
                        (cfg.dead_letter_topic, 14)):
        replicas, configs = _describe(kafka_bootstrap, topic)
        assert replicas == 3, topic
        assert configs["min.insync.replicas"] == "2", topic
        assert configs["retention.ms"] == str(days * DAY_MS), topic


def test_explicit_settings_are_applied(kafka_bootstrap: str) -> None:
    """Not the local brokers' defaults (replication 3, min.insync.replicas 2, 7 days)."""
    cfg = _config(kafka_bootstrap, uuid.uuid4().hex[:8], **{
        "topics.replication.factor": 2, "topics.min.insync.replicas": 1,
        "topics.retention.dead-letters": "3d"})
    kafka.ensure_topics(cfg)
    replicas, configs = _describe(kafka_bootstrap, cfg.dead_letter_topic)
    assert replicas == 2
    assert configs["min.insync.replicas"] == "1" and configs["retention.ms"] == str(3 * DAY_MS)


def test_a_single_replica_output_topic_is_warned_and_exported(
        kafka_bootstrap: str, caplog: pytest.LogCaptureFixture) -> None:
    cfg = _config(kafka_bootstrap, uuid.uuid4().hex[:8])
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(cfg.anomalies_topic, num_partitions=1,
                                  replication_factor=1)])[cfg.anomalies_topic].result(30)
    with caplog.at_level(logging.WARNING, "kmon.monitor"):
        found = kafka.ensure_topics(cfg)
    assert any(f"output topic {cfg.anomalies_topic} has a single replica on a cluster of 3 "
               "brokers" in r.getMessage() for r in caplog.records)
    m = MonitorMetrics(cluster="it")
    m.output_topics({t.topic: t.replicas for t in found}, found[0].brokers)
    reg = registry_with(m)

    def replicas(topic: str) -> float | None:
        return reg.get_sample_value("kmon_monitor_output_topic_replicas",
                                    {"cluster": "it", "topic": topic})

    assert replicas(cfg.anomalies_topic) == 1
    assert replicas(cfg.facts_topic) == 3 and replicas(cfg.dead_letter_topic) == 3
    assert reg.get_sample_value("kmon_monitor_brokers", {"cluster": "it"}) == 3
    assert _describe(kafka_bootstrap, cfg.anomalies_topic)[0] == 1  # left as it was


def test_more_replicas_than_brokers_fails_before_spark(kafka_bootstrap: str, tmp_path: Any,
                                                       capsys: pytest.CaptureFixture) -> None:
    from kmon.cli import main

    tag = uuid.uuid4().hex[:8]
    assert main(["monitor", "-b", kafka_bootstrap, "--checkpoint", str(tmp_path / "ck"),
                 "--metrics-port", "0", "--set", f"topics.anomalies=an-{tag}",
                 "--set", "topics.replication.factor=4"]) == 2
    assert capsys.readouterr().err.startswith(
        "kmon: error: topics.replication.factor: 4 exceeds the cluster's 3 broker(s)")
    listed = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=30).topics
    assert f"an-{tag}" not in listed
