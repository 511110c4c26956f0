"""The probe's own Prometheus metrics, declared once (the probe section of docs/metrics.md).

Label sets are small and bounded: ``f`` and ``type`` range over the op model's names, ``kind``
over assigned/revoked/lost, ``code`` over librdkafka error names. Every metric also carries
``cluster`` (the probed cluster's name): prometheus_client has no constant labels, so each
metric declares it and is bound to its value once, here (``_Bound``); callers never pass it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

import kmon

DEFAULT_PORT = 9465
CLUSTER = "cluster"
# The ops whose latest success is exported: the ones that touch the data path.
SUCCESS_FS = ("send", "poll", "txn")

# Op latencies run from a few ms (an ok send) to the op timeout (10 s by default) and beyond.
_OP_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(frozen=True)
class ProbeIdentity:
    """What ``kmon_probe_info`` says about this probe, and the cluster every metric names."""

    cluster: str = "local"
    probe: str = ""
    isolation: str = "read_committed"  # the consumers' isolation.level
    version: str = kmon.__version__


class _Bound:
    """A labelled metric with ``cluster`` already bound: ``labels(f=...)`` adds the rest."""

    def __init__(self, metric: Any, cluster: str) -> None:
        self._metric = metric
        self._cluster = cluster

    def labels(self, **labels: str) -> Any:
        return self._metric.labels(cluster=self._cluster, **labels)


class ProbeMetrics:
    """Every probe metric, registered in ``registry`` (a fresh one per test).

    Built at the probe's start: that time is ``kmon_probe_start_timestamp_seconds`` and the
    initial last success of every f, so an alert on its age fires when none ever succeeds.
    """

    def __init__(self, registry: CollectorRegistry | None = None,
                 identity: ProbeIdentity | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.identity = identity if identity is not None else ProbeIdentity()
        self.started_at = time.time()
        self._declare_ops()
        self._declare_events()
        self._declare_state()
        self._declare_identity()

    def _labelled(self, kind: type, name: str, doc: str, labels: list[str], **kw: Any) -> _Bound:
        metric = kind(name, doc, [CLUSTER, *labels], registry=self.registry, **kw)
        return _Bound(metric, self.identity.cluster)

    def _single(self, kind: type, name: str, doc: str) -> Any:
        """A metric with no labels but ``cluster``: its one child."""
        return self._labelled(kind, name, doc, []).labels()

    def _declare_ops(self) -> None:
        self.ops = self._labelled(Counter, "kmon_probe_ops",
                                  "Completed ops by function and outcome.", ["f", "type"])
        self.op_duration = self._labelled(Histogram, "kmon_probe_op_duration_seconds",
                                          "Op invoke to completion.", ["f"], buckets=_OP_BUCKETS)
        self.last_success = self._labelled(
            Gauge, "kmon_probe_last_success_timestamp_seconds",
            "Unix time of the latest ok op of f (the probe's start time until one).", ["f"])
        for f in SUCCESS_FS:
            self.last_success.labels(f=f).set(self.started_at)

    def _declare_events(self) -> None:
        self.events_emitted = self._single(Counter, "kmon_probe_events_emitted",
                                           "Op events handed to the events topic producer.")
        self.events_dropped = self._single(
            Counter, "kmon_probe_events_dropped",
            "Op events dropped: the bounded buffer was full (or delivery failed for good).")

    def _declare_state(self) -> None:
        self.rebalances = self._labelled(Counter, "kmon_probe_rebalances",
                                         "Consumer rebalance callbacks.", ["kind"])
        self.client_errors = self._labelled(Counter, "kmon_probe_client_errors",
                                            "Client errors by librdkafka error name.", ["code"])
        self.keys_live = self._single(Gauge, "kmon_probe_keys_live",
                                      "Keys (topic-partitions) currently written and read.")
        self.up = self._single(Gauge, "kmon_probe_up", "1 while the workload loop runs.")
        self.brokers = self._labelled(
            Gauge, "kmon_probe_brokers",
            "Brokers in the metadata (present) and those leading a live key (covered).",
            ["state"])

    def _declare_identity(self) -> None:
        ident = self.identity
        self.info = self._labelled(Gauge, "kmon_probe_info",
                                   "1, labelled with what this probe is and how it reads.",
                                   ["probe", "isolation", "version"])
        self.info.labels(probe=ident.probe, isolation=ident.isolation,
                         version=ident.version).set(1)
        self.start_time = self._single(Gauge, "kmon_probe_start_timestamp_seconds",
                                       "Unix time this probe process started.")
        self.start_time.set(self.started_at)

    def completed(self, f: str, type_: str, duration_s: float, at_s: float,
                  read_records: bool = True) -> None:
        """Count one completed op; ``at_s`` (unix seconds) is its completion time.

        A poll is a success only when it returned records (``read_records``): a poll of an
        unreachable cluster completes ok with nothing, and must not hide that the probe is blind.
        """
        self.ops.labels(f=f, type=type_).inc()
        self.op_duration.labels(f=f).observe(duration_s)
        if type_ == "ok" and f in SUCCESS_FS and (read_records or f != "poll"):
            self.last_success.labels(f=f).set(at_s)

    def coverage(self, present: int, covered: int) -> None:
        self.brokers.labels(state="present").set(present)
        self.brokers.labels(state="covered").set(covered)

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        """Expose the registry over HTTP (a daemon thread); port 0 serves nothing.

        Raises OSError when it cannot listen (the port in use, ...)."""
        if port:
            start_http_server(port, addr=addr, registry=self.registry)
