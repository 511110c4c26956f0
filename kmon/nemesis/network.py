"""Network faults between clients and brokers, through the local Toxiproxy.

Only clients that bootstrap through the proxies (``LocalCluster.proxied_bootstrap``) are hit;
replication and the controller quorum never pass a proxy. Each fault puts one toxic (or a
disabled proxy, for ``down``) on the proxies of the chosen brokers and takes it off at stop.

=============  ===========================================================================
kind           effect on every connection through the proxy
=============  ===========================================================================
latency        ``latency_ms`` (+/- ``jitter_ms``) added to each chunk of data
timeout        data stops; the connection is closed after ``timeout_ms`` (0: held open).
               Downstream only, requests still reach the broker and are applied while
               their answers are lost: what makes a non-idempotent retry append twice
reset          connections reset (TCP RST) after ``timeout_ms``
bandwidth      at most ``rate_kbps`` KB/s
slicer         data cut into ``average_size``-byte pieces, ``delay_us`` apart
down           proxy disabled: open connections closed, new ones refused
=============  ===========================================================================
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from kmon.env import SettingError
from kmon.local.ports import BROKER_IDS
from kmon.local.toxiproxy import STREAMS, Toxic, ToxiproxyError, check_toxic
from kmon.nemesis.base import Fault, FaultError
from kmon.nemesis.targets import Target

if TYPE_CHECKING:
    from kmon.local.cluster import LocalCluster
    from kmon.local.toxiproxy import LocalToxiproxy

# kind -> (Toxiproxy toxic type, {our parameter: (toxic attribute, default)})
KINDS: dict[str, tuple[str | None, dict[str, tuple[str, int | None]]]] = {
    "latency": ("latency", {"latency_ms": ("latency", 500), "jitter_ms": ("jitter", 0)}),
    "timeout": ("timeout", {"timeout_ms": ("timeout", 0)}),
    "reset": ("reset_peer", {"timeout_ms": ("timeout", 0)}),
    "bandwidth": ("bandwidth", {"rate_kbps": ("rate", 1)}),
    "slicer": ("slicer", {"average_size": ("average_size", 64),
                          "size_variation": ("size_variation", 32),
                          "delay_us": ("delay", 1000)}),
    "down": (None, {}),
}
STREAM_CHOICES = (*STREAMS, "both")


class NetworkFault(Fault):
    """One kind of network trouble on the proxies of ``targets`` (default: every broker).

    ``stream``: ``downstream`` (broker -> client, Toxiproxy's default), ``upstream`` or
    ``both``. ``toxicity``: the share of connections affected (1.0: all).
    """

    kind = "network"

    def __init__(
        self,
        proxy: LocalToxiproxy,
        kind: str,
        targets: list[Target] | None = None,
        stream: str = "downstream",
        toxicity: float = 1.0,
        cluster: LocalCluster | None = None,
        **settings: int,
    ) -> None:
        if kind not in KINDS:
            raise SettingError(f"network fault {kind!r}: one of {', '.join(KINDS)}")
        self.net_kind = kind
        toxic_type, known = KINDS[kind]
        unknown = set(settings) - set(known)
        if unknown:
            takes = ", ".join(known) or "no settings"
            raise SettingError(
                f"network fault {kind} has no setting {sorted(unknown)[0]!r} (it takes {takes})"
            )
        if stream not in STREAM_CHOICES:
            raise SettingError(f"stream {stream!r}: one of {', '.join(STREAM_CHOICES)}")
        if kind == "down" and stream != "downstream":
            raise SettingError("stream: a down proxy cuts both directions; leave stream unset")
        self.settings = {
            name: settings.get(name, default) for name, (_, default) in known.items()
        }
        self.attributes = {known[name][0]: value for name, value in self.settings.items()}
        self.toxic_type = toxic_type
        self.stream = stream
        self.toxicity = float(toxicity)
        self.proxy = proxy
        self.cluster = cluster
        self.targets = list(targets) if targets else [Target(node=n) for n in BROKER_IDS]
        if any(t.topic is not None for t in self.targets) and cluster is None:
            raise SettingError("targets: a topic-partition target needs the cluster")
        for toxic in self._toxics():  # the toxics' own checks: attribute values, toxicity
            check_toxic(toxic)
        self.nodes: list[int | str] = []
        super().__init__()

    @property
    def name(self) -> str:
        return f"net-{self.net_kind}"

    def params(self) -> dict[str, Any]:
        return {
            "kind": self.net_kind, "stream": self.stream, "toxicity": self.toxicity,
            "targets": [t.as_json() for t in self.targets], **self.settings,
        }

    def _toxics(self) -> list[Toxic]:
        if self.toxic_type is None:
            return []
        streams = STREAMS if self.stream == "both" else (self.stream,)
        return [
            Toxic(f"kmon-{self.net_kind}-{s}", self.toxic_type, s, self.toxicity,
                  dict(self.attributes))
            for s in streams
        ]

    def _resolve(self) -> list[int | str]:
        """The proxies to degrade: the targets' brokers (a partition's resolved now)."""
        nodes: list[int | str] = []
        for target in self.targets:
            node = target.resolve(self.cluster) if target.topic is not None else target.node
            assert node is not None
            if node not in nodes:
                nodes.append(node)
        return nodes

    def _start(self) -> None:
        if not self.proxy.is_up():
            raise FaultError("Toxiproxy is not running: `kmon nemesis proxy up`")
        self.nodes = nodes = self._resolve()
        self.record.info["nodes"] = nodes
        for node in nodes:
            if self.toxic_type is None:
                self.proxy.set_enabled(node, False)
            for toxic in self._toxics():
                self.proxy.add_toxic(node, toxic)
        self.mark(f"{self.net_kind} on the proxies {nodes}")

    def _stop(self) -> None:
        failures = []
        for node in self.nodes:
            try:
                if self.toxic_type is None:
                    self.proxy.set_enabled(node, True)
                for toxic in self._toxics():
                    self.proxy.remove_toxic(node, toxic.name)
            except ToxiproxyError as exc:
                failures.append(str(exc))
        if failures:
            # Last resort: wipe every toxic so nothing outlives the fault.
            with contextlib.suppress(ToxiproxyError):
                self.proxy.reset()
            raise FaultError("; ".join(failures))
        self.mark(f"{self.net_kind} removed")
