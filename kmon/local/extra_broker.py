"""A broker-only node joining the running local cluster: a broker added to a live cluster.

The local cluster is three combined broker+controller nodes (``kmon.local.cluster``). An extra
node here has ``process.roles=broker`` and node id 4..7: it joins the three nodes' static
controller quorum (``controller.quorum.voters``), is formatted with the cluster's id, and
listens on PLAINTEXT only, at ``base + 16 + (id - 4)`` (``Ports.extra_broker``). Its state
lives beside the others, in ``<KMON_HOME>/kafka/broker-<N>/``.

It is for tests of what follows brokers joining and leaving (the probe's broker coverage).
``LocalCluster`` knows nothing of it, so its owner stops it (``stop``); stopped, it stays
registered (fenced) in the metadata, as a decommissioned broker would until unregistered: delete
the topics that have replicas on it before stopping it, or they stay under-replicated.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from kmon.local import procs
from kmon.local.artifacts import installed_kafka
from kmon.local.cluster import (
    HERE,
    MAIN_CLASS,
    STORAGE_TOOL,
    ClusterError,
    LocalCluster,
    cluster_id_arg,
)
from kmon.local.java import find_java
from kmon.local.kafka_config import DEFAULTS, render_properties
from kmon.local.ports import BROKER_IDS

EXTRA_IDS = (4, 5, 6, 7)


@dataclass(frozen=True)
class ExtraBroker:
    cluster: LocalCluster
    node_id: int

    @property
    def dir(self) -> Path:
        return self.cluster.root / f"broker-{self.node_id}"

    @property
    def port(self) -> int:
        return self.cluster.ports.extra_broker(self.node_id)

    @property
    def config(self) -> Path:
        return self.dir / "server.properties"

    def properties(self) -> dict[str, str]:
        ports = self.cluster.ports
        voters = ",".join(f"{n}@127.0.0.1:{ports.controller(n)}" for n in BROKER_IDS)
        listener = f"PLAINTEXT://127.0.0.1:{self.port}"
        return {
            "process.roles": "broker",
            "node.id": str(self.node_id),
            "controller.quorum.voters": voters,
            "listeners": listener,
            "advertised.listeners": listener,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.dir / "data"),
            **DEFAULTS,
            **self.cluster.overrides,
        }

    def pid(self) -> int | None:
        return procs.read_pid(self.dir / "pid", str(self.config))

    def start(self, timeout: float = 120.0) -> int:
        """Write its config, format its storage, start it; wait until it is a live broker."""
        if self.pid() is not None:
            raise ClusterError(f"broker {self.node_id} is already running")
        if procs.port_in_use(self.port):
            raise ClusterError(f"port {self.port} (broker {self.node_id}) is already in use")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config.write_text(render_properties(self.properties()))
        self._format()
        pid = self._spawn()
        self._wait_live(timeout)
        return pid

    def _wait_live(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.node_id not in self.cluster.live_brokers(timeout=5.0):
            if self.pid() is None:
                raise ClusterError(f"broker {self.node_id} exited; end of its log:\n"
                                   + procs.tail(self.dir / "server.log"))
            if time.monotonic() >= deadline:
                raise ClusterError(f"broker {self.node_id} not live after {timeout:.0f}s")
            time.sleep(0.5)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (a clean shutdown moves its leaderships away), then SIGKILL."""
        pid = self.pid()
        if pid is not None:
            procs.terminate(self.dir / "pid", pid, timeout)

    def _java(self) -> list[str]:
        jars = installed_kafka(self.cluster.cache).classpath
        return [str(find_java()), f"-Dlog4j2.configurationFile={HERE / 'log4j2.properties'}",
                f"-Dkafka.logs.dir={self.dir}", "-cp", jars]

    def _format(self) -> None:
        cluster_id = self.cluster.cluster_id
        if cluster_id is None:
            raise ClusterError("the local cluster has no id yet: bring it up first")
        cmd = [*self._java(), STORAGE_TOOL, "format", cluster_id_arg(cluster_id),
               "-c", str(self.config), "--ignore-formatted"]
        done = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=300, check=False)
        if done.returncode != 0:
            raise ClusterError(f"formatting broker {self.node_id}'s storage failed:\n"
                               f"{(done.stdout + done.stderr)[-2000:]}")

    def _spawn(self) -> int:
        java = self._java()
        cmd = [java[0], *self.cluster.jvm_opts, *java[1:], MAIN_CLASS, str(self.config)]
        log_path = self.dir / "server.log"
        with open(log_path, "a") as log:
            log.write(f"\n=== kmon {time.strftime('%Y-%m-%d %H:%M:%S')}: starting broker "
                      f"{self.node_id} (broker only)\n")
        pid = procs.spawn(cmd, log_path, self.dir)
        (self.dir / "pid").write_text(f"{pid}\n")
        return pid


def add_broker(cluster: LocalCluster, node_id: int = 4, timeout: float = 120.0) -> ExtraBroker:
    """Start broker-only node ``node_id`` (4..7) in the running ``cluster``; returns it."""
    if node_id not in EXTRA_IDS:
        raise ValueError(f"extra broker ids are {EXTRA_IDS}, got {node_id}")
    broker = ExtraBroker(cluster, node_id)
    broker.start(timeout)
    return broker
