"""Committed offsets lost for real: an unclean election of the ``__consumer_offsets`` partition
that holds a consumer group's offsets.

A group's offsets live in one partition of ``__consumer_offsets`` (Kafka's
``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``), and the leader of that
partition is the group's coordinator. ``UncleanElection`` needs a partition with two replicas
(the third node keeps the controller quorum), and ``__consumer_offsets`` has three, so the
partition is first moved to two of them (AlterPartitionReassignments, through the small Java
tool ``kmon/local/Reassign.java``: confluent-kafka has no such call) and moved back at stop.
Then, as in ``UncleanElection``: the follower paused and dropped from the ISR, the commits the
leader acknowledges alone for ``lag`` seconds, the leader killed and the follower elected
uncleanly. The new coordinator loads the group from the shorter log: its offsets go back to
before the lag, and consumers assigned the group's partitions start there (the checker's
``offset-commit-reread``, or ``offset-commit-lost`` for partitions first committed in the lag).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kmon.local.artifacts import installed_kafka
from kmon.local.java import find_java
from kmon.local.ports import BROKER_IDS
from kmon.nemesis.base import FaultError
from kmon.nemesis.unclean import UncleanElection

if TYPE_CHECKING:
    from kmon.local.cluster import LocalCluster

OFFSETS_TOPIC = "__consumer_offsets"
REASSIGN_SRC = Path(__file__).resolve().parent.parent / "local" / "Reassign.java"


def java_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    for unit in s.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition(group: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of ``group`` (Kafka's ``Utils.abs``: MIN_VALUE -> 0)."""
    h = java_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


class OffsetsUncleanElection(UncleanElection):
    """Lose ``group``'s recent offset commits through an unclean election of its partition."""

    kind = "offsets-unclean-election"

    def __init__(self, cluster: LocalCluster, group: str, lag: float = 6.0,
                 election_timeout: float = 60.0) -> None:
        partitions = len(cluster.describe_topic(OFFSETS_TOPIC))
        if not partitions:
            raise FaultError(f"no {OFFSETS_TOPIC} yet: no group has committed an offset")
        self.group = group
        self._replicas: list[int] | None = None
        super().__init__(cluster, topic=OFFSETS_TOPIC,
                         partition=offsets_partition(group, partitions), lag=lag,
                         election_timeout=election_timeout)

    def params(self) -> dict[str, Any]:
        return {**super().params(), "group": self.group}

    def _start(self) -> None:
        assert self.partition is not None
        state = self.cluster.describe_topic(OFFSETS_TOPIC)[self.partition]
        if len(state.replicas) > 2:
            leader = state.leader if state.leader is not None else state.replicas[0]
            kept = [leader, next(r for r in state.replicas if r != leader)]
            self._replicas = list(state.replicas)
            self._reassign(kept)
            self.mark(f"{OFFSETS_TOPIC}/{self.partition} moved to replicas {kept} "
                      f"(group {self.group})")
        super()._start()

    def _stop(self) -> None:
        super()._stop()
        if self._replicas is not None:
            self._reassign(self._replicas)
            self.mark(f"{OFFSETS_TOPIC}/{self.partition} back on replicas {self._replicas}")
            self._replicas = None

    def _reassign(self, replicas: list[int]) -> None:
        up = [n for n in BROKER_IDS if self.cluster.state(n) == "running"]
        bootstrap = ",".join(self.cluster.broker_address(n) for n in up)
        cmd = [str(find_java()), "-cp", installed_kafka(self.cluster.cache).classpath,
               str(REASSIGN_SRC), bootstrap, OFFSETS_TOPIC, str(self.partition),
               ",".join(map(str, replicas))]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise FaultError(f"reassigning {OFFSETS_TOPIC}/{self.partition} to {replicas}: "
                             f"{done.stderr.strip()[-500:]}")
