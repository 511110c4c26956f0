"""The Kafka protocol proxy's configuration, build fingerprint and fault plumbing, without
starting it (tests/integration/test_detection.py runs it for real)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kmon.env import SettingError
from kmon.local import kafka_proxy
from kmon.local.kafka_proxy import FAULTS, LocalKafkaProxy
from kmon.local.ports import BROKER_IDS, Ports
from kmon.nemesis import presets
from kmon.nemesis.protocol import ProtocolFault


def test_the_proxy_listens_on_loopback_in_its_reserved_ports(tmp_path: Path) -> None:
    proxy = LocalKafkaProxy(home=tmp_path, port_base=30000)
    cluster = proxy.config()["virtualClusters"][0]
    assert cluster["targetCluster"]["bootstrapServers"] == Ports(30000).bootstrap
    provider = cluster["clusterNetworkAddressConfigProvider"]["config"]
    assert provider["bootstrapAddress"] == "127.0.0.1:30024" == proxy.bootstrap
    assert provider["nodeIdRanges"] == [
        {"name": "brokers", "range": {"startInclusive": 1, "endExclusive": 5}}]
    assert proxy.url == "http://127.0.0.1:30029"
    ports = Ports(30000).kafka_proxy_ports()
    assert sorted(ports.values()) == [30024, *(30024 + n for n in BROKER_IDS), 30029]
    assert proxy.config()["defaultFilters"] == ["kmon-faults"]


def test_the_build_fingerprint_covers_every_source() -> None:
    names = {p.name for p in kafka_proxy._sources()}
    assert {"pom.xml", "FaultFilter.java", "Main.java", "LoopbackOnly.java",
            "io.kroxylicious.proxy.filter.FilterFactory"} <= names
    assert len(kafka_proxy.fingerprint()) == 64


def test_the_java_filter_knows_every_fault() -> None:
    faults = (kafka_proxy.SOURCE / "src/main/java/kmon/proxy/Faults.java").read_text()
    for name in FAULTS:
        assert f'"{name}"' in faults, name


class FakeProxy:
    """Records the control calls a ``ProtocolFault`` makes."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def is_up(self) -> bool:
        return True

    def activate(self, *args: Any, **kw: Any) -> None:
        self.calls.append(("activate", (args, kw)))

    def deactivate(self, name: str) -> None:
        self.calls.append(("deactivate", name))

    def injections(self, name: str) -> list[str]:
        return [f"{name} on: prefix=p", f"{name}: t./0 acked at 0, stored at 12",
                f"{name}: u./0 acked at 0, stored at 13"]  # an earlier activation's

    def activations(self) -> dict[str, Any]:
        return {}

    def reset(self) -> None:
        self.calls.append(("reset", None))


def test_a_proxy_fault_is_switched_on_bounded_and_off() -> None:
    fake = FakeProxy()
    fault = ProtocolFault(fake, "spurious-offset", prefix="t.", rate=0.5,  # type: ignore[arg-type]
                          max_count=3, bound=20.0, hold=60.0)
    fault.start()
    record = fault.stop()
    fault.release()
    assert fake.calls[0] == ("activate", (("spurious-offset", "t.", 0.5, 3),
                                          {"seconds": 20.0, "hold": 60.0}))
    assert fake.calls[1:] == [("deactivate", "spurious-offset"), ("reset", None)]
    assert record.info == {"injected": 1, "injections": ["t./0 acked at 0, stored at 12"]}
    assert fault.name == "proxy-spurious-offset"


def test_injections_the_proxy_handed_back_are_not_counted() -> None:
    """A torn write whose transaction aborted is logged again with the reason; both lines go,
    and only that injection's (the same partition torn again later still counts)."""
    from kmon.nemesis.protocol import counted

    torn = "torn-transaction: tx-1 write to t.1/2 acknowledged at {}, never forwarded"
    lines = [torn.format(9), torn.format(30),
             torn.format(9) + "; its transaction aborted (not counted)", torn.format(41)]
    assert counted(lines) == [torn.format(30), torn.format(41)]
    assert counted([lines[2]]) == []  # its injection already out of the bounded log


def test_bad_proxy_faults_are_refused_naming_the_setting() -> None:
    with pytest.raises(SettingError, match="Kafka proxy fault 'lose-everything'"):
        ProtocolFault(FakeProxy(), "lose-everything")  # type: ignore[arg-type]
    with pytest.raises(SettingError, match="rate 0"):
        ProtocolFault(FakeProxy(), "duplicate", rate=0)  # type: ignore[arg-type]


def test_kafka_proxied_presets_bootstrap_through_the_proxy() -> None:
    class Cluster:
        ports = Ports(30000)
        proxied_bootstrap = "toxiproxy"

    for name in ("kafka-proxied", "kafka-proxied-aborts", "kafka-proxied-restarts"):
        settings = presets.get(name).probe_settings(Cluster())  # type: ignore[arg-type]
        assert settings["kafka.bootstrap.servers"] == "127.0.0.1:30024", name


def test_the_lost_commit_row_starts_consumers_while_its_commits_are_lost() -> None:
    """A lost commit shows only when a consumer starts from the group's offsets during the
    fault: the row's probe must switch consumer modes many times in its shortest window (the
    detection test holds it 6 s), or the row passes or fails by luck (it failed once so)."""
    from kmon.nemesis.matrix import MatrixSettings
    from kmon.nemesis.scenarios import BY_NAME

    row = BY_NAME["lost-offset-commit"]
    every = int(presets.get(row.preset).settings["mode_switch_ops"])
    switches = MatrixSettings().rate * 6.0 / every
    assert switches >= 10, f"{switches:.1f} consumer starts expected in 6 s"
