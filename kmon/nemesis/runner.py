"""Running faults: start, hold, stop, and wait for the cluster to be whole, with every step
timestamped in the fault's record. This is the interface a detection-matrix runner drives::

    nemesis = Nemesis(cluster, proxy)
    record = nemesis.run(Pause(cluster, Target(topic="t", partition=0)), duration=20)
    # record.started_at / stopped_at / healthy_at: time.time() seconds

    with nemesis.active(NetworkFault(proxy, "latency", latency_ms=300)) as record:
        ...  # the fault is in effect here; it is undone on leaving, whatever happens

Ctrl-C or SIGTERM during ``run`` (with ``interruptible``, as the CLI does) stops the fault
before the exception leaves; the undo itself cannot be interrupted.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from kmon.nemesis import health
from kmon.nemesis.base import Fault, FaultError, FaultRecord, check_duration, shielded

if TYPE_CHECKING:
    from kmon.local.cluster import LocalCluster
    from kmon.local.toxiproxy import LocalToxiproxy

log = logging.getLogger("kmon.nemesis")


class Nemesis:
    """Runs faults on one local cluster (and its Toxiproxy), keeping every record."""

    def __init__(
        self,
        cluster: LocalCluster,
        proxy: LocalToxiproxy | None = None,
        heal_timeout: float = 180.0,
    ) -> None:
        self.cluster = cluster
        self.proxy = proxy
        self.heal_timeout = heal_timeout
        self.records: list[FaultRecord] = []
        self._active: list[Fault] = []

    def start(self, fault: Fault) -> FaultRecord:
        """Start ``fault`` (undoing what took effect if the start fails)."""
        self.records.append(fault.record)
        self._active.append(fault)
        try:
            record = fault.start()
        except BaseException:
            with shielded():
                self._stop(fault)
            raise
        log.info("%s started: %s", fault.name, record.info)
        return record

    def stop(self, fault: Fault, wait_healthy: bool = True) -> FaultRecord:
        """Stop ``fault``, then (by default) wait until the cluster is healthy again."""
        with shielded():
            self._stop(fault)
            if wait_healthy:
                health.wait_healthy(self.cluster, self.proxy, self.heal_timeout)
                fault.record.healthy_at = time.time()
        log.info("%s stopped", fault.name)
        return fault.record

    def _stop(self, fault: Fault) -> None:
        try:
            fault.stop()
        finally:
            if fault in self._active:
                self._active.remove(fault)

    def run(self, fault: Fault, duration: float, wait_healthy: bool = True) -> FaultRecord:
        """Start ``fault``, keep it for ``duration`` seconds, stop it (always)."""
        check_duration("duration", duration)
        with self.active(fault, wait_healthy=wait_healthy) as record:
            time.sleep(duration)
        return record

    @contextlib.contextmanager
    def active(self, fault: Fault, wait_healthy: bool = True) -> Iterator[FaultRecord]:
        record = self.start(fault)
        try:
            yield record
        finally:
            self.stop(fault, wait_healthy=wait_healthy)

    def stop_all(self) -> list[str]:
        """Stop every fault still active (newest first); returns the errors, if any."""
        errors = []
        with shielded():
            for fault in reversed(list(self._active)):
                try:
                    self._stop(fault)
                except Exception as exc:  # keep undoing the others
                    errors.append(f"{fault.name}: {exc}")
        return errors

    def heal(self) -> list[str]:
        """Stop active faults, then mend whatever is still broken (see ``health.heal``)."""
        errors = self.stop_all()
        done = health.heal(self.cluster, self.proxy)
        if errors:
            raise FaultError("; ".join(errors))
        return done
