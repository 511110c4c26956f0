"""Monitor configuration: defaults, files, overrides, and failing fast naming the setting."""

from __future__ import annotations

import pytest

from kmon.streaming.config import (
    CLUSTER_STATE_PARTITIONS,
    ENV_CONFIG,
    ConfigError,
    load,
    parse_duration,
    state_partitions_for,
    txn_partitions_for,
)

REQUIRED = ["kafka.bootstrap.servers=b:9092", "checkpoint=/tmp/ck"]


def test_defaults() -> None:
    cfg = load(overrides=REQUIRED, env={})
    assert cfg.events_topic == "kmon-events" and cfg.anomalies_topic == "kmon-anomalies"
    assert cfg.trigger_s == 1.0 and cfg.grace_s == 10.0 and cfg.unseen_grace_s == 60.0
    assert cfg.metrics_port == 9464 and cfg.max_events_per_trigger == 200_000
    # Short fetch waits: a task's seek waits out the fetch its predecessor left in flight;
    # big polls: each poll costs the broker two offset lookups.
    assert cfg.kafka_options() == {"kafka.bootstrap.servers": "b:9092",
                                   "kafka.fetch.max.wait.ms": "20",
                                   "kafka.max.poll.records": "10000"}
    assert cfg.stage1_checkpoint == "/tmp/ck/keys" and cfg.metrics_dir == "/tmp/ck/metrics"


def test_yaml_file_nested_keys_and_passthrough(tmp_path) -> None:
    f = tmp_path / "m.yaml"
    f.write_text(
        "kafka: {bootstrap.servers: 'k1:9093,k2:9093'}\n"
        "checkpoint: s3a://bucket/kmon\n"
        "topics: {events: ev, anomalies: an}\n"
        "trigger: 500ms\n"
        "source:\n  kafka.security.protocol: SASL_SSL\n  kafka.sasl.mechanism: PLAIN\n"
        "producer:\n  security.protocol: SASL_SSL\n  sasl.username: kmon\n"
        "spark:\n  master: spark://m:7077\n")
    cfg = load(f, ["grace=2 min"], env={})
    assert cfg.bootstrap_servers == "k1:9093,k2:9093" and cfg.checkpoint == "s3a://bucket/kmon"
    assert (cfg.events_topic, cfg.anomalies_topic) == ("ev", "an")
    assert cfg.trigger_s == 0.5 and cfg.grace_s == 120
    assert cfg.kafka_options()["kafka.security.protocol"] == "SASL_SSL"
    assert cfg.producer()["sasl.username"] == "kmon"
    tuned = load(overrides=[*REQUIRED, "source.kafka.fetch.max.wait.ms=100"], env={})
    assert tuned.kafka_options()["kafka.fetch.max.wait.ms"] == "100"  # a source.* setting wins
    assert cfg.spark_conf == {"master": "spark://m:7077"}


def test_stage2_memory_settings() -> None:
    cfg = load(overrides=[*REQUIRED, "txn.retention=10min", "txn.max.writers=5000"], env={})
    assert (cfg.txn_retention_s, cfg.txn_max_writers) == (600.0, 5000)
    assert load(overrides=REQUIRED, env={}).txn_retention_s == 300.0


def test_config_path_from_environment(tmp_path) -> None:
    f = tmp_path / "m.yaml"
    f.write_text("kafka.bootstrap.servers: x:1\ncheckpoint: /c\n")
    assert load(env={ENV_CONFIG: str(f)}).bootstrap_servers == "x:1"


