"""Admin-API helpers the faults share: clients pinned to a running broker, topic configs,
offsets, and the undo journal for config changes.

A fault that pauses or kills brokers must not ask them anything: librdkafka sends a request
to any broker it is connected to, and a paused broker takes it and never answers. So every
admin request here goes to one broker the caller names as running.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    OffsetSpec,
    ResourceType,
)

from kmon.local import procs
from kmon.nemesis.base import FaultError

if TYPE_CHECKING:
    from kmon.local.cluster import LocalCluster

TIMEOUT = 15.0


def admin_on(cluster: LocalCluster, node: int) -> AdminClient:
    """A new AdminClient that only ever talks to broker ``node``, for the caller to use in a
    ``with`` block (see ``LocalCluster.admin``)."""
    return cluster.node_admin(node)


def running_admin(cluster: LocalCluster, avoid: tuple[int, ...] = ()) -> AdminClient:
    for status in cluster.status():
        if status.state == "running" and status.node_id not in avoid:
            return admin_on(cluster, status.node_id)
    raise FaultError("no running broker to ask")


# Seconds a restarted broker may take to serve: under chaos's load (average ~100 on 2 cores)
# one took 162 s from its kill (47 s before its JVM logged a line).
BROKER_START_TIMEOUT = 300.0


def start_broker(cluster: LocalCluster, node: int, timeout: float = 90.0) -> float:
    """Start a stopped broker on its data, once its ports are free; returns the seconds spent
    waiting for them.

    A port of a killed broker can stay taken for up to a minute: clients reconnecting to it
    sweep through the ephemeral ports, and on a port base inside Linux's ephemeral range
    (32768-60999) one of them may get the broker's own port as its source and connect to
    itself; the closed connection then sits in TIME_WAIT on that port. Kafka cannot bind it
    until that ends. (A port base below 32768 avoids this; see docs/nemesis.md.)
    """
    ports = [cluster.ports.broker(node), cluster.ports.controller(node)]
    if cluster.proxied_listener:
        ports.append(cluster.ports.proxied_listener(node))
    started = time.monotonic()
    while any(procs.port_in_use(p) for p in ports):
        if time.monotonic() - started >= timeout:
            raise FaultError(f"broker {node}'s ports {ports} still taken after {timeout:.0f}s")
        time.sleep(0.5)
    waited = time.monotonic() - started
    cluster.start(node, wait=True, timeout=BROKER_START_TIMEOUT)
    return waited


def topic_configs(admin: AdminClient, topic: str, names: list[str]) -> dict[str, str | None]:
    """The topic's own value of each setting, None where it follows the broker default."""
    resource = ConfigResource(ResourceType.TOPIC, topic)
    try:
        entries = admin.describe_configs([resource], request_timeout=TIMEOUT)[resource].result(
            TIMEOUT + 5
        )
    except KafkaException as exc:
        raise FaultError(f"DescribeConfigs {topic}: {exc}") from None
    out: dict[str, str | None] = {}
    for name in names:
        entry = entries.get(name)
        is_own = entry is not None and entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        out[name] = entry.value if is_own and entry is not None else None
    return out


def set_topic_configs(admin: AdminClient, topic: str, values: dict[str, str | None]) -> None:
    """Set each setting on the topic; None removes the topic's own value (back to default)."""
    entries = [
        ConfigEntry(
            name, value if value is not None else "",
            incremental_operation=(
                AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
            ),
        )
        for name, value in values.items()
    ]
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    try:
        admin.incremental_alter_configs([resource], request_timeout=TIMEOUT)[resource].result(
            TIMEOUT + 5
        )
    except KafkaException as exc:
        raise FaultError(f"IncrementalAlterConfigs {topic} {values}: {exc}") from None


# What a partition answers for a moment while its leadership moves (after a broker restart);
# a leader just elected also refuses ListOffsets until its high watermark caught up
# (OFFSET_NOT_AVAILABLE, seen by kmon nemesis chaos right after a rolling restart).
MOVING = ("UNKNOWN_LEADER_EPOCH", "FENCED_LEADER_EPOCH", "NOT_LEADER", "LEADER_NOT_AVAILABLE",
          "OFFSET_NOT_AVAILABLE")


def moving(exc: BaseException) -> bool:
    """Whether ``exc`` is one of the answers a partition gives while its leadership moves."""
    return any(m in str(exc) for m in MOVING)


def refresh_metadata(admin: AdminClient, topic: str) -> None:
    """Ask for the topic's metadata: the client retried ListOffsets with the leader epoch it
    had cached and got FENCED_LEADER_EPOCH for 15 s on end (kmon nemesis chaos, after a
    leader's crash and restart); a metadata answer brings the new epoch."""
    with contextlib.suppress(KafkaException):
        admin.list_topics(topic, timeout=5)


def list_offsets(admin: AdminClient, tps: list[tuple[str, int]], spec: OffsetSpec,
                 within: float = TIMEOUT) -> dict[tuple[str, int], int]:
    """Each ``(topic, partition)``'s offset at ``spec``, asked again for up to ``within``
    seconds while leadership moves (with fresh metadata: a cached leader epoch stays fenced
    until then; kmon nemesis chaos saw UNKNOWN_LEADER_EPOCH right after a rolling restart and
    FENCED_LEADER_EPOCH for 15 s after a leader's crash) or while a leader just elected
    answers no offset yet (-1001)."""
    deadline = time.monotonic() + within
    while True:
        futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in tps},
                                     request_timeout=TIMEOUT)
        got: dict[tuple[str, int], int] | None
        try:
            got = {(tp.topic, tp.partition): int(f.result(TIMEOUT + 5).offset)
                   for tp, f in futures.items()}
        except KafkaException as exc:
            if not moving(exc) or time.monotonic() >= deadline:
                raise FaultError(f"ListOffsets: {exc}") from None
            for topic in {t for t, _ in tps}:
                refresh_metadata(admin, topic)
            got = None
        if got is not None and all(o >= 0 for o in got.values()):
            return got
        if time.monotonic() >= deadline:
            raise FaultError(f"ListOffsets: no offset yet: {got}")
        time.sleep(0.2 if got is not None else 0.5)


def high_watermark(admin: AdminClient, topic: str, partition: int) -> int:
    """The partition's high watermark (``list_offsets``)."""
    return list_offsets(admin, [(topic, partition)], OffsetSpec.latest())[(topic, partition)]


class Journal:
    """Undo entries on disk (``<KMON_HOME>/nemesis/undo/``) for changes that outlive a process:
    if the nemesis dies mid-fault, ``kmon nemesis heal`` applies what is left.
    """

    def __init__(self, home: Path) -> None:
        self.root = Path(home) / "nemesis" / "undo"

    def add(self, entry: dict[str, Any]) -> str:
        self.root.mkdir(parents=True, exist_ok=True)
        entry_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
        path = self.root / f"{entry_id}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(entry, indent=1))
        tmp.replace(path)
        return entry_id

    def remove(self, entry_id: str) -> None:
        (self.root / f"{entry_id}.json").unlink(missing_ok=True)

    def pending(self) -> dict[str, dict[str, Any]]:
        if not self.root.is_dir():
            return {}
        return {p.stem: json.loads(p.read_text()) for p in sorted(self.root.glob("*.json"))}
