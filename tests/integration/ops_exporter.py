"""A stand-in for the monitor's and the probe's /metrics, read from docs/metrics.md.

Until the real probe and monitor run here, the dashboards' queries are tested against this: every
metric of the contract, with exactly its declared type and labels, served by prometheus_client,
one endpoint per component, values moving so rates and quantiles have data.
"""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from kmon.checker.anomaly import ANOMALY_TYPES

CONTRACT = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"

# A few values per label: enough for by()/topic/partition selections to have several series.
LABEL_VALUES: dict[str, tuple[str, ...]] = {
    "cluster": ("ops-test",),
    "broker": ("1", "2"),
    "probe": ("ops.1",),
    "isolation": ("read_committed",),
    "version": ("0.0.0",),
    "anomaly": ANOMALY_TYPES,
    "topic": ("probe-a", "probe-b"),
    "partition": ("0", "1", "2"),
    "operator": ("key-fold", "txn-stage"),
    "reason": ("decode", "schema"),
    "f": ("send", "poll", "txn", "assign", "subscribe", "crash", "share-poll", "ack"),
    "type": ("ok", "fail", "info"),
    "kind": ("assigned", "revoked", "lost"),
    "code": ("_MSG_TIMED_OUT", "NOT_LEADER_OR_FOLLOWER"),
    "state": ("present", "covered"),
}
_ROW = re.compile(r"^\|\s*`(?P<name>[a-z_]+)`\s*\|\s*(?P<type>\w+)\s*\|(?P<labels>[^|]*)\|")


@dataclass(frozen=True)
class MetricSpec:
    component: str  # "monitor" or "probe"
    name: str
    type: str
    labels: tuple[str, ...]


def contract(path: Path = CONTRACT) -> list[MetricSpec]:
    """Every metric row of docs/metrics.md, with the section (component) it is declared in."""
    out, component = [], ""
    for line in path.read_text().splitlines():
        if line.startswith("## "):
            component = line[3:].split()[0].lower()
        elif m := _ROW.match(line):
            labels = tuple(re.findall(r"`([a-z_]+)`", m["labels"]))
            out.append(MetricSpec(component, m["name"], m["type"], labels))
    return out


class Component:
    """One component's registry, every metric in it, and a thread that keeps them moving."""

    def __init__(self, specs: list[MetricSpec]) -> None:
        self.registry = CollectorRegistry()
        self.specs = specs
        self.metrics = []
        for s in specs:
            # prometheus_client adds _total to counters itself.
            name = s.name.removesuffix("_total") if s.type == "counter" else s.name
            kind = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}[s.type]
            m = kind(name, s.name, list(s.labels), registry=self.registry)
            self.metrics.append((s, m))
        self.tick()

    def children(self, spec: MetricSpec, metric: Any) -> Iterator[Any]:
        if not spec.labels:
            yield metric
            return
        for values in product(*(LABEL_VALUES[label] for label in spec.labels)):
            yield metric.labels(*values)

    def tick(self) -> None:
        rnd = random.Random()
        for spec, metric in self.metrics:
            for child in self.children(spec, metric):
                if spec.type == "counter":
                    child.inc(rnd.randint(1, 5))
                elif spec.type == "histogram":
                    child.observe(rnd.expovariate(20))
                elif spec.name.endswith("_timestamp_seconds"):
                    # a verdict, batch, success or start just now: the anomaly alerts fire,
                    # so the firing-alerts panel has data too
                    child.set_to_current_time()
                elif spec.name in ("kmon_probe_up", "kmon_probe_info"):
                    child.set(1)
                else:
                    child.set(rnd.randint(1, 100))


@contextmanager
def serve(interval: float = 0.5) -> Iterator[dict[str, int]]:
    """Serve both components on free ports; yields ``{"monitor": port, "probe": port}``."""
    specs = contract()
    components = {c: Component([s for s in specs if s.component == c])
                  for c in ("monitor", "probe")}
    ports, servers = {}, []
    for name, comp in components.items():
        server, _thread = start_http_server(0, addr="127.0.0.1", registry=comp.registry)
        servers.append(server)
        ports[name] = server.server_address[1]
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(interval):
            for comp in components.values():
                comp.tick()

    ticker = threading.Thread(target=run, daemon=True)
    ticker.start()
    try:
        yield ports
    finally:
        stop.set()
        ticker.join()
        for server in servers:
            server.shutdown()
            server.server_close()
