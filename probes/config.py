"""Probe configuration: defaults < file (YAML) < environment < flags, validated at start.

Every setting has a dotted name, used alike in the file (nested or dotted keys), in
``--set NAME=VALUE`` and, upper-cased with ``.`` and ``-`` as ``_``, after ``KMON_PROBE_`` in
the environment (``rate`` is ``KMON_PROBE_RATE``, ``events.topic`` is
``KMON_PROBE_EVENTS_TOPIC``). A bad value is a ``ConfigError`` naming the setting.

Client settings pass through to librdkafka unchanged (SASL, TLS, anything), by section:

==================  ===========================================================================
``kafka.*``         every client of the probed cluster (``kafka.bootstrap.servers``, ...)
``producer.*``      the probe's producers, over ``kafka.*`` and the safe defaults below
``consumer.*``      the probe's consumers
``admin.*``         the probe's admin clients
``events.kafka.*``  the events cluster; unset: the events go to the probed cluster, with
                    ``kafka.*``
``events.producer.*``  the op events producer, over ``events.kafka.*``
==================  ===========================================================================

In the environment a client setting's dots are underscores (``KMON_PROBE_KAFKA_SASL_MECHANISM``
is ``kafka.sasl.mechanism``; librdkafka names have no underscores). Unknown librdkafka names are
rejected at start by librdkafka itself, and the error names the section. Settings the probe
owns (``transactional.id``, ``group.id``) cannot be overridden.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kmon.env import SettingError

ENV_PREFIX = "KMON_PROBE_"
CLIENT_SECTIONS = ("events.producer", "events.kafka", "kafka", "producer", "consumer", "admin")
RESERVED = frozenset(("transactional.id", "group.id"))  # the probe sets these itself


class ConfigError(SettingError):
    """A bad setting; ``setting`` is its dotted name."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"{setting}: {message}")
        self.setting = setting


# ---------------------------------------------------------------------------------------------
# Value parsers: each takes what a file, the environment or a flag gave and returns the value.


def _bool(x: Any) -> bool:
    if isinstance(x, bool):
        return x
    if isinstance(x, str) and x.strip().lower() in ("true", "yes", "on", "1"):
        return True
    if isinstance(x, str) and x.strip().lower() in ("false", "no", "off", "0"):
        return False
    raise ValueError(f"expected true or false, got {x!r}")


def _int(x: Any) -> int:
    if isinstance(x, bool) or not isinstance(x, int | str):
        raise ValueError(f"expected an integer, got {x!r}")
    try:
        return int(x)
    except ValueError:
        raise ValueError(f"expected an integer, got {x!r}") from None


def _float(x: Any) -> float:
    if isinstance(x, bool) or not isinstance(x, int | float | str):
        raise ValueError(f"expected a number, got {x!r}")
    try:
        return float(x)
    except ValueError:
        raise ValueError(f"expected a number, got {x!r}") from None


def _str(x: Any) -> str:
    if not isinstance(x, str | int | float) or isinstance(x, bool):
        raise ValueError(f"expected a string, got {x!r}")
    return str(x)


def _opt_str(x: Any) -> str | None:
    return None if x is None or x == "" else _str(x)


# Checks: each returns an error message or None.


def _at_least(lo: float) -> Callable[[Any], str | None]:
    return lambda v: None if v >= lo else f"must be at least {lo:g}, got {v:g}"


def _between(lo: float, hi: float) -> Callable[[Any], str | None]:
    return lambda v: None if lo <= v <= hi else f"must be between {lo:g} and {hi:g}, got {v:g}"


def _name(v: str) -> str | None:
    ok = v and all(c.isalnum() or c in "-_" for c in v)
    return None if ok else f"use letters, digits, '-' and '_' only, got {v!r}"


# The issue-23 contract's pattern, shared with the monitor: a Prometheus label value that is
# also safe in file names and alert text.
_CLUSTER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def _cluster(v: str) -> str | None:
    ok = _CLUSTER.fullmatch(v)
    return None if ok else ("use 1-63 letters, digits, '.', '_' and '-', starting with a "
                            f"letter or digit, got {v!r}")


def _one_of(*choices: str) -> Callable[[str], str | None]:
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}, got {v!r}"


def _topic(v: str) -> str | None:
    ok = v and len(v) <= 200 and all(c.isalnum() or c in "-_." for c in v)
    return None if ok else f"not a valid Kafka topic name: {v!r}"


@dataclass(frozen=True)
class Setting:
    name: str
    parse: Callable[[Any], Any]
    default: Any
    help: str
    check: Callable[[Any], str | None] | None = None

    @property
    def attr(self) -> str:
        return self.name.replace(".", "_")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.replace(".", "_").replace("-", "_").upper()


