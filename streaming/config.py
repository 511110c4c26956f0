"""The monitor's configuration: one flat set of dotted keys, validated up front.

Sources, later ones winning: built-in defaults, a YAML file (``--config``, or the path in
``KMON_MONITOR_CONFIG``), then ``key=value`` overrides (``--set``). A bad or unknown key fails
before Spark starts, with a message naming it (``ConfigError``). Nothing is read from the
machine beyond those, so the same file runs the monitor locally and with ``spark-submit``,
except what a value names itself: ``${env:NAME}`` is replaced by that environment variable and
``${file:PATH}`` by that file's text, on the driver at start (how the Helm chart keeps SASL
credentials and client keys out of its ConfigMap). Executors get the resolved options.

Keys (``KEYS`` has each key's meaning; ``docs/monitor.md`` the full table):

- ``kafka.bootstrap.servers`` (required) and ``checkpoint`` (required: a path or URI every
  driver incarnation can reach, e.g. HDFS or S3 on a cluster);
- ``cluster``: the name of the monitored cluster, the ``cluster`` label of every metric and
  field of every evidence record;
- ``topics.events``, ``topics.anomalies``, ``topics.facts``, ``topics.dead-letters``;
- output topics the monitor creates: ``topics.replication.factor``,
  ``topics.min.insync.replicas``, ``topics.retention.anomalies``/``.facts``/``.dead-letters``;
- ``metrics.drained.after``: how long a settled key without events keeps its series;
- ``state.partitions``, ``txn.partitions``: partitions (parallel tasks) of the stateful
  stages;
- ``state.page.slots``: offsets per page of a key's window in the state store;
- timing: ``trigger``, ``watermark.delay``, ``grace``, ``unseen.grace``, ``max.future.skew``;
- share groups (KIP-932), as the groups are configured: ``share.lock``,
  ``share.delivery.limit``, ``share.skew``;
- input: ``starting.offsets``, ``max.events.per.trigger``;
- metrics: ``metrics.host``, ``metrics.port``;
- pass-through: ``source.<option>`` (Spark's Kafka source, e.g.
  ``source.kafka.security.protocol``), ``producer.<setting>`` (the driver's librdkafka
  producer, e.g. ``producer.sasl.username``), ``spark.<conf>`` (any Spark setting; the
  master is ``spark.master``, which spark-submit sets instead).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kmon.streaming.state_pages import DEFAULT_PAGE_SLOTS, check_page_slots

ENV_CONFIG = "KMON_MONITOR_CONFIG"
# share.delivery.limit's most: the deliveries the checker keeps per record
# (kmon.checker.share.MAX_DELIVERIES; tests/unit/streaming/test_config.py holds them equal).
# Kafka's own limit is lower (KIP-932: 2..10).
MAX_SHARE_DELIVERY_LIMIT = 16
TXN_BUCKETS = 16  # txn.buckets' default, also what stage 2's classes assume when not told


class ConfigError(ValueError):
    """A bad monitor setting; the message names the key."""


# key -> (default, meaning). None: required (or unset).
KEYS: dict[str, tuple[Any, str]] = {
    "kafka.bootstrap.servers": (None, "bootstrap servers of the cluster holding the topics"),
    "checkpoint": (None, "checkpoint location (shared FS or object store on a cluster)"),
    "cluster": ("local", "name of the monitored cluster: the cluster label of every metric "
                         "and field of every evidence record"),
    "topics.events": ("kmon-events", "op events from the probes (input)"),
    "topics.anomalies": ("kmon-anomalies", "evidence records (output)"),
    "topics.facts": ("kmon-facts", "per-writer facts, stage 1 -> stage 2 (internal)"),
    "topics.dead-letters": ("kmon-dead-letters", "malformed op events, with the reason"),
    "topics.replication.factor": ("auto", "replicas of the output topics the monitor creates "
                                          "(auto: the smaller of 3 and the broker count)"),
    "topics.min.insync.replicas": ("auto", "min.insync.replicas of the output topics it "
                                           "creates (auto: replication factor - 1, at least 1)"),
    "topics.retention.anomalies": ("30d", "retention of the anomalies topic it creates "
                                          "(evidence; forever: never deleted)"),
    "topics.retention.facts": ("7d", "retention of the facts topic it creates (stage 2 must "
                                     "read them after a monitor outage)"),
    "topics.retention.dead-letters": ("14d", "retention of the dead-letter topic it creates"),
    "trigger": ("1s", "micro-batch interval of both queries"),
    "watermark.delay": ("5s", "how late an event may arrive before the watermark passes it"),
    "grace": ("10s", "wait for late evidence before an absence verdict (lost writes, torn)"),
    "unseen.grace": ("60s", "an acknowledged value unread this long gets an unseen verdict"),
    "max.future.skew": ("5min", "events further ahead of their Kafka timestamp are dead "
                                "letters (0: no check)"),
    "share.lock": ("30s", "share groups' acquisition lock: their share.record.lock.duration.ms "
                          "(Kafka's default 30s)"),
    "share.delivery.limit": (5, "share groups' share.delivery.count.limit (Kafka's default 5; "
                                f"1..{MAX_SHARE_DELIVERY_LIMIT})"),
    "share.skew": ("1s", "clock skew allowed between the probes and the brokers, for share "
                         "groups' verdicts"),
    "starting.offsets": ("earliest", "where a new checkpoint starts reading: earliest/latest"),
    "max.events.per.trigger": (200_000, "cap on events read per micro-batch, so a backlog "
                                        "(a restart after downtime) comes in bounded batches; "
                                        "split over the events partitions by their backlog "
                                        "at start"),
    "metrics.host": ("0.0.0.0", "address the Prometheus endpoint binds"),
    "metrics.port": (9464, "port of the Prometheus endpoint (0: no endpoint)"),
    "metrics.drained.after": ("1h", "a settled key (nothing left to judge) without events "
                                    "this long loses its gauges and zero series"),
    "txn.trigger": ("5s", "micro-batch interval of stage 2 (transactions): every batch has a "
                          "fixed cost, and on few cores a busy stage 2 slows stage 1 down"),
    "txn.buckets": (TXN_BUCKETS, "stage 2 state groups per probe (writers are spread over them)"),
    "txn.retention": ("5min", "how long stage 2 keeps a writer's facts after its last one: a "
                              "torn transaction whose halves are decided further apart is missed"),
    "txn.max.writers": (20_000, "writers stage 2 keeps per bucket at most, plus one generation's "
                                "(oldest generations forgotten first): bounds its memory"),
    "verdict.memory": (1024, "anomalies remembered per key to count each once"),
    "state.partitions": ("auto", "partitions of stage 1 (the per-key fold), so at most this "
                                 "many tasks fold at once; fixed when a checkpoint is created "
                                 "(auto: the cores of local[N]; on a cluster its cores, at "
                                 "least 16)"),
    "txn.partitions": ("auto", "partitions of stage 2 (the per-writer fold); fixed when a "
                               "checkpoint is created (auto: half of state.partitions, at least "
                               "1, so stage 2's tasks leave cores to stage 1's)"),
    "state.page.slots": (DEFAULT_PAGE_SLOTS, "offsets per page of a key's window in the state "
                                             "store: a batch rewrites only the pages it changed "
                                             "(0: each key's state as one value)"),
}
REQUIRED = ("kafka.bootstrap.servers", "checkpoint")
PREFIXES = {
    "source.": "Spark Kafka source option, passed as is (e.g. source.kafka.sasl.mechanism)",
    "producer.": "librdkafka setting of the driver's producer (e.g. producer.sasl.username)",
    "spark.": "Spark setting (e.g. spark.master)",
}

_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|sec|secs|seconds?|m|min|mins|minutes?"
                       r"|h|hours?|d|days?)?\s*$")
_UNITS = {"ms": 0.001, "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1, "m": 60,
          "min": 60, "mins": 60, "minute": 60, "minutes": 60, "h": 3600, "hour": 3600,
          "hours": 3600, "d": 86400, "day": 86400, "days": 86400}
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
CLUSTER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")  # fullmatch


def parse_duration(key: str, value: Any) -> float:
    """Seconds from ``1.5``, ``"500ms"``, ``"10s"``, ``"5 min"``...; ConfigError if not."""
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected a duration like 10s or 500ms, got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        m = _DURATION.match(str(value))
        if m is None:
            raise ConfigError(f"{key}: expected a duration like 10s or 500ms, got {value!r}")
        seconds = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if seconds < 0:
        raise ConfigError(f"{key}: must not be negative, got {value!r}")
    return seconds


def _int(key: str, value: Any, lo: int, hi: int) -> int:
    try:
        n = int(str(value).strip())
    except ValueError:
        raise ConfigError(f"{key}: expected an integer, got {value!r}") from None
    if not lo <= n <= hi:
        raise ConfigError(f"{key}: must be in {lo}..{hi}, got {n}")
    return n


def _page_slots(value: Any) -> int:
    n = _int("state.page.slots", value, 0, 1 << 24)
    try:
        return check_page_slots(n)
    except ValueError as e:
        raise ConfigError(f"state.page.slots: {e}") from None


AUTO = "auto"
FOREVER = "forever"
MAX_REPLICAS = 32767  # Kafka's replication factor is a 16-bit count


@dataclass(frozen=True)
class OutputTopics:
    """How the monitor creates its output topics. None: decided from the cluster (``auto``).
    Retentions in milliseconds, -1 forever (Kafka's ``retention.ms``)."""

    replication_factor: int | None = None
    min_insync_replicas: int | None = None
    retention_ms: dict[str, int] = field(default_factory=dict)  # topic -> retention.ms

    def replicas_for(self, brokers: int) -> int:
        """The replication factor to create with on a cluster of ``brokers``; ConfigError
        naming both when more replicas are asked for than there are brokers."""
        if self.replication_factor is None:
            return max(1, min(3, brokers))
        if self.replication_factor > brokers:
            raise ConfigError(f"topics.replication.factor: {self.replication_factor} exceeds "
                              f"the cluster's {brokers} broker(s)")
        return self.replication_factor

    def min_insync_for(self, replicas: int) -> int:
        """``min.insync.replicas`` for ``replicas``; ConfigError if set above them (every
        write would then fail with NOT_ENOUGH_REPLICAS)."""
        if self.min_insync_replicas is None:
            return max(1, replicas - 1)
        if self.min_insync_replicas > replicas:
            raise ConfigError(f"topics.min.insync.replicas: {self.min_insync_replicas} exceeds "
                              f"the replication factor {replicas}")
        return self.min_insync_replicas


def _auto_int(key: str, value: Any, lo: int, hi: int) -> int | None:
    if value is None or str(value).strip().lower() == AUTO:
        return None
    return _int(key, value, lo, hi)


def _retention_ms(key: str, value: Any) -> int:
    if str(value).strip().lower() == FOREVER:
        return -1
    ms = round(parse_duration(key, value) * 1000)
    if ms < 60_000:  # shorter would delete evidence before anyone reads it
        raise ConfigError(f"{key}: must be at least 1min (or forever), got {value!r}")
    return ms


def output_topics(settings: Mapping[str, Any], names: Mapping[str, str]) -> OutputTopics:
    """The output topics' settings; ``names``: retention key suffix -> topic name."""
    rf = _auto_int("topics.replication.factor", settings["topics.replication.factor"], 1,
                   MAX_REPLICAS)
    isr = _auto_int("topics.min.insync.replicas", settings["topics.min.insync.replicas"], 1,
                    MAX_REPLICAS)
    if rf is not None and isr is not None and isr > rf:
        raise ConfigError(f"topics.min.insync.replicas: {isr} exceeds "
                          f"topics.replication.factor {rf}")
    retention = {topic: _retention_ms(f"topics.retention.{suffix}",
                                      settings[f"topics.retention.{suffix}"])
                 for suffix, topic in names.items()}
    return OutputTopics(rf, isr, retention)


@dataclass(frozen=True)
class MonitorConfig:
    bootstrap_servers: str
    checkpoint: str
    cluster: str
    events_topic: str
    anomalies_topic: str
    facts_topic: str
    dead_letter_topic: str
    trigger_s: float
    watermark_delay_s: float
    grace_s: float
    unseen_grace_s: float | None
    max_future_skew_s: float | None
    starting_offsets: str
    max_events_per_trigger: int | None
    metrics_host: str
    metrics_port: int
    txn_buckets: int
    verdict_memory: int
    txn_trigger_s: float
    txn_retention_s: float
    txn_max_writers: int
    output: OutputTopics = field(default_factory=OutputTopics)
    drained_after_s: float = 3600.0
    # Share groups: share.record.lock.duration.ms, share.delivery.count.limit, clock skew.
    share_lock_s: float = 30.0
    share_delivery_limit: int = 5
    share_skew_s: float = 1.0
    state_partitions: int | None = None  # None: auto (``state_partitions_for``)
    txn_partitions: int | None = None  # None: auto (``txn_partitions_for``)
    state_page_slots: int = DEFAULT_PAGE_SLOTS
    source_options: dict[str, str] = field(default_factory=dict)
    producer_config: dict[str, str] = field(default_factory=dict)
    spark_conf: dict[str, str] = field(default_factory=dict)

    @property
    def stage1_checkpoint(self) -> str:
        return self.checkpoint.rstrip("/") + "/keys"

    @property
    def stage2_checkpoint(self) -> str:
        return self.checkpoint.rstrip("/") + "/transactions"

    @property
    def metrics_dir(self) -> str:
        return self.checkpoint.rstrip("/") + "/metrics"

    def kafka_options(self) -> dict[str, str]:
        """Options every Kafka source of the monitor gets: kmon's defaults, the cluster, then
        the ``source.*`` settings (which may override the defaults)."""
        return {**SOURCE_DEFAULTS, "kafka.bootstrap.servers": self.bootstrap_servers,
                **self.source_options}

    def producer(self) -> dict[str, str]:
        """librdkafka settings for the driver's producer (before kmon's own defaults)."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.producer_config}


def load(path: str | os.PathLike[str] | None = None,
         overrides: Iterable[str] | Mapping[str, Any] = (),
         env: Mapping[str, str] | None = None) -> MonitorConfig:
    """The configuration from a YAML file (or ``$KMON_MONITOR_CONFIG``) and overrides."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    path = path or env.get(ENV_CONFIG) or None
    if path:
        values.update(read_file(Path(path)))
    if isinstance(overrides, Mapping):
        values.update(overrides)
    else:
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"override {item!r}: expected key=value")
            values[key.strip()] = value.strip()
    return from_mapping(values, env)


