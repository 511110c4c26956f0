"""The local cluster under process faults: no acknowledged write is lost.

Each test breaks one broker and lets ``healthy_cluster`` mend the cluster afterwards.
"""

from __future__ import annotations

from collections.abc import Callable

from kmon.local import procs
from kmon.local.cluster import ClusterError, LocalCluster
from tests.helpers import produce_acked, read_all, wait_until


def _batch(start: int, n: int) -> list[str]:
    return [f"v{i:05d}" for i in range(start, start + n)]


def test_sigkill_a_broker_loses_no_acked_write_and_it_rejoins_the_isr(
    healthy_cluster: LocalCluster, new_topic: Callable[..., str]
) -> None:
    cluster = healthy_cluster
    topic = new_topic(partitions=3)
    sent = _batch(0, 300)
    produce_acked(cluster.bootstrap, topic, sent)

    victim = cluster.leader(topic, 0)
    assert victim is not None
    old_pid = cluster.kill(victim)
    assert not procs.is_alive(old_pid)
    assert cluster.state(victim) == "stopped"

    # Writes keep being acknowledged with acks=all (2 of 3 replicas are min.insync), and
    # everything acknowledged so far reads back, while the victim is down.
    more = _batch(300, 300)
    produce_acked(cluster.bootstrap, topic, more)
    sent += more
    during = read_all(cluster.bootstrap, topic, expected=len(sent))
    assert sorted(during) == sorted(sent)
    wait_until(lambda: cluster.leader(topic, 0) not in (None, victim), "a new leader of p0")

    new_pid = cluster.start(victim)
    assert new_pid != old_pid
    cluster.wait_in_isr(topic, victim)  # bounded wait; fails naming the ISRs it last saw
    assert all(sorted(p.isr) == [1, 2, 3] for p in cluster.describe_topic(topic).values())

    last = _batch(600, 300)
    produce_acked(cluster.bootstrap, topic, last)
    sent += last
    after = read_all(cluster.bootstrap, topic, expected=len(sent))
    assert sorted(after) == sorted(sent)  # nothing lost, nothing duplicated


def _fenced(cluster: LocalCluster, topic: str, victim: int) -> bool:
    try:
        s = cluster.describe_topic(topic, timeout=10.0)[0]
    except ClusterError:  # metadata requests can time out while a broker is frozen: retry
        return False
    return s.leader not in (None, victim) and victim not in s.isr


def test_pause_and_resume_a_broker(
    healthy_cluster: LocalCluster, new_topic: Callable[..., str]
) -> None:
    cluster = healthy_cluster
    topic = new_topic(partitions=1)
    sent = _batch(0, 100)
    produce_acked(cluster.bootstrap, topic, sent)

    victim = cluster.leader(topic, 0)
    assert victim is not None
    pid = cluster.pause(victim)
    assert cluster.state(victim) == "paused"
    assert procs.proc_state(pid) == "T"

    # The paused leader stops heartbeating, is fenced, and another replica takes over:
    # acks=all writes go through again without it.
    more = _batch(100, 100)
    produce_acked(cluster.bootstrap, topic, more)
    sent += more
    wait_until(lambda: _fenced(cluster, topic, victim),
               f"broker {victim} fenced: neither leader nor in the ISR")

    assert cluster.resume(victim) == pid  # the same process carries on
    assert cluster.state(victim) == "running"
    cluster.wait_in_isr(topic, victim)
    assert sorted(read_all(cluster.bootstrap, topic, expected=len(sent))) == sorted(sent)


def test_fault_verbs_through_the_cli(
    healthy_cluster: LocalCluster, capsys: object
) -> None:
    from kmon.cli import main

    cluster = healthy_cluster
    where = ["--home", str(cluster.home), "--port-base", str(cluster.ports.base)]
    assert main(["cluster", "status", *where]) == 0

    assert main(["cluster", "pause", "3", *where]) == 0
    assert cluster.state(3) == "paused"
    assert main(["cluster", "status", *where]) == 1  # not all running
    assert main(["cluster", "resume", "3", *where]) == 0
    assert cluster.state(3) == "running"

    old = cluster.pid(3)
    assert main(["cluster", "kill", "3", *where]) == 0
    assert cluster.state(3) == "stopped"
    assert main(["cluster", "start", "3", *where]) == 0
    assert cluster.state(3) == "running" and cluster.pid(3) != old
    assert cluster.serving(3) and 3 in cluster.live_brokers()

    assert main(["cluster", "logs", "3", "--path", *where]) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert str(cluster.log_path(3)) in out
    assert cluster.log_path(3).stat().st_size > 0
