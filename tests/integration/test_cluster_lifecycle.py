"""`up` is idempotent and survives stale pid files; `down` leaves no process; data persists."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from kmon.local import procs
from kmon.local.cluster import LocalCluster
from tests.helpers import produce_acked, read_all


def _our_processes(cluster: LocalCluster) -> list[int]:
    """Live processes whose command line names one of this cluster's config files."""
    configs = {str(cluster.config_path(n)) for n in (1, 2, 3)}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if procs.is_alive(pid) and configs & set(procs.cmdline(pid)):
            found.append(pid)
    return found


def test_cluster_is_up_with_three_brokers(local_cluster: LocalCluster) -> None:
    assert [s.state for s in local_cluster.status()] == ["running"] * 3
    assert local_cluster.live_brokers() == {1, 2, 3}
    pids = local_cluster.pids()
    assert len(set(pids.values())) == 3
    assert sorted(_our_processes(local_cluster)) == sorted(pids.values())  # type: ignore[type-var]


def test_up_is_idempotent(local_cluster: LocalCluster) -> None:
    before = local_cluster.pids()
    local_cluster.up()
    assert local_cluster.pids() == before


def test_down_leaves_nothing_and_up_ignores_stale_pid_files(
    local_cluster: LocalCluster, new_topic: Callable[..., str]
) -> None:
    cluster = local_cluster
    topic = new_topic(partitions=2)
    sent = [f"kept-{i}" for i in range(50)]
    produce_acked(cluster.bootstrap, topic, sent)
    pids = cluster.pids()

    cluster.down()
    assert not any(procs.is_alive(pid) for pid in pids.values() if pid)
    assert _our_processes(cluster) == []
    assert [s.state for s in cluster.status()] == ["stopped"] * 3

    # Pid files left by a crash: one names a live process that is not a broker (a reused
    # pid), one a process that no longer exists. Neither may pass for a broker.
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        cluster.pid_path(1).write_text(f"{bystander.pid}\n")
        cluster.pid_path(2).write_text(f"{next(iter(pids.values()))}\n")
        assert cluster.state(1) == cluster.state(2) == "stopped"

        cluster.up()
        assert [s.state for s in cluster.status()] == ["running"] * 3
        assert bystander.pid not in cluster.pids().values()
        assert bystander.poll() is None  # up did not signal the bystander
    finally:
        bystander.kill()
        bystander.wait()

    # Same data dirs: what was acknowledged before `down` is still there.
    assert sorted(read_all(cluster.bootstrap, topic, expected=len(sent))) == sorted(sent)


def test_kmon_run_leaves_a_cluster_it_did_not_start_running(local_cluster: LocalCluster) -> None:
    before = local_cluster.pids()
    where = ["--home", str(local_cluster.home), "--port-base", str(local_cluster.ports.base)]
    run = subprocess.Popen(
        [sys.executable, "-m", "kmon.cli", "run", *where], stdout=subprocess.PIPE, text=True
    )
    try:
        lines = []
        assert run.stdout is not None
        for line in run.stdout:
            lines.append(line)
            if line.startswith("running;"):
                break
        assert any(local_cluster.bootstrap in line for line in lines), lines
        assert any("already running" in line for line in lines), lines
        run.send_signal(signal.SIGTERM)  # handled like Ctrl-C
        assert run.wait(60) == 0
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert local_cluster.pids() == before


def test_drop_topics_deletes_what_earlier_runs_left_and_nothing_else(
        local_cluster: LocalCluster) -> None:
    for name in ("kmon-droptest-a.0", "kmon-droptest-a.1", "kmon-droptest-b", "kmon-keeptest-c"):
        local_cluster.create_topic(name, partitions=1, replication_factor=1)
    dropped = local_cluster.drop_topics("kmon-droptest-", keep=["kmon-droptest-b"])
    assert dropped == ["kmon-droptest-a.0", "kmon-droptest-a.1"]
    left = set(local_cluster._metadata(None, 30).topics)
    assert {"kmon-droptest-b", "kmon-keeptest-c"} <= left
    assert not {"kmon-droptest-a.0", "kmon-droptest-a.1"} & left
    # The readiness topic is never swept, even by its own name (other tests' topics may
    # share any shorter prefix of it).
    assert local_cluster.drop_topics("kmon-ready") == []
    assert "kmon-ready" in set(local_cluster._metadata(None, 30).topics)
    assert local_cluster.drop_topics("kmon-droptest-") == ["kmon-droptest-b"]
