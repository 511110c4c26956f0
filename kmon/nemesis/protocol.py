"""Faults of a misbehaving Kafka-compatible broker, played by the Kafka protocol proxy.

Real Kafka does not acknowledge a write at the wrong offset or leave records out of a fetch
answer on demand; the findings of Jepsen's analyses of Kafka-compatible brokers (Bufstream,
``/work/shared/reference/004``) and of KAFKA-17754 show that brokers do. The Kafka protocol
proxy (``kmon.local.kafka_proxy``) sits between the probe's real clients and the real brokers
and, while one of these faults is on, changes requests and answers as that broker did:

=====================  ======================================================================
fault                  what the proxy does (only on topics under ``prefix``)
=====================  ======================================================================
spurious-offset        a produce answer says base offset 0; the records are stored elsewhere
server-side-filtering  a record batch, chosen when first fetched, is left out of every fetch
                       answer (readers skip acknowledged writes)
torn-transaction       one partition's produce inside a transaction is acknowledged (at an
                       offset readers pass that holds no value) but never forwarded; the
                       transaction then commits (a tear whose transaction aborts is no
                       fault: it is handed back, and not counted)
aborted-read           a read_committed fetch is sent as read_uncommitted
duplicate              a plain produce is sent twice with its idempotence (producer id,
                       sequence) stripped
lost-offset-commit     a consumer group's offset commit is acknowledged and never forwarded
                       (the group keeps its previous offsets: the next consumer re-reads)
=====================  ======================================================================

Each is bounded: ``rate`` of the eligible produces, batches or fetches, at most ``max_count``
injections, switched off at ``stop`` (and by the proxy itself after ``bound`` seconds). What
a fault did stays done until ``release`` (or ``hold`` seconds): a hidden batch must stay hidden
through the probe's final read for its loss to be a loss.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kmon.env import SettingError
from kmon.local.kafka_proxy import FAULTS, KafkaProxyError, check_fault
from kmon.nemesis.base import Fault, FaultError

if TYPE_CHECKING:
    from kmon.local.cluster import LocalCluster
    from kmon.local.kafka_proxy import LocalKafkaProxy

# How the proxy ends the log line of an injection it handed back (FaultFilter.NOT_COUNTED).
NOT_COUNTED = " (not counted)"

__all__ = ["FAULTS", "ProtocolFault", "kafka_proxy_of"]


class ProtocolFault(Fault):
    kind = "proxy"

    def __init__(self, proxy: LocalKafkaProxy, fault: str, prefix: str = "", rate: float = 1.0,
                 max_count: int = 0, bound: float = 300.0, hold: float = 600.0) -> None:
        check_fault(fault)
        if not 0.0 < rate <= 1.0:
            raise SettingError(f"rate {rate}: must be within (0, 1]")
        self.proxy, self.fault = proxy, fault
        self.prefix, self.rate, self.max_count = prefix, rate, max_count
        self.bound, self.hold = bound, hold
        super().__init__()

    @property
    def name(self) -> str:
        return f"proxy-{self.fault}"

    def params(self) -> dict[str, Any]:
        return {"fault": self.fault, "prefix": self.prefix, "rate": self.rate,
                "max_count": self.max_count, "bound": self.bound, "hold": self.hold}

    def _start(self) -> None:
        if not self.proxy.is_up():
            raise FaultError("the Kafka protocol proxy is not running: `kmon nemesis proxy up`")
        self.proxy.activate(self.fault, self.prefix, self.rate, self.max_count,
                            seconds=self.bound, hold=self.hold)
        self.mark(f"{self.fault} on in the Kafka proxy")

    def _stop(self) -> None:
        try:
            self.proxy.deactivate(self.fault)
            # This activation's lines: the log spans earlier ones, and they name their topics.
            done = counted([line for line in self.proxy.injections(self.fault)
                            if not line.startswith(f"{self.fault} o") and self.prefix in line])
            active = self.proxy.activations().get(self.fault)
        except KafkaProxyError as exc:
            raise FaultError(str(exc)) from None
        self.record.info["injected"] = active.injected if active else len(done)
        self.record.info["injections"] = [line.split(": ", 1)[-1] for line in done[:5]]
        self.mark(f"{self.fault} off after {self.record.info['injected']} injections")

    def release(self) -> None:
        """Undo what is held (hidden batches shown again): after the row's final read."""
        self.proxy.reset()


def counted(lines: list[str]) -> list[str]:
    """The injection lines of ``lines`` that still count: an injection the proxy handed back
    (a torn write whose transaction aborted is no fault) is logged again with a reason and
    ``NOT_COUNTED``, and both lines are left out."""
    out: list[str] = []
    for line in lines:
        if not line.endswith(NOT_COUNTED):
            out.append(line)
            continue
        injection = line.rsplit("; ", 1)[0]
        if injection in out:
            out.remove(injection)
    return out


def kafka_proxy_of(cluster: LocalCluster) -> LocalKafkaProxy:
    """The Kafka protocol proxy in front of ``cluster`` (same home, ports and cache)."""
    from kmon.local.kafka_proxy import LocalKafkaProxy

    return LocalKafkaProxy(home=cluster.home, port_base=cluster.ports.base, cache=cluster.cache)
