"""Which broker a fault hits: a node by id, or whichever node leads a topic-partition when the
fault starts (resolved then, and recorded in the fault's ``info``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kmon.env import SettingError
from kmon.local.ports import BROKER_IDS
from kmon.nemesis.base import FaultError

if TYPE_CHECKING:
    from kmon.local.cluster import LocalCluster


def check_node(node: object, name: str = "node") -> int:
    if isinstance(node, bool) or not isinstance(node, int) or node not in BROKER_IDS:
        raise SettingError(
            f"{name}: no broker {node!r}; brokers are {', '.join(map(str, BROKER_IDS))}"
        )
    return node


def check_topic(topic: object, name: str = "topic") -> str:
    if not isinstance(topic, str) or not topic.strip() or len(topic) > 249:
        raise SettingError(f"{name}: expected a topic name, got {topic!r}")
    return topic


def check_partition(partition: object, name: str = "partition") -> int:
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise SettingError(f"{name}: expected a partition number >= 0, got {partition!r}")
    return partition


@dataclass(frozen=True)
class Target:
    """A node id, or the leader of ``topic``/``partition`` (exactly one of the two)."""

    node: int | None = None
    topic: str | None = None
    partition: int = 0

    def __post_init__(self) -> None:
        if (self.node is None) == (self.topic is None):
            raise SettingError("target: give either a node or a topic (whose leader is hit)")
        if self.node is not None:
            check_node(self.node)
        else:
            check_topic(self.topic)
            check_partition(self.partition)

    @classmethod
    def of(cls, node: int | None = None, topic: str | None = None, partition: int = 0) -> Target:
        return cls(node=node, topic=topic, partition=partition)

    def resolve(self, cluster: LocalCluster) -> int:
        if self.node is not None:
            return self.node
        assert self.topic is not None
        state = cluster.describe_topic(self.topic).get(self.partition)
        if state is None:
            raise FaultError(f"topic {self.topic} has no partition {self.partition}")
        if state.leader is None:
            raise FaultError(f"{self.topic}/{self.partition} has no leader right now")
        return state.leader

    def as_json(self) -> dict[str, Any]:
        if self.node is not None:
            return {"node": self.node}
        return {"topic": self.topic, "partition": self.partition}


def busiest_partition(
    cluster: LocalCluster, topic_prefix: str, sample: float = 1.0
) -> tuple[str, int]:
    """The partition of the topics starting with ``topic_prefix`` (the probe's) that took the
    most records over ``sample`` seconds (then: the longest log). For faults on "a probe
    partition" chosen at run time.
    """
    import time

    from kmon.nemesis.kafka import TIMEOUT, high_watermark, running_admin

    with running_admin(cluster) as admin:
        metadata = admin.list_topics(timeout=TIMEOUT)
        parts = [
            (name, p)
            for name, topic in sorted(metadata.topics.items()) if name.startswith(topic_prefix)
            for p in sorted(topic.partitions)
        ]
        if not parts:
            raise FaultError(f"no topic starts with {topic_prefix!r}")
        first = {tp: high_watermark(admin, *tp) for tp in parts}
        time.sleep(sample)
        return max(parts, key=lambda tp: (high_watermark(admin, *tp) - first[tp], first[tp]))