@pytest.mark.parametrize("override, names", [
    (["trigger=soon"], "trigger"),
    (["grace=0"], "grace"),
    (["metrics.port=70000"], "metrics.port"),
    (["topics.events=bad topic"], "topics.events"),
    (["topics.facts=kmon-events"], "topics"),
    (["max.events.per.trigger=lots"], "max.events.per.trigger"),
    (["starting.offsets=yesterday"], "starting.offsets"),
    (["txn.retention=forever"], "txn.retention"),
    (["txn.trigger=0"], "txn.trigger"),
    (["txn.max.writers=3"], "txn.max.writers"),
    (["state.partitions=0"], "state.partitions"),
    (["state.partitions=many"], "state.partitions"),
    (["txn.partitions=0"], "txn.partitions"),
    (["txn.partitions=-1"], "txn.partitions"),
    (["state.page.slots=100"], "state.page.slots"),
    (["state.page.slots=-256"], "state.page.slots"),
    (["tirgger=1s"], "tirgger"),
    (["share.lock=0"], "share.lock"),
    (["share.lock=long"], "share.lock"),
    (["share.delivery.limit=0"], "share.delivery.limit"),
    (["share.delivery.limit=17"], "share.delivery.limit"),
    (["share.delivery.limit=five"], "share.delivery.limit"),
    (["share.skew=-1s"], "share.skew"),
    (["share.lock.ms=30000"], "share.lock.ms"),
    (["no-equals-sign"], "no-equals-sign"),
])
def test_bad_settings_fail_naming_the_key(override, names) -> None:
    with pytest.raises(ConfigError, match=names.replace(".", r"\.")):
        load(overrides=[*REQUIRED, *override], env={})


@pytest.mark.parametrize("missing", ["kafka.bootstrap.servers", "checkpoint"])
def test_required_settings(missing) -> None:
    given = [s for s in REQUIRED if not s.startswith(missing)]
    with pytest.raises(ConfigError, match=f"{missing} is required"):
        load(overrides=given, env={})


def test_bad_file(tmp_path) -> None:
    with pytest.raises(ConfigError, match="config file"):
        load(tmp_path / "absent.yaml", env={})
    f = tmp_path / "list.yaml"
    f.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        load(f, env={})


def test_durations() -> None:
    assert parse_duration("x", "250ms") == 0.25
    assert parse_duration("x", "2 minutes") == 120
    assert parse_duration("x", 3) == 3.0
    assert parse_duration("x", "1h") == 3600
    with pytest.raises(ConfigError):
        parse_duration("x", True)


def test_zero_disables_unseen_and_skew_checks() -> None:
    cfg = load(overrides=[*REQUIRED, "unseen.grace=0", "max.future.skew=0"], env={})
    assert cfg.unseen_grace_s is None and cfg.max_future_skew_s is None


def test_env_and_file_references_are_resolved(tmp_path) -> None:
    key = tmp_path / "tls.key"
    key.write_text("KEY\n")
    cfg = load(overrides=[*REQUIRED, "producer.sasl.password=${env:PW}",
                          f"source.kafka.ssl.keystore.key=${{file:{key}}}",
                          'source.kafka.sasl.jaas.config=M required password="${env:PW}";'],
               env={"PW": "s3cret"})
    assert cfg.producer()["sasl.password"] == "s3cret"
    assert cfg.kafka_options()["kafka.ssl.keystore.key"] == "KEY\n"
    assert cfg.kafka_options()["kafka.sasl.jaas.config"] == 'M required password="s3cret";'


@pytest.mark.parametrize(("ref", "message"), [
    ("${env:NOPE}", "producer.sasl.password: environment variable NOPE is not set"),
    ("${file:/nonexistent/x}", "producer.sasl.password: cannot read /nonexistent/x"),
])
def test_unresolvable_references_fail_naming_the_key(ref: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("$", r"\$")):
        load(overrides=[*REQUIRED, f"producer.sasl.password={ref}"], env={})


def test_the_cluster_setting(tmp_path) -> None:
    assert load(overrides=REQUIRED, env={}).cluster == "local"
    assert load(overrides=[*REQUIRED, "cluster=prod-eu.1"], env={}).cluster == "prod-eu.1"
    f = tmp_path / "m.yaml"
    f.write_text("kafka.bootstrap.servers: x:1\ncheckpoint: /c\ncluster: staging_2\n")
    assert load(f, env={}).cluster == "staging_2"


@pytest.mark.parametrize("bad", ["", "-lead", "has space", "a/b", "x" * 64, "ok\n"])
def test_a_bad_cluster_name_fails_naming_the_setting(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"^cluster: "):
        load(overrides={"kafka.bootstrap.servers": "b:9092", "checkpoint": "/c",
                        "cluster": bad}, env={})


def test_kmon_monitor_refuses_a_bad_cluster_at_once(capsys) -> None:
    from kmon.cli import main

    assert main(["monitor", "-b", "b:9092", "--checkpoint", "/tmp/ck",
                 "--set", "cluster=no good"]) == 2
    assert capsys.readouterr().err.startswith("kmon: error: cluster: ")