def read_file(path: Path) -> dict[str, Any]:
    """A YAML settings file as flat dotted keys (not yet validated)."""
    import yaml

    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"config file {path}: {e.strerror or e}") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {path}: not YAML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping of settings")
    return _flatten(data)


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested YAML mappings become dotted keys (``topics: {events: x}`` -> topics.events)."""
    out: dict[str, Any] = {}
    for k, v in data.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


_REFERENCE = re.compile(r"\$\{(env|file):([^}]+)\}")


def resolve_references(key: str, value: Any, env: Mapping[str, str]) -> Any:
    """``value`` with each ``${env:NAME}`` / ``${file:PATH}`` replaced; ConfigError naming
    ``key`` if the variable is unset or the file unreadable. Non-strings pass unchanged."""
    if not isinstance(value, str):
        return value

    def one(m: re.Match[str]) -> str:
        kind, name = m.group(1), m.group(2)
        if kind == "env":
            if name not in env:
                raise ConfigError(f"{key}: environment variable {name} is not set")
            return env[name]
        try:
            return Path(name).read_text()
        except OSError as e:
            raise ConfigError(f"{key}: cannot read {name}: {e.strerror or e}") from None

    return _REFERENCE.sub(one, value)


def from_mapping(values: Mapping[str, Any], env: Mapping[str, str] | None = None
                 ) -> MonitorConfig:
    """Validate flat ``values`` (dotted keys) into a ``MonitorConfig``; ConfigError if bad.

    References in values are resolved from ``env`` (default ``os.environ``) and files.
    """
    env = os.environ if env is None else env
    values = {k: resolve_references(k, v, env) for k, v in values.items()}
    settings = {k: d for k, (d, _) in KEYS.items()}
    passthrough: dict[str, dict[str, str]] = {p: {} for p in PREFIXES}
    for key, value in values.items():
        if key in KEYS:
            settings[key] = value
            continue
        prefix = next((p for p in PREFIXES if key.startswith(p) and len(key) > len(p)), None)
        if prefix is None:
            known = ", ".join([*KEYS, *(p + "*" for p in PREFIXES)])
            raise ConfigError(f"unknown setting {key!r} (known: {known})")
        if value is None or isinstance(value, Mapping | list):
            raise ConfigError(f"{key}: expected a single value, got {value!r}")
        passthrough[prefix][key[len(prefix):]] = _text(value)
    for key in REQUIRED:
        if settings[key] is None or not str(settings[key]).strip():
            raise ConfigError(f"{key} is required")
    for key in ("topics.events", "topics.anomalies", "topics.facts", "topics.dead-letters"):
        if not _TOPIC.match(str(settings[key])):
            raise ConfigError(f"{key}: {settings[key]!r} is not a valid Kafka topic name")
    topics = [settings[k] for k in ("topics.events", "topics.anomalies", "topics.facts",
                                    "topics.dead-letters")]
    if len(set(topics)) != len(topics):
        raise ConfigError("topics.*: events, anomalies, facts and dead-letters must differ")
    trigger = _positive("trigger", settings["trigger"])
    grace = _positive("grace", settings["grace"])
    unseen = parse_duration("unseen.grace", settings["unseen.grace"])
    skew = parse_duration("max.future.skew", settings["max.future.skew"])
    starting = str(settings["starting.offsets"]).strip()
    if starting not in ("earliest", "latest") and not starting.startswith("{"):
        raise ConfigError(f"starting.offsets: earliest, latest or a JSON offsets map, got "
                          f"{starting!r}")
    cap = settings["max.events.per.trigger"]
    cluster = "" if settings["cluster"] is None else str(settings["cluster"])
    if not CLUSTER.fullmatch(cluster):
        raise ConfigError(f"cluster: {cluster!r} is not a cluster name: 1 to 63 letters, digits,"
                          " '.', '_' or '-', starting with a letter or digit")
    share_lock, share_limit, share_skew = share_settings(*(settings[k] for k in SHARE_KEYS))
    return MonitorConfig(
        bootstrap_servers=str(settings["kafka.bootstrap.servers"]).strip(),
        checkpoint=str(settings["checkpoint"]).strip(),
        cluster=cluster,
        events_topic=str(settings["topics.events"]),
        anomalies_topic=str(settings["topics.anomalies"]),
        facts_topic=str(settings["topics.facts"]),
        dead_letter_topic=str(settings["topics.dead-letters"]),
        trigger_s=trigger,
        watermark_delay_s=parse_duration("watermark.delay", settings["watermark.delay"]),
        grace_s=grace,
        unseen_grace_s=unseen or None,
        max_future_skew_s=skew or None,
        starting_offsets=starting,
        max_events_per_trigger=None if cap in (None, "") else _int(
            "max.events.per.trigger", cap, 1, 1 << 31),
        metrics_host=str(settings["metrics.host"]),
        metrics_port=_int("metrics.port", settings["metrics.port"], 0, 65535),
        txn_buckets=_int("txn.buckets", settings["txn.buckets"], 1, 4096),
        verdict_memory=_int("verdict.memory", settings["verdict.memory"], 16, 1 << 20),
        txn_trigger_s=_positive("txn.trigger", settings["txn.trigger"]),
        txn_retention_s=parse_duration("txn.retention", settings["txn.retention"]),
        txn_max_writers=_int("txn.max.writers", settings["txn.max.writers"], 16, 1 << 24),
        output=output_topics(settings, {"anomalies": str(settings["topics.anomalies"]),
                                        "facts": str(settings["topics.facts"]),
                                        "dead-letters": str(settings["topics.dead-letters"])}),
        drained_after_s=_positive("metrics.drained.after", settings["metrics.drained.after"]),
        share_lock_s=share_lock,
        share_delivery_limit=share_limit,
        share_skew_s=share_skew,
        state_partitions=_auto_int("state.partitions", settings["state.partitions"], 1, 10_000),
        txn_partitions=_auto_int("txn.partitions", settings["txn.partitions"], 1, 10_000),
        state_page_slots=_page_slots(settings["state.page.slots"]),
        source_options=passthrough["source."],
        producer_config=passthrough["producer."],
        spark_conf=passthrough["spark."],
    )


# Spark's cached Kafka consumer leaves a fetch in flight after a task's reads; the next task's
# seek waits for its answer, which on a partition with nothing newer comes after the broker's
# fetch.max.wait.ms (500 ms by default). Stage 2's facts topic is such a topic: each of its
# tasks waited it out while holding a core stage 1 needed (bench_monitor.py's latency run: the
# facts read took 0.9-1.6 s of task time per stage-2 batch, 0.16-0.31 s with 20 ms).
# Each poll of Spark's consumer also asks the broker for the partition's earliest and latest
# offsets (two ListOffsets requests), and a poll returns at most max.poll.records (500 by
# default): a 200k-event batch made some 400 polls. 10,000 a poll (what one default 1 MB fetch
# holds of small op events) cut the brokers' CPU a batch by about 40% (docs/monitor.md).
SOURCE_DEFAULTS = {"kafka.fetch.max.wait.ms": "20", "kafka.max.poll.records": "10000"}

# state.partitions on a cluster at least: room to add executors before the checkpoint, which
# keeps the count it was created with, has to move.
CLUSTER_STATE_PARTITIONS = 16


def state_partitions_for(cfg: MonitorConfig, master: str, cores: int) -> int:
    """The stateful stages' partition count for a new checkpoint: ``state.partitions``, else
    (auto) an explicit ``spark.sql.shuffle.partitions``, else ``cores`` (Spark's default
    parallelism: the N of local[N], a cluster's executor cores) in local mode and at least
    ``CLUSTER_STATE_PARTITIONS`` on a cluster."""
    if cfg.state_partitions is not None:
        return cfg.state_partitions
    if explicit := cfg.spark_conf.get("sql.shuffle.partitions"):
        return _int("spark.sql.shuffle.partitions", explicit, 1, 10_000)
    if master.startswith("local"):
        return max(1, cores)
    return max(CLUSTER_STATE_PARTITIONS, cores)


def txn_partitions_for(cfg: MonitorConfig, state_partitions: int) -> int:
    """Stage 2's partition count for a new checkpoint: ``txn.partitions``, else (auto) half of
    stage 1's, at least 1. Stage 2 folds a few writer buckets per probe every ``txn.trigger``,
    far less work than stage 1's; with as many tasks it held every core in turns while stage
    1's batches waited (docs/monitor.md, "Where a micro-batch's time goes")."""
    if cfg.txn_partitions is not None:
        return cfg.txn_partitions
    return max(1, state_partitions // 2)


SHARE_KEYS = ("share.lock", "share.delivery.limit", "share.skew")


def share_settings(lock: Any, limit: Any, skew: Any,
                   names: tuple[str, str, str] = SHARE_KEYS) -> tuple[float, int, float]:
    """Share groups' settings validated: the lock (seconds, positive), the delivery limit
    (1..MAX_SHARE_DELIVERY_LIMIT) and the skew (seconds, 0 or more); ConfigError naming the
    bad one by ``names`` (`kmon check` passes its flags' names)."""
    return (_positive(names[0], lock), _int(names[1], limit, 1, MAX_SHARE_DELIVERY_LIMIT),
            parse_duration(names[2], skew))


def _positive(key: str, value: Any) -> float:
    seconds = parse_duration(key, value)
    if seconds <= 0:
        raise ConfigError(f"{key}: must be positive")
    return seconds


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