SETTINGS: tuple[Setting, ...] = (
    # identity
    Setting("cluster", _str, "local", "name of the probed cluster: the 'cluster' label of "
            "every probe metric", _cluster),
    Setting("name", _str, None, "probe name (default: host name); op events carry "
            "'<name>.<run>' with a fresh run tag per start", _name),
    Setting("topic_prefix", _str, None, "probe topics are '<prefix>.<n>' (default "
            "'kmon-probe-<name>')", _topic),
    # workload shape
    Setting("processes", _int, 4, "logical processes (each with its own clients)",
            _between(1, 256)),
    Setting("rate", _float, 50.0, "target ops per second, all processes together",
            _at_least(0.1)),
    Setting("duration", _float, 0.0, "seconds to run; 0 runs until SIGTERM/SIGINT",
            _at_least(0)),
    Setting("txn_share", _float, 0.3, "share of ops that are transactions", _between(0, 1)),
    Setting("abort_share", _float, 0.2, "share of transactions aborted on purpose",
            _between(0, 1)),
    Setting("poll_share", _float, 0.5, "share of non-transactional ops that poll (the rest send)",
            _between(0, 1)),
    Setting("txn_max_mops", _int, 4, "most micro-ops in one transaction", _between(1, 64)),
    Setting("crash_share", _float, 0.005, "share of ops that are crash ops (clients torn down "
            "and rebuilt)", _between(0, 1)),
    Setting("subscribe_share", _float, 0.5, "share of consumer mode switches that subscribe "
            "(the rest assign)", _between(0, 1)),
    Setting("mode_switch_ops", _int, 200, "mean ops of a process between consumer mode "
            "switches (assign <-> subscribe)", _at_least(1)),
    Setting("catchup_interval", _float, 30.0, "seconds between catch-up reads (assign every "
            "live key, read to the known end); 0 disables", _at_least(0)),
    Setting("restore_positions", _bool, False, "a subscribe-mode consumer resumes a partition a "
            "rebalance revoked and gave back where it was, not at the committed offset"),
    Setting("start_positions", _str, "probe", "where a consumer starts a partition it is "
            "assigned: 'probe' looks the committed offset up and assigns it (working around two "
            "librdkafka 2.16 races, see clients.start_offsets), 'client' leaves it to librdkafka",
            _one_of("probe", "client")),
    Setting("final_read_timeout", _float, 15.0, "seconds the final catch-up read at shutdown "
            "may take; 0 skips it", _at_least(0)),
    # share groups (KIP-932): docs/share-groups.md
    Setting("share.processes", _int, 0, "share consumers (each a process of its own) in the "
            "probe's share group '<topic_prefix>-share'; 0: no share mode", _between(0, 64)),
    Setting("share.release_share", _float, 0.1, "share of delivered records a share consumer "
            "acknowledges RELEASE (delivered again)", _between(0, 1)),
    Setting("share.reject_share", _float, 0.05, "share of delivered records acknowledged "
            "REJECT (archived); the rest are ACCEPTed", _between(0, 1)),
    Setting("share.stall_share", _float, 0.0, "share of share polls whose records are held "
            "past the acquisition lock before they are acknowledged", _between(0, 1)),
    Setting("share.idle_share", _float, 0.0, "share of share polls after which the consumer "
            "stops polling for longer than the lock, holding nothing", _between(0, 1)),
    Setting("share.lock", _float, 30.0, "seconds of the share group's acquisition lock "
            "(share.record.lock.duration.ms; the monitor's share.lock must match)",
            _between(1, 3600)),
    Setting("share.delivery_limit", _int, 5, "the share group's share.delivery.count.limit "
            "(the monitor's share.delivery.limit must match)", _between(2, 10)),
    Setting("share.configure_group", _bool, True, "set the share group's configs at start "
            "(share.auto.offset.reset=earliest, the lock and the delivery limit above); false: "
            "check that the group already has them"),
    Setting("share.poll_timeout", _float, 1.0, "seconds one share poll waits for records",
            _between(0.01, 60)),
    # keys
    Setting("partitions", _int, 4, "partitions (keys) per probe topic", _between(1, 1024)),
    Setting("live_keys", _int, 8, "keys written at a time; new topics are created as keys "
            "retire", _between(1, 4096)),
    Setting("values_per_key", _int, 10000, "values sent to a key before it retires",
            _at_least(1)),
    Setting("replication_factor", _int, 3, "replication factor of probe topics",
            _between(1, 32)),
    Setting("min_insync_replicas", _int, 2, "min.insync.replicas of probe topics",
            _between(1, 32)),
    Setting("create_topics", _bool, True, "create probe topics; false: only use existing "
            "'<prefix>.<n>' topics (no key rotation beyond them)"),
    Setting("coverage", _bool, True, "keep every broker present leading at least one live "
            "key (preferred leader elections, topics with explicit replica assignments), "
            "checked every metadata refresh; false: only measure it"),
    Setting("delete_retired_topics", _bool, True, "delete a probe topic once all its keys "
            "are retired and drained"),
    Setting("drain_time", _float, 60.0, "seconds a retired topic is still read before it is "
            "dropped", _at_least(0)),
    # timeouts
    Setting("op_timeout", _float, 10.0, "seconds an op may wait for the cluster (delivery, "
            "commit, abort) before it is reported info", _at_least(0.1)),
    Setting("poll_timeout", _float, 0.2, "seconds one poll waits for records",
            _between(0, 60)),
    Setting("max_poll_records", _int, 100, "most records one poll returns", _between(1, 100000)),
    Setting("close_timeout", _float, 5.0, "seconds a client close may take before it is "
            "abandoned", _at_least(0.1)),
    Setting("metadata_refresh", _float, 5.0, "seconds between metadata refreshes for leader "
            "placements", _at_least(0.1)),
    # outputs
    Setting("history", _opt_str, None, "also write the history to this .jsonl file"),
    Setting("events.enabled", _bool, True, "emit op events to the events topic"),
    Setting("events.topic", _str, "kmon-events", "the op events topic", _topic),
    Setting("events.partitions", _int, 6, "partitions of the events topic if the probe "
            "creates it", _between(1, 10000)),
    Setting("events.replication_factor", _int, 3, "replication factor of the events topic if "
            "the probe creates it", _between(1, 32)),
    Setting("events.create_topic", _bool, True, "create the events topic when it is missing"),
    Setting("events.tick_interval", _float, 1.0, "seconds between clock ticks to every events "
            "partition (the monitor decides absence on the lowest partition's clock); 0: none",
            _between(0, 3600)),
    Setting("events.buffer", _int, 100000, "op events buffered for the events producer; "
            "beyond, events are dropped (counted), never blocking the workload",
            _between(1, 10_000_000)),
    Setting("metrics.port", _int, 9465, "Prometheus metrics port; 0 disables",
            _between(0, 65535)),
    Setting("metrics.addr", _str, "0.0.0.0", "address the metrics server binds"),
    Setting("seed", _opt_str, None, "random seed (reproducible op choices)"),
)
BY_NAME = {s.name: s for s in SETTINGS}
BY_ENV = {s.env: s for s in SETTINGS}


