"""Probe settings that are unsafe on purpose, as presets the probe is started with.

A preset is a set of ``kmon probe`` settings (``--set NAME=VALUE``; client settings under
``producer.*`` / ``consumer.*`` pass through to librdkafka). Some need the probe's clients
behind the Toxiproxy proxies, so that a network fault reaches them, or behind the Kafka
protocol proxy (``kmon.local.kafka_proxy``), so that a misbehaving-broker fault does: those
add ``kafka.bootstrap.servers`` pointing at the proxy when given the cluster.

``kmon nemesis preset NAME`` prints one as ``--set`` arguments or as a YAML settings file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kmon.env import SettingError

if TYPE_CHECKING:
    from kmon.local.cluster import LocalCluster


@dataclass(frozen=True)
class Preset:
    name: str
    summary: str
    # Probe settings; each carries the reason it is set, as in the probe's own defaults.
    settings: dict[str, str] = field(default_factory=dict)
    proxied: bool = False  # the probe's clients bootstrap through the Toxiproxy proxies
    kafka_proxied: bool = False  # ... or through the Kafka protocol proxy
    tansu: bool = False  # ... or talk to the local tansu broker (its op events still go to Kafka)
    pairs_with: tuple[str, ...] = ()  # the faults that make this preset bite

    def probe_settings(self, cluster: LocalCluster | None = None) -> dict[str, str]:
        out = dict(self.settings)
        if self.proxied and cluster is not None:
            out["kafka.bootstrap.servers"] = cluster.proxied_bootstrap
        if self.kafka_proxied and cluster is not None:
            out["kafka.bootstrap.servers"] = cluster.ports.kafka_proxy_bootstrap
        if self.tansu and cluster is not None:
            out["kafka.bootstrap.servers"] = f"127.0.0.1:{cluster.ports.tansu}"
        return out

    def client_settings(self, section: str) -> dict[str, str]:
        """The librdkafka settings of one client section (``producer``, ``consumer``)."""
        prefix = section + "."
        return {k[len(prefix):]: v for k, v in self.settings.items() if k.startswith(prefix)}


# The share groups' acquisition lock in the presets with share consumers (the local cluster
# allows locks this short): stalls past it take seconds. The matrix's monitor and `kmon check`
# are told the same (``share.lock``).
SHARE_LOCK_S = 3.0
_SHARE_CONSUMERS = {
    "share.processes": "2",  # two share consumers in the probe's share group (KIP-932)
    "share.lock": f"{SHARE_LOCK_S:g}",
    "share.release_share": "0.2",  # redeliveries on purpose (default 0.1) ...
    "share.reject_share": "0.1",  # ... and archived records (default 0.05)
}

PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset(
        "safe",
        "the probe's own safe settings (acks=all, idempotence, read_committed), direct",
        pairs_with=("pause", "crash"),
    ),
    Preset(
        "proxied",
        "the probe's safe settings, every client behind the Toxiproxy proxies",
        proxied=True,
        pairs_with=("net-latency", "net-timeout", "net-reset", "net-bandwidth", "net-slicer",
                    "net-down"),
    ),
    Preset(
        "kafka-proxied",
        "the probe's safe settings, every client behind the Kafka protocol proxy",
        kafka_proxied=True,
        pairs_with=("proxy-spurious-offset", "proxy-server-side-filtering",
                    "proxy-torn-transaction", "proxy-duplicate"),
    ),
    Preset(
        "kafka-proxied-aborts",
        "read_committed consumers behind the Kafka protocol proxy while many transactions "
        "abort: what a broker that serves read_committed fetches as read_uncommitted exposes",
        settings={
            "txn_share": "0.5",  # half the ops are transactions (default 0.3) ...
            "abort_share": "0.5",  # ... and half of those abort (default 0.2)
        },
        kafka_proxied=True,
        pairs_with=("proxy-aborted-read",),
    ),
    Preset(
        "kafka-proxied-restarts",
        "consumers behind the Kafka protocol proxy that start over often: what a broker "
        "that loses offset commits exposes",
        settings={
            # A lost commit shows only when a consumer starts from the group's offsets while
            # it is lost. At the default (200) a 6 s fault saw no start in one CI run of
            # 2026-11-29; at 15 the matrix's 30 ops/s switch about twice a second.
            "mode_switch_ops": "15",
        },
        kafka_proxied=True,
        pairs_with=("proxy-lost-offset-commit",),
    ),
    Preset(
        "idempotence-off",
        "retries without idempotence, behind the proxies: a produce whose answer is lost "
        "(net-timeout) is sent again and may be appended twice",
        settings={
            "producer.enable.idempotence": "false",  # the point: no sequence numbers, no dedup
            "producer.acks": "all",  # still durable: a duplicate, not a loss, is what we want
            # Retry (librdkafka's default, explicit): each retry may append another copy.
            "producer.retries": "2147483647",
            # Give up on an answer after 1 s (default 30 s), so a stalled answer is retried
            # several times within one op.
            "producer.request.timeout.ms": "1000",
            "producer.retry.backoff.ms": "100",  # retry promptly (librdkafka's default, explicit)
            "txn_share": "0",  # transactions need idempotence: plain sends only
        },
        proxied=True,
        pairs_with=("net-timeout",),
    ),
    Preset(
        "read-uncommitted",
        "consumers read records of open and aborted transactions while many transactions abort",
        settings={
            "consumer.isolation.level": "read_uncommitted",  # the point: aborted data is visible
            "txn_share": "0.5",  # half the ops are transactions (default 0.3) ...
            "abort_share": "0.5",  # ... and half of those abort (default 0.2)
        },
        pairs_with=("none",),
    ),
    Preset(
        "lagging-readers",
        "safe clients, but consumers fall ever further behind the writes, so acknowledged "
        "records wait unread in the log (what DeleteRecords or a retention bug then removes)",
        settings={
            "poll_share": "0.2",  # four sends for every poll (default: one for one) ...
            "max_poll_records": "1",  # ... and a poll returns one record: readers fall behind
            # No catch-up reads: one would read the whole backlog and leave nothing unread.
            "catchup_interval": "0",
        },
        pairs_with=("delete-records",),
    ),
    Preset(
        "share",
        "the probe's safe settings plus two share consumers in one share group, acknowledging "
        "a seeded mix and now and then holding a poll's records past the 3 s lock",
        settings={**_SHARE_CONSUMERS, "share.stall_share": "0.05"},
        pairs_with=("none",),
    ),
    Preset(
        "share-lagging",
        "lagging readers, and share consumers that hold every other poll's records past the "
        "lock, so acknowledged records wait in the log undelivered (what DeleteRecords then "
        "removes)",
        settings={
            **_SHARE_CONSUMERS,
            "share.stall_share": "0.5",  # the point: half the polls wait out the lock
            "poll_share": "0.2",  # the lagging readers' settings (lagging-readers)
            "max_poll_records": "1",
            "catchup_interval": "0",
        },
        pairs_with=("delete-records",),
    ),
    Preset(
        "unclean",
        "acks=1 writes to 2-replica topics that may elect an out-of-sync leader",
        settings={
            "producer.acks": "1",  # the point: acknowledged by the leader alone
            "producer.enable.idempotence": "false",  # librdkafka's idempotence requires acks=all
            # Two replicas, so the third node keeps the controller quorum while the
            # unclean-election fault pauses one replica and kills the other.
            "replication_factor": "2",
            # The ISR may shrink to the leader alone and the high watermark follows it, so
            # consumers read records that the election then takes away.
            "min_insync_replicas": "1",
            "txn_share": "0",  # transactions need acks=all and idempotence: plain sends only
        },
        pairs_with=("unclean-election",),
    ),
    Preset(
        "tansu",
        "the probe's safe settings against one tansu broker (`kmon cluster up --broker tansu`)",
        settings={
            "replication_factor": "1",  # one node: nothing to replicate to
            "min_insync_replicas": "1",
            # tansu 0.6.0 creates a topic with its default partition count when given explicit
            # replica assignments, so the probe would wait for partitions that never come
            # (docs/brokers/tansu.md)
            "coverage": "false",
        },
        tansu=True,
        pairs_with=("tansu-pause", "tansu-crash"),
    ),
)}


def get(name: str) -> Preset:
    if name not in PRESETS:
        raise SettingError(f"unknown preset {name!r}: one of {', '.join(PRESETS)}")
    return PRESETS[name]


def check_librdkafka(preset: Preset) -> None:
    """Let librdkafka vet the preset's client settings now; the error names the setting."""
    from confluent_kafka import Consumer, KafkaException, Producer

    base: dict[str, Any] = {"bootstrap.servers": "127.0.0.1:1"}
    for section, make, extra in (
        ("producer", Producer, {}),
        ("consumer", Consumer, {"group.id": "kmon-preset-check"}),
    ):
        settings = preset.client_settings(section)
        # One at a time, so the error names the culprit; then all together (conflicts).
        for key, value in [*settings.items(), ("*", None)]:
            config = {**base, **extra, **({key: value} if key != "*" else settings)}
            try:
                client = make(config)
            except (KafkaException, ValueError, TypeError) as exc:
                what = f"{section}.{key}={value}" if key != "*" else f"{section} settings"
                raise SettingError(f"preset {preset.name}: {what}: {exc}") from None
            if isinstance(client, Consumer):
                client.close()


def render(preset: Preset, cluster: LocalCluster | None = None, fmt: str = "args") -> str:
    """``args``: ``--set NAME=VALUE`` words for ``kmon probe``; ``yaml``: a settings file."""
    settings = preset.probe_settings(cluster)
    if fmt == "args":
        return " ".join(f"--set {k}={v}" for k, v in settings.items())
    if fmt == "yaml":
        import yaml

        head = f"# kmon nemesis preset {preset.name}: {preset.summary}\n"
        return head + (yaml.safe_dump(settings, sort_keys=False) if settings else "{}\n")
    raise SettingError(f"preset format {fmt!r}: args or yaml")
