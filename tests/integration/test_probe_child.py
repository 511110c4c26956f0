"""A probe in its own process (what the detection matrix runs): its summary comes back, and
a crash of its process (as librdkafka has crashed under DeleteRecords) is reported as
``ProbeDied`` naming the signal, with the test process unharmed."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from kmon.history import iter_ops
from kmon.nemesis.probe_child import ProbeChild, ProbeDied, stacks_path


def _probe(cluster: Any, tmp_path: Path, **kwargs: Any) -> ProbeChild:
    tag = uuid.uuid4().hex[:6]
    return ProbeChild({"kafka.bootstrap.servers": cluster.bootstrap, "name": f"child{tag}",
                       "topic_prefix": f"kmon-child-{tag}", "events.topic": f"kmon-child-ev-{tag}",
                       "rate": "30", "processes": "2", "metrics.port": "0",
                       "final_read_timeout": "10"}, tmp_path / "history.jsonl", **kwargs)


def test_a_probe_child_returns_its_summary_history_and_metrics(
        local_cluster: Any, tmp_path: Path) -> None:
    # A shutdown slower than dump_after writes the child's stacks (beside its history). 10 ms:
    # any shutdown (it joins threads and opens a reader) is slower; 0.5 s was not always (CI,
    # f765bde).
    probe = _probe(local_cluster, tmp_path, dump_after=0.01)
    probe.start()
    assert probe.probe_id.startswith("child")
    time.sleep(4)
    summary = probe.shutdown()
    assert summary["probe"] == probe.probe_id
    completed = [o for o in iter_ops(probe.history) if o.type != "invoke"]
    assert summary["ops"] == len(completed) > 20
    assert summary["events_emitted"] >= summary["ops"]
    polls = sum(o.f == "poll" and o.type == "ok" for o in completed)
    assert probe.sample("kmon_probe_ops_total", {"f": "poll", "type": "ok"}) == polls
    # Workload.shutdown, in the dumped stack
    assert "in shutdown" in stacks_path(probe.history).read_text()


def test_a_crashed_probe_child_is_reported_with_its_signal(local_cluster: Any,
                                                           tmp_path: Path) -> None:
    probe = _probe(local_cluster, tmp_path)
    probe.start()
    time.sleep(1)
    os.kill(probe._proc.pid, signal.SIGSEGV)
    # The crash's stacks are named in the error: the main thread waits on the parent's pipe.
    with pytest.raises(ProbeDied, match=r"SIGSEGV; innermost frames: .*_recv \(connection"
                                        r"\.py:\d+\).*\(stacks in "):
        probe.shutdown(timeout=30)