@dataclass
class ProbeConfig:
    """Validated settings; attribute names are the setting names with ``.`` as ``_``."""

    values: dict[str, Any]
    clients: dict[str, dict[str, Any]] = field(default_factory=dict)
    run: str = field(default_factory=lambda: secrets.token_hex(3))

    def __getattr__(self, attr: str) -> Any:
        values = self.__dict__.get("values", {})
        for s in SETTINGS:
            if s.attr == attr:
                return values[s.name]
        raise AttributeError(attr)

    @property
    def probe_id(self) -> str:
        """What op events carry as ``probe``: the name and this start's run tag."""
        return f"{self.name}.{self.run}"

    @property
    def bootstrap(self) -> str | None:
        return self.clients["kafka"].get("bootstrap.servers")

    def client_settings(self, section: str) -> dict[str, Any]:
        """The user's librdkafka settings for a client kind, merged over their base section.

        ``producer``/``consumer``/``admin``: ``kafka.*`` then the section. ``events``: the
        events cluster (``events.kafka.*``, or ``kafka.*`` when it names no bootstrap
        servers), then ``events.producer.*``.
        """
        if section == "events":
            base = self.clients["events.kafka"]
            if "bootstrap.servers" not in base:
                base = {**self.clients["kafka"], **base}
            return {**base, **self.clients["events.producer"]}
        return {**self.clients["kafka"], **self.clients[section]}


# ---------------------------------------------------------------------------------------------
# Loading


