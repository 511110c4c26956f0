"""The loopback port layout of one local stack, all derived from one base port.

    base + 0..2     Kafka client listeners of brokers 1..3 (PLAINTEXT)
    base + 3..5     Kafka PROXIED listeners of brokers 1..3: what Toxiproxy forwards to; they
                    advertise the proxies below, so a client that bootstraps through a proxy
                    gets metadata that keeps it behind the proxies
    base + 6..8     Toxiproxy proxies in front of brokers 1..3 (``proxied_bootstrap``)
    base + 9        Toxiproxy's HTTP API
    base + 10..12   KRaft controller listeners of nodes 1..3
    base + 13..15   Kafka SASL_SSL listeners of brokers 1..3 (SCRAM-SHA-512 over TLS, with the
                    local CA; ``sasl_ssl_bootstrap``), for clients set up as in production
    base + 16..19   PLAINTEXT listeners of broker-only nodes 4..7 joining the running cluster
                    (``kmon.local.extra_broker``)
    base + 20       Prometheus
    base + 21       Alertmanager
    base + 22       a tansu broker's own listener when it runs behind Toxiproxy (``tansu_direct``)
    base + 23       a tansu broker (``kmon.local.tansu``: a third-party broker under judgement),
                    or the Toxiproxy proxy ``tansu`` in front of it, which it then advertises
    base + 24       the Kafka protocol proxy's bootstrap (Kroxylicious with kmon's fault filters,
                    ``kafka_proxy_bootstrap``; ``kmon.local.kafka_proxy``)
    base + 25..28   the Kafka protocol proxy's port per broker, node ids 1..4
    base + 29       the Kafka protocol proxy's fault control endpoint (HTTP)
    base + 30..43   reserved: metrics endpoints of probes and the monitor (slots 0..13)
    base + 44..45   Spark standalone master: its RPC port (``spark://``) and web UI
                    (``kmon.local.spark_standalone``)
    base + 46..49   Spark standalone workers 1..2: RPC port, web UI port

The test suite runs its own stack at ``base + 50`` (see ``kmon.env.PORT_SPAN``).
"""

from __future__ import annotations

from dataclasses import dataclass

BROKER_IDS: tuple[int, ...] = (1, 2, 3)
SPARK_WORKER_IDS: tuple[int, ...] = (1, 2)
METRICS_SLOTS = 14


@dataclass(frozen=True)
class Ports:
    base: int

    def broker(self, node_id: int) -> int:
        return self.base + node_id - 1

    def proxied_listener(self, node_id: int) -> int:
        """The broker's PROXIED listener (upstream of its Toxiproxy proxy)."""
        return self.base + 3 + node_id - 1

    def proxy(self, node_id: int) -> int:
        """Toxiproxy's proxy in front of broker ``node_id`` (advertised by PROXIED)."""
        return self.base + 6 + node_id - 1

    @property
    def toxiproxy_api(self) -> int:
        return self.base + 9

    def controller(self, node_id: int) -> int:
        return self.base + 10 + node_id - 1

    def sasl_ssl(self, node_id: int) -> int:
        """The broker's SASL_SSL listener."""
        return self.base + 13 + node_id - 1

    def extra_broker(self, node_id: int) -> int:
        """The PLAINTEXT listener of broker-only node ``node_id`` (4..7)."""
        if not 4 <= node_id <= 7:
            raise ValueError(f"extra broker ids are 4..7, got {node_id}")
        return self.base + 16 + node_id - 4

    @property
    def prometheus(self) -> int:
        return self.base + 20

    @property
    def alertmanager(self) -> int:
        return self.base + 21

    @property
    def kafka_proxy(self) -> int:
        """The Kafka protocol proxy's bootstrap port; node ``n`` is behind ``+ n``."""
        return self.base + 24

    @property
    def kafka_proxy_control(self) -> int:
        return self.base + 29

    def kafka_proxy_ports(self) -> dict[str, int]:
        """Every port the Kafka protocol proxy binds (brokers' ports as they appear)."""
        ports = {"Kafka proxy bootstrap": self.kafka_proxy,
                 "Kafka proxy control": self.kafka_proxy_control}
        for n in BROKER_IDS:
            ports[f"Kafka proxy of broker {n}"] = self.kafka_proxy + n
        return ports

    @property
    def kafka_proxy_bootstrap(self) -> str:
        """``bootstrap.servers`` through the Kafka protocol proxy (kmon's fault filters)."""
        return f"127.0.0.1:{self.kafka_proxy}"

    def metrics(self, slot: int) -> int:
        """Port of the ``slot``-th metrics endpoint (probes, monitor), slot 0..13."""
        if not 0 <= slot < METRICS_SLOTS:
            raise ValueError(f"metrics slot {slot} out of range 0..{METRICS_SLOTS - 1}")
        return self.base + 30 + slot

    @property
    def tansu(self) -> int:
        """Where clients reach tansu: its listener, or the Toxiproxy proxy in front of it."""
        return self.base + 23

    @property
    def tansu_direct(self) -> int:
        """tansu's own listener when it runs behind Toxiproxy (upstream of proxy ``tansu``)."""
        return self.base + 22

    @property
    def spark_master(self) -> int:
        return self.base + 44

    @property
    def spark_master_ui(self) -> int:
        return self.base + 45

    def spark_worker(self, n: int) -> int:
        """RPC port of Spark standalone worker ``n`` (1..2)."""
        if n not in SPARK_WORKER_IDS:
            raise ValueError(f"Spark worker ids are 1..2, got {n}")
        return self.base + 46 + 2 * (n - 1)

    def spark_worker_ui(self, n: int) -> int:
        return self.spark_worker(n) + 1

    def spark_ports(self) -> dict[str, int]:
        """Every port the Spark standalone cluster binds, by a name for error messages."""
        ports = {"Spark master": self.spark_master, "Spark master UI": self.spark_master_ui}
        for n in SPARK_WORKER_IDS:
            ports[f"Spark worker {n}"] = self.spark_worker(n)
            ports[f"Spark worker {n} UI"] = self.spark_worker_ui(n)
        return ports

    def kafka_ports(self) -> dict[str, int]:
        """Every port the Kafka cluster binds, by a name for error messages."""
        ports = {}
        for n in BROKER_IDS:
            ports[f"broker {n} listener"] = self.broker(n)
            ports[f"controller {n} listener"] = self.controller(n)
            ports[f"broker {n} proxied listener"] = self.proxied_listener(n)
            ports[f"broker {n} SASL_SSL listener"] = self.sasl_ssl(n)
        return ports

    def toxiproxy_ports(self) -> dict[str, int]:
        """Every port the local Toxiproxy binds, by a name for error messages."""
        ports = {f"proxy of broker {n}": self.proxy(n) for n in BROKER_IDS}
        ports["Toxiproxy API"] = self.toxiproxy_api
        return ports

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.broker(n)}" for n in BROKER_IDS)

    @property
    def sasl_ssl_bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.sasl_ssl(n)}" for n in BROKER_IDS)

    @property
    def proxied_bootstrap(self) -> str:
        """``bootstrap.servers`` through Toxiproxy: every connection stays behind a proxy."""
        return ",".join(f"127.0.0.1:{self.proxy(n)}" for n in BROKER_IDS)
