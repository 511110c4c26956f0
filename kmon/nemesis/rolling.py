"""A rolling restart of every broker, and the active KRaft controller.

A rolling restart is what every upgrade and config change does: each broker in turn is
stopped and started again on its data, the next one only once the cluster is whole (every
ISR full), as an operator's tooling waits. Here the stop is a SIGKILL (the harsher case: no
controlled shutdown, no leadership moved away first).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from kmon.local.ports import BROKER_IDS
from kmon.nemesis import health
from kmon.nemesis.base import Fault, FaultError
from kmon.nemesis.kafka import start_broker

if TYPE_CHECKING:
    from kmon.local.cluster import LocalCluster


def active_controller(cluster: LocalCluster, timeout: float = 30.0) -> int:
    """The KRaft quorum's leader, from the newest ``quorum-state`` among running nodes, waited
    for up to ``timeout`` s: right after a restart or an election no node may know it yet.

    (DescribeCluster answers a random broker as "controller" under KRaft, not the leader.)"""
    deadline = time.monotonic() + timeout
    while (leader := _known_leader(cluster)) is None:
        if time.monotonic() >= deadline:
            raise FaultError(f"no running node knew the quorum's leader within {timeout:g}s")
        time.sleep(0.5)
    return leader


def _known_leader(cluster: LocalCluster) -> int | None:
    best: tuple[int, int] | None = None
    for node in BROKER_IDS:
        if cluster.state(node) != "running":
            continue
        path = cluster.data_dir(node) / "__cluster_metadata-0" / "quorum-state"
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        leader, epoch = int(state.get("leaderId", -1)), int(state.get("leaderEpoch", -1))
        if leader in BROKER_IDS and (best is None or epoch > best[1]):
            best = (leader, epoch)
    return None if best is None else best[0]


class RollingRestart(Fault):
    """SIGKILL and restart each broker in turn, waiting until the cluster is whole between."""

    kind = "rolling-restart"

    def __init__(self, cluster: LocalCluster, heal_timeout: float = 180.0) -> None:
        self.cluster = cluster
        self.heal_timeout = heal_timeout
        self.down: int | None = None
        super().__init__()

    def params(self) -> dict[str, Any]:
        return {"nodes": list(BROKER_IDS)}

    def _start(self) -> None:
        for node in BROKER_IDS:
            self.down = node
            self.record.info.setdefault("killed_pids", []).append(self.cluster.kill(node))
            self.mark(f"broker {node} killed")
            start_broker(self.cluster, node)
            self.down = None
            self.mark(f"broker {node} restarted")
            health.wait_healthy(self.cluster, None, self.heal_timeout)
            self.mark("cluster whole")

    def _stop(self) -> None:
        if self.down is not None and self.cluster.state(self.down) == "stopped":
            start_broker(self.cluster, self.down)  # a start interrupted half-way
            self.down = None