def load(
    file: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> ProbeConfig:
    """Settings from ``defaults`` (the caller's, over the built-in ones), the YAML ``file``,
    ``env`` (default os.environ), ``overrides``.

    Raises ConfigError naming the first bad setting.
    """
    raw: dict[str, Any] = {_known(k): v for k, v in (defaults or {}).items()}
    if file is not None:
        raw.update(read_file(file))
    raw.update(from_env(os.environ if env is None else env))
    for name, value in (overrides or {}).items():
        raw[_known(name)] = value
    return build(raw)


def read_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A YAML (or JSON) settings file as dotted names -> values."""
    import yaml

    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text())
    except OSError as e:
        raise ConfigError("config", f"cannot read {p}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError("config", f"{p} is not valid YAML: {e}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError("config", f"{p} must hold a mapping of settings")
    out: dict[str, Any] = {}
    _flatten(doc, "", out)
    return {_known(k): v for k, v in out.items()}


def _flatten(doc: Mapping[Any, Any], prefix: str, out: dict[str, Any]) -> None:
    for k, v in doc.items():
        name = f"{prefix}{k}"
        # client sections keep dotted librdkafka names as leaves; nested maps inside them are
        # flattened too (``kafka: {sasl: {mechanism: PLAIN}}``).
        if isinstance(v, dict):
            _flatten(v, name + ".", out)
        else:
            out[name] = v


def _known(name: str) -> str:
    """``name`` if it is a setting or a client setting; ConfigError otherwise."""
    name = str(name)
    if name in BY_NAME:
        return name
    section = _client_section(name)
    if section is not None:
        prop = name[len(section) + 1:]
        if not prop:
            raise ConfigError(name, "missing the librdkafka property name")
        if prop in RESERVED:
            raise ConfigError(name, f"{prop} is set by the probe and cannot be overridden")
        return name
    raise ConfigError(name, "unknown setting (see `kmon probe --help-settings`)")


def _client_section(name: str) -> str | None:
    for section in CLIENT_SECTIONS:  # longest first: events.kafka before kafka
        if name.startswith(section + "."):
            return section
    return None


def from_env(env: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for var, value in env.items():
        if not var.startswith(ENV_PREFIX):
            continue
        if var in BY_ENV:
            out[BY_ENV[var].name] = value
            continue
        rest = var[len(ENV_PREFIX):].lower()
        for section in CLIENT_SECTIONS:
            head = section.replace(".", "_") + "_"
            if rest.startswith(head) and len(rest) > len(head):
                out[_known(section + "." + rest[len(head):].replace("_", "."))] = value
                break
        else:
            raise ConfigError(var, "unknown setting in the environment")
    return out


def build(raw: Mapping[str, Any]) -> ProbeConfig:
    values: dict[str, Any] = {}
    for s in SETTINGS:
        if s.name in raw:
            try:
                v = s.parse(raw[s.name])
            except ValueError as e:
                raise ConfigError(s.name, str(e)) from None
        else:
            v = s.default
        if v is not None and s.check is not None and (msg := s.check(v)):
            raise ConfigError(s.name, msg)
        values[s.name] = v
    clients: dict[str, dict[str, Any]] = {section: {} for section in CLIENT_SECTIONS}
    for name, v in raw.items():
        section = _client_section(name)
        if section is not None and name not in BY_NAME:
            clients[section][name[len(section) + 1:]] = v
    if values["name"] is None:
        host = "".join(c if c.isalnum() or c in "-_" else "-" for c in socket.gethostname())
        values["name"] = host or "probe"
    if values["topic_prefix"] is None:
        values["topic_prefix"] = f"kmon-probe-{values['name']}"
    cfg = ProbeConfig(values, clients)
    _cross_checks(cfg)
    return cfg


def _cross_checks(cfg: ProbeConfig) -> None:
    if "bootstrap.servers" not in cfg.clients["kafka"]:
        raise ConfigError("kafka.bootstrap.servers", "required: the cluster to probe "
                          "(--bootstrap-servers, or KMON_PROBE_KAFKA_BOOTSTRAP_SERVERS)")
    if cfg.min_insync_replicas > cfg.replication_factor:
        raise ConfigError("min_insync_replicas", f"{cfg.min_insync_replicas} exceeds "
                          f"replication_factor {cfg.replication_factor}")
    if cfg.topic_prefix == cfg.events_topic or cfg.events_topic.startswith(cfg.topic_prefix + "."):
        raise ConfigError("events.topic", f"{cfg.events_topic!r} collides with the probe "
                          f"topics '{cfg.topic_prefix}.<n>'")
    if cfg.share_release_share + cfg.share_reject_share > 1:
        raise ConfigError("share.reject_share", "share.release_share and share.reject_share "
                          "add up to more than 1")
    if not cfg.events_enabled and cfg.history is None:
        raise ConfigError("events.enabled", "with events disabled, set history: the ops "
                          "would go nowhere")


def help_text() -> str:
    """Every setting with its environment variable, default and meaning."""
    lines = []
    for s in SETTINGS:
        default = "(derived)" if s.default is None and s.name in ("name", "topic_prefix") else (
            repr(s.default))
        lines.append(f"{s.name}  [{s.env}]  default {default}\n    {s.help}")
    lines.append("kafka.* producer.* consumer.* admin.* events.kafka.* events.producer.*\n"
                 "    librdkafka settings, passed through (env: KMON_PROBE_KAFKA_SASL_MECHANISM"
                 " is kafka.sasl.mechanism)")
    return "\n".join(lines)
