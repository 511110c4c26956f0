"""The whole local stack: Kafka cluster, probe, monitor and Prometheus, as `kmon run` runs it.

The cluster and Prometheus are the harness's own servers; the probe and the monitor run as
child processes (``python -m kmon.cli probe|monitor``) with their output in log files, so each
can be stopped with SIGTERM the way an operator would, and a crash of one is reported rather
than taking the others down. Prometheus scrapes them as jobs ``kmon-probe`` and
``kmon-monitor`` (the names the alert rules select) with the generated rules loaded.

Ports: the probe's metrics on ``metrics(0)``, the monitor's on ``metrics(1)`` (see
``kmon.local.ports``). State under ``<KMON_HOME>/run/``.

The stack never starts or stops the cluster: it only needs its bootstrap servers, so the
children can run against any running cluster (``kmon run``'s, or the test suite's).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from kmon import env
from kmon.local.alertmanager import LocalAlertmanager, Routing
from kmon.local.ports import Ports
from kmon.local.prometheus import LocalPrometheus

EVENTS_TOPIC = "kmon-events"
PROBE_SLOT, MONITOR_SLOT = 0, 1


@dataclass
class Child:
    """A stack component run as its own process, its output in ``log``."""

    name: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        out = open(self.log, "ab")  # noqa: SIM115 - the child owns it from here
        try:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            out.close()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM (a clean shutdown: flush, final reads), then SIGKILL after ``timeout``."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return self.proc.returncode


class Cluster(Protocol):
    """What the stack needs of a cluster (``LocalCluster`` has it)."""

    @property
    def bootstrap(self) -> str: ...


@dataclass
class StackOptions:
    probe: bool = True
    monitor: bool = True
    prometheus: bool = True
    probe_args: list[str] = field(default_factory=list)
    monitor_args: list[str] = field(default_factory=list)
    events_topic: str = EVENTS_TOPIC
    scrape_interval: str = "5s"
    # The watched cluster's name: the `cluster` label of every metric and scrape target.
    cluster: str = "local"
    # Alert rule files Prometheus loads (default: the generated read_committed rules).
    rule_files: list[Path] | None = None
    # Where an Alertmanager started with the stack sends notifications (None: no Alertmanager).
    alert_webhook: str | None = None
    alert_routing: Routing | None = None


def _kmon(*args: str) -> list[str]:
    return [sys.executable, "-m", "kmon.cli", *args]


class LocalStack:
    def __init__(self, cluster: Cluster, options: StackOptions | None = None,
                 home: str | os.PathLike[str] | None = None,
                 port_base: int | None = None) -> None:
        self.cluster = cluster
        self.options = options or StackOptions()
        self.home = env.kmon_home(home)
        self.ports = Ports(env.port_base(port_base))
        self.root = self.home / "run"
        self.children: list[Child] = []
        self.prometheus: LocalPrometheus | None = None
        self.alertmanager: LocalAlertmanager | None = None

    # -- what runs ----------------------------------------------------------------------------
    def probe_child(self) -> Child:
        argv = _kmon("probe", "--bootstrap-servers", self.cluster.bootstrap,
                     "--events-topic", self.options.events_topic,
                     "--metrics-port", str(self.ports.metrics(PROBE_SLOT)),
                     "--history", str(self.root / "history.jsonl"),
                     "--set", f"cluster={self.options.cluster}",
                     *self.options.probe_args)
        return Child("probe", argv, self.root / "probe.log")

    def monitor_child(self, slot: int = MONITOR_SLOT) -> Child:
        """The monitor serving its metrics on ``metrics(slot)``: another slot is another
        scrape target (``instance``), as a restarted pod is."""
        argv = _kmon("monitor", "--bootstrap-servers", self.cluster.bootstrap,
                     "--events-topic", self.options.events_topic,
                     "--metrics-port", str(self.ports.metrics(slot)),
                     "--checkpoint", str(self.root / "checkpoint"),
                     "--set", f"cluster={self.options.cluster}",
                     *self.options.monitor_args)
        return Child("monitor", argv, self.root / "monitor.log")

    def scrape_targets(self) -> dict[str, list[str]]:
        targets = {}
        if self.options.probe:
            targets["kmon-probe"] = [f"127.0.0.1:{self.ports.metrics(PROBE_SLOT)}"]
        if self.options.monitor:
            targets["kmon-monitor"] = [f"127.0.0.1:{self.ports.metrics(MONITOR_SLOT)}"]
        return targets

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self, say: Callable[[str], None] = print) -> None:
        o = self.options
        if o.alert_webhook is not None:
            self.alertmanager = LocalAlertmanager(o.alert_webhook, self.home, self.ports.base,
                                                  o.alert_routing)
            self.alertmanager.up()
            say(f"alertmanager: {self.alertmanager.url} -> {o.alert_webhook}")
        if o.prometheus:
            from kmon.dashboards.generate import rules_file

            self.prometheus = LocalPrometheus(
                self.home, self.ports.base, targets=self.scrape_targets(),
                rule_files=o.rule_files or [rules_file()], scrape_interval=o.scrape_interval,
                cluster=o.cluster,
                alertmanagers=[self.alertmanager.address] if self.alertmanager else [])
            self.prometheus.up()
            say(f"prometheus: {self.prometheus.url} (alert rules loaded)")
        wanted: Sequence[tuple[bool, Callable[[], Child]]] = (
            (self.options.monitor, self.monitor_child), (self.options.probe, self.probe_child))
        for enabled, make in wanted:
            if enabled:
                child = make()
                child.start()
                self.children.append(child)
                say(f"{child.name}: pid {child.proc.pid}, log {child.log}")

    def dead_children(self) -> list[Child]:
        return [c for c in self.children if not c.running()]

    def stop(self, say: Callable[[str], None] = print) -> None:
        """Probe first (its final reads and events need the cluster), then the monitor."""
        for child in sorted(self.children, key=lambda c: c.name != "probe"):
            code = child.stop()
            say(f"{child.name}: stopped (exit {code})")
        self.children.clear()
        if self.prometheus is not None:
            self.prometheus.down()
            say("prometheus: stopped")
        if self.alertmanager is not None:
            self.alertmanager.down()
            say("alertmanager: stopped")
