"""Process faults on one broker: pause (SIGSTOP, undone by SIGCONT) and crash (SIGKILL, undone
by a start with the same config and data dir).

With safe client settings (acks=all, idempotence, read_committed) neither may cost an
acknowledged write: these are the no-false-alarm rows of the detection matrix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kmon.nemesis.base import Fault
from kmon.nemesis.kafka import start_broker
from kmon.nemesis.targets import Target

if TYPE_CHECKING:
    from kmon.local.cluster import LocalCluster


class Pause(Fault):
    """SIGSTOP one broker (a node, or the leader of a topic-partition); SIGCONT to undo.

    A paused broker keeps its sockets open but answers nothing; after
    ``broker.session.timeout.ms`` (6 s locally) the controller fences it and its partitions
    elect new leaders.
    """

    kind = "pause"

    def __init__(self, cluster: LocalCluster, target: Target) -> None:
        self.cluster = cluster
        self.target = target
        self.node: int | None = None
        super().__init__()

    def params(self) -> dict[str, Any]:
        return {"target": self.target.as_json()}

    def _start(self) -> None:
        self.node = self.target.resolve(self.cluster)
        self.record.info["node"] = self.node
        self.record.info["pid"] = self.cluster.pause(self.node)
        self.mark(f"broker {self.node} paused")

    def _stop(self) -> None:
        if self.node is not None and self.cluster.state(self.node) == "paused":
            self.cluster.resume(self.node)
            self.mark(f"broker {self.node} resumed")


class Crash(Fault):
    """SIGKILL one broker (no shutdown, no flush); undone by starting it again on its data.

    ``restart=False`` leaves it down at stop (the runner's heal, or a later fault, starts it).
    """

    kind = "crash"

    def __init__(self, cluster: LocalCluster, target: Target, restart: bool = True) -> None:
        self.cluster = cluster
        self.target = target
        self.restart = bool(restart)
        self.node: int | None = None
        super().__init__()

    def params(self) -> dict[str, Any]:
        return {"target": self.target.as_json(), "restart": self.restart}

    def _start(self) -> None:
        self.node = self.target.resolve(self.cluster)
        self.record.info["node"] = self.node
        self.record.info["killed_pid"] = self.cluster.kill(self.node)
        self.mark(f"broker {self.node} killed")

    def _stop(self) -> None:
        if self.node is None or not self.restart:
            return
        if self.cluster.state(self.node) == "stopped":
            waited = start_broker(self.cluster, self.node)
            if waited > 1.0:
                self.mark(f"waited {waited:.0f}s for broker {self.node}'s ports to be free")
            self.record.info["new_pid"] = self.cluster.pid(self.node)
            self.mark(f"broker {self.node} restarted and registered")
