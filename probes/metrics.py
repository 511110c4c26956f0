"""The probe's own Prometheus metrics, declared once (the probe section of docs/metrics.md).

Label sets are small and bounded: ``f`` and ``type`` range over the op model's names, ``kind``
over assigned/revoked/lost, ``code`` over librdkafka error names.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

DEFAULT_PORT = 9465

# Op latencies run from a few ms (an ok send) to the op timeout (10 s by default) and beyond.
_OP_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ProbeMetrics:
    """Every probe metric, registered in ``registry`` (a fresh one per test)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.ops = Counter(
            "kmon_probe_ops", "Completed ops by function and outcome.", ["f", "type"],
            registry=r,
        )
        self.op_duration = Histogram(
            "kmon_probe_op_duration_seconds", "Op invoke to completion.", ["f"],
            buckets=_OP_BUCKETS, registry=r,
        )
        self.events_emitted = Counter(
            "kmon_probe_events_emitted", "Op events handed to the events topic producer.",
            registry=r,
        )
        self.events_dropped = Counter(
            "kmon_probe_events_dropped",
            "Op events dropped: the bounded buffer was full (or delivery failed for good).",
            registry=r,
        )
        self.rebalances = Counter(
            "kmon_probe_rebalances", "Consumer rebalance callbacks.", ["kind"], registry=r,
        )
        self.client_errors = Counter(
            "kmon_probe_client_errors", "Client errors by librdkafka error name.", ["code"],
            registry=r,
        )
        self.keys_live = Gauge(
            "kmon_probe_keys_live", "Keys (topic-partitions) currently written and read.",
            registry=r,
        )
        self.up = Gauge("kmon_probe_up", "1 while the workload loop runs.", registry=r)

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        """Expose the registry over HTTP (a daemon thread); port 0 serves nothing."""
        if port:
            start_http_server(port, addr=addr, registry=self.registry)