def test_state_partitions_use_a_clusters_cores_and_leave_room_to_grow() -> None:
    auto = load(overrides=REQUIRED, env={})
    assert auto.state_partitions is None
    assert state_partitions_for(auto, "local[2]", 2) == 2  # one machine: its cores
    assert state_partitions_for(auto, "spark://m:7077", 4) == CLUSTER_STATE_PARTITIONS == 16
    assert state_partitions_for(auto, "k8s://https://api:6443", 48) == 48
    shuffle = load(overrides=[*REQUIRED, "spark.sql.shuffle.partitions=6"], env={})
    assert state_partitions_for(shuffle, "spark://m:7077", 4) == 6  # Spark's own setting
    fixed = load(overrides=[*REQUIRED, "state.partitions=32",
                            "spark.sql.shuffle.partitions=6"], env={})
    assert state_partitions_for(fixed, "local[2]", 2) == 32  # the kmon setting wins


def test_stage_2_gets_half_of_stage_1s_partitions_unless_set() -> None:
    auto = load(overrides=REQUIRED, env={})
    assert auto.txn_partitions is None
    assert [txn_partitions_for(auto, n) for n in (1, 2, 3, 16, 48)] == [1, 1, 1, 8, 24]
    fixed = load(overrides=[*REQUIRED, "txn.partitions=5"], env={})
    assert txn_partitions_for(fixed, 2) == 5 and txn_partitions_for(fixed, 64) == 5


def test_share_group_settings_default_to_kafkas_and_reach_the_fold(tmp_path) -> None:
    from kmon.checker.share import DEFAULT_SETTINGS, MAX_DELIVERIES, ShareSettings
    from kmon.streaming.config import MAX_SHARE_DELIVERY_LIMIT
    from kmon.streaming.monitor import fold_settings

    cfg = load(overrides=REQUIRED, env={})
    assert (cfg.share_lock_s, cfg.share_delivery_limit, cfg.share_skew_s) == (30.0, 5, 1.0)
    assert fold_settings(cfg).fold_config().share_settings == DEFAULT_SETTINGS
    f = tmp_path / "m.yaml"
    f.write_text("kafka.bootstrap.servers: x:1\ncheckpoint: /c\n"
                 "share: {lock: 45s, delivery: {limit: 3}, skew: 250ms}\n")
    cfg = load(f, env={})
    assert (cfg.share_lock_s, cfg.share_delivery_limit, cfg.share_skew_s) == (45.0, 3, 0.25)
    assert fold_settings(cfg).fold_config().share_settings == ShareSettings(
        45_000_000_000, 3, 250_000_000)
    cfg = load(overrides=[*REQUIRED, "share.lock=1min", "share.delivery.limit=10",
                          "share.skew=0"], env={})
    assert fold_settings(cfg).fold_config().share_settings == ShareSettings(60_000_000_000, 10, 0)
    assert MAX_SHARE_DELIVERY_LIMIT == MAX_DELIVERIES


def test_kmon_monitor_refuses_a_bad_share_setting_at_once(capsys) -> None:
    from kmon.cli import main

    assert main(["monitor", "-b", "b:9092", "--checkpoint", "/tmp/ck",
                 "--set", "share.delivery.limit=0"]) == 2
    assert capsys.readouterr().err.startswith("kmon: error: share.delivery.limit: ")


def test_a_checkpoints_recorded_partitions_are_read_from_its_offsets() -> None:
    from kmon.streaming.monitor import recorded_partitions

    meta = ('{"batchWatermarkMs":0,"batchTimestampMs":1764979200000,"conf":'
            '{"spark.sql.shuffle.partitions":"%s","spark.sql.streaming.stateStore.'
            'providerClass":"org.apache.spark.sql.execution.streaming.state.'
            'RocksDBStateStoreProvider"}}')
    source = '{"kmon-events":{"0":1042}}'
    assert recorded_partitions(["v1", meta % 1, source]) == 1
    assert recorded_partitions(["v1", meta % 16, source]) == 16
    assert recorded_partitions(None) is None  # a new checkpoint
    assert recorded_partitions(["v1"]) is None
    assert recorded_partitions(["v1", '{"conf":{}}', source]) is None
    assert recorded_partitions(["v1", meta % "many", source]) is None
