"""Bad fault settings fail fast, naming the setting, before anything touches a cluster.

Every fault is built against a cluster handle on an empty home and a port base nothing
listens on: a check that reached for the cluster would fail differently (or hang), and no
broker may have been started.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from kmon.cli import main
from kmon.env import SettingError
from kmon.local.cluster import LocalCluster
from kmon.local.toxiproxy import LocalToxiproxy, Toxic, check_toxic
from kmon.nemesis import (
    Crash,
    DeleteRecords,
    Nemesis,
    NetworkFault,
    Pause,
    Target,
    UncleanElection,
)

BASE = 61000  # nothing runs here; nothing may be contacted either


@pytest.fixture
def cluster(tmp_path: Path) -> LocalCluster:
    return LocalCluster(home=tmp_path, port_base=BASE)


@pytest.fixture
def proxy(tmp_path: Path) -> LocalToxiproxy:
    return LocalToxiproxy(home=tmp_path, port_base=BASE)


@pytest.mark.parametrize(("kwargs", "named"), [
    ({}, "either a node or a topic"),
    ({"node": 1, "topic": "t"}, "either a node or a topic"),
    ({"node": 4}, "node: no broker 4"),
    ({"node": True}, "node: no broker True"),
    ({"topic": ""}, "topic: expected a topic name"),
    ({"topic": "t", "partition": -1}, "partition: expected a partition number"),
])
def test_targets(kwargs: dict, named: str) -> None:
    with pytest.raises(SettingError, match=named):
        Target(**kwargs)


def test_process_faults_take_a_target(cluster: LocalCluster) -> None:
    assert Pause(cluster, Target(node=2)).params() == {"target": {"node": 2}}
    crash = Crash(cluster, Target(topic="t", partition=3), restart=False)
    assert crash.params() == {"target": {"topic": "t", "partition": 3}, "restart": False}
    assert crash.name == "crash" and not crash.active


@pytest.mark.parametrize(("kind", "kwargs", "named"), [
    ("jitter", {}, "network fault 'jitter': one of latency, timeout"),
    ("latency", {"rate_kbps": 5}, "latency has no setting 'rate_kbps'"),
    ("down", {"latency_ms": 5}, "down has no setting 'latency_ms' .it takes no settings"),
    ("latency", {"latency_ms": -1}, "latency=-1: expected an integer >= 0"),
    ("latency", {"latency_ms": 1.5}, "latency=1.5: expected an integer >= 0"),
    ("bandwidth", {"stream": "sideways"}, "stream 'sideways': one of downstream"),
    ("timeout", {"toxicity": 1.5}, "toxicity 1.5: must be within 0..1"),
    ("down", {"stream": "both"}, "a down proxy cuts both directions"),
])
def test_network_fault_settings(
    proxy: LocalToxiproxy, kind: str, kwargs: dict, named: str
) -> None:
    with pytest.raises(SettingError, match=named):
        NetworkFault(proxy, kind, **kwargs)


def test_network_fault_defaults_and_names(proxy: LocalToxiproxy, cluster: LocalCluster) -> None:
    fault = NetworkFault(proxy, "latency", latency_ms=300, stream="both")
    assert fault.name == "net-latency"
    assert fault.params()["targets"] == [{"node": 1}, {"node": 2}, {"node": 3}]
    assert [t.stream for t in fault._toxics()] == ["downstream", "upstream"]
    assert fault._toxics()[0].attributes == {"latency": 300, "jitter": 0}
    assert NetworkFault(proxy, "down")._toxics() == []  # a disabled proxy, not a toxic
    with pytest.raises(SettingError, match="a topic-partition target needs the cluster"):
        NetworkFault(proxy, "reset", [Target(topic="t")])
    NetworkFault(proxy, "reset", [Target(topic="t")], cluster=cluster)


def test_toxic_checks() -> None:
    check_toxic(Toxic("x", "slicer", attributes={"average_size": 10, "delay": 5}))
    with pytest.raises(SettingError, match="unknown toxic type 'lag'"):
        check_toxic(Toxic("x", "lag"))
    with pytest.raises(SettingError, match="slicer toxic has no attribute 'rate'"):
        check_toxic(Toxic("x", "slicer", attributes={"rate": 1}))


@pytest.mark.parametrize(("kwargs", "named"), [
    ({}, "give either topic or topic_prefix"),
    ({"topic": "t", "topic_prefix": "p"}, "give either topic or topic_prefix"),
    ({"topic_prefix": "p", "partitions": [0]}, "partitions: only with a single topic"),
    ({"topic": "t", "partitions": []}, "partitions: give at least one"),
    ({"topic": "t", "partitions": [-2]}, "partitions: expected a partition number"),
    ({"topic": "t", "count": 0}, "count: expected an integer >= 1"),
    ({"topic": "t", "interval": 0.01}, "interval: at least 0.1 s"),
    ({"topic": "t", "interval": -1}, "interval: expected seconds >= 0"),
    ({"topic": "t", "keep": -1}, "keep: expected an integer >= 0"),
])
def test_delete_records_settings(cluster: LocalCluster, kwargs: dict, named: str) -> None:
    with pytest.raises(SettingError, match=named):
        DeleteRecords(cluster, **kwargs)


class _Metadata:
    """What ``AdminClient.list_topics`` answers, for two probe topics and another."""

    def __init__(self) -> None:
        parts = {p: object() for p in range(4)}
        self.topics = {name: SimpleNamespace(partitions=parts, error=None)
                       for name in ("kmon-probe-a.0", "kmon-probe-a.1", "other")}


def test_delete_records_count_all_hits_every_partition_without_asking_offsets(
        cluster: LocalCluster) -> None:
    """``count=None`` (``--count all``): every partition of the prefix's topics, chosen
    without the offsets and committed positions that rank the most unread (the admin stub
    has no such calls: asking would raise)."""
    fault = DeleteRecords(cluster, topic_prefix="kmon-probe-a", count=None)
    admin = SimpleNamespace(list_topics=lambda timeout: _Metadata())
    chosen = fault._choose(admin)  # type: ignore[arg-type]
    assert [(tp.topic, tp.partition) for tp in chosen] == [
        (f"kmon-probe-a.{t}", p) for t in range(2) for p in range(4)]


@pytest.mark.parametrize(("kwargs", "named"), [
    ({}, "give either topic or topic_prefix"),
    ({"topic_prefix": "p", "partition": 0}, "partition: only with a single topic"),
    ({"topic": "t", "lag": -1}, "lag: expected seconds >= 0"),
    ({"topic": "t", "min_insync_replicas": 3}, "min_insync_replicas: 1, 2 or None"),
    ({"topic": "t", "election_timeout": "soon"}, "election_timeout: expected seconds"),
])
def test_unclean_election_settings(cluster: LocalCluster, kwargs: dict, named: str) -> None:
    with pytest.raises(SettingError, match=named):
        UncleanElection(cluster, **kwargs)


def test_run_rejects_a_negative_duration(cluster: LocalCluster) -> None:
    fault = Pause(cluster, Target(node=1))
    with pytest.raises(SettingError, match="duration: expected seconds >= 0"):
        Nemesis(cluster).run(fault, duration=-5)
    assert fault.record.invoked_at is None  # never started


@pytest.mark.parametrize(("argv", "named"), [
    (["pause"], "give --node N or --topic T"),
    (["crash", "--node", "1", "--topic", "t"], "give --node or --topic, not both"),
    (["pause", "--node", "7"], "node: no broker 7"),
    (["pause", "--node", "1", "--duration", "-2"], "--duration: expected seconds >= 0"),
    (["net", "latency", "--rate-kbps", "5"], "latency has no setting 'rate_kbps'"),
    (["net", "down", "--stream", "upstream"], "a down proxy cuts both directions"),
    (["delete-records", "--topic", "t", "--topic-prefix", "p"], "either topic or topic_prefix"),
    (["delete-records", "--topic", "t", "--count", "most"], "expected a number or all, got 'most'"),
    (["delete-records", "--topic", "t", "--count", "0"], "count: expected an integer >= 1"),
    (["unclean", "--topic-prefix", "p", "--partition", "1"], "only with a single topic"),
    (["preset", "nope"], "unknown preset 'nope': one of safe"),
])
def test_cli_rejects_bad_settings_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    verb, *rest = argv
    where = ["--home", str(tmp_path), "--port-base", str(BASE)]
    assert main(["nemesis", verb, *where, *rest]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kmon: error: ") and named in err
    assert not list(tmp_path.glob("kafka/broker-*/pid"))  # nothing was started
