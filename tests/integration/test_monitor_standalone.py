"""The monitor on a Spark standalone cluster whose workers do not have kmon installed.

The cluster is the suite's own (``kmon.local.spark_standalone``: a master and two workers of
two cores each, from pyspark's launcher, loopback only). kmon reaches the executors only as
`kmon pack`'s archive (``spark.archives``, ``PYSPARK_PYTHON=./environment/bin/python``): the
interpreter the workers would otherwise run cannot import kmon, which the test checks first.

One run: a probe whose readers lag, DeleteRecords past them (acknowledged records removed
unread: lost writes), worker 1's JVM SIGKILLed with its executor mid-run (then started again),
the driver SIGKILLed and restarted from its checkpoint. Then the probe stops, the monitor
settles, and its verdicts must be `kmon check`'s on the probe's history: the same counts per
anomaly type, the same evidence identities, none counted twice (unseen verdicts: see the
end). The stateful stages run with the cluster defaults of ``state.partitions`` and
``txn.partitions``, and Spark's event log shows the folds' tasks (16 in stage 1, 8 in stage 2,
on both executors). Nothing is timed.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kmon.checker.report import merge_key
from kmon.local.spark_standalone import SparkStandalone
from kmon.nemesis import presets
from kmon.nemesis.chaos_run import MonitorProcess, on_standalone, settle_monitor
from kmon.nemesis.matrix import OFFLINE_ONLY, read_evidence
from kmon.nemesis.probe_child import ProbeChild
from kmon.streaming.config import CLUSTER_STATE_PARTITIONS
from tests.helpers import suite_stack, wait_until

pytestmark = pytest.mark.timeout(1200)

WORKER_KILLED = 1
MONITOR_SLOT = 2  # metrics port (kmon.local.ports)


@pytest.fixture(scope="module")
def standalone(local_cluster: Any) -> Iterator[SparkStandalone]:
    home, base = suite_stack()
    cluster = SparkStandalone(home=home, port_base=base)
    cluster.up()
    yield cluster
    cluster.down()


@pytest.fixture(scope="module")
def kmon_archive() -> Path:
    """`kmon pack`'s archive (built once per change of kmon's sources, then cached)."""
    from kmon.pack import pack

    return pack(log=lambda _: None)


def _bare_python_cannot_import_kmon(cluster: SparkStandalone, cwd: Path) -> None:
    """The interpreter the workers run when nobody names another (PySpark's default,
    ``python3`` on their PATH) has no kmon, nor does their environment point at one."""
    env = cluster.daemon_env(WORKER_KILLED)
    done = subprocess.run(["python3", "-c", "import kmon"], env=env, cwd=cwd,
                          capture_output=True, text=True, check=False)
    assert done.returncode != 0 and "No module named 'kmon'" in done.stderr, done
    assert "PYSPARK_PYTHON" not in env and "PYTHONPATH" not in env


def _stateful_stages(eventlog_dir: Path) -> list[tuple[int, set[str]]]:
    """(tasks, executors that ran them) of every stage that held state (a StateStoreRDD: the
    per-key fold's, stage 2's) in Spark's event logs, one per application."""
    stages: dict[tuple[str, int], tuple[int, set[str]]] = {}
    for path in eventlog_dir.rglob("events_*"):
        for line in path.read_text(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:  # the last line of a driver that was SIGKILLed
                continue
            if event.get("Event") == "SparkListenerStageSubmitted":
                info = event["Stage Info"]
                # First attempts only: a retry after a lost executor runs only what was lost.
                rdds = {r.get("Name") for r in info.get("RDD Info", [])}
                if info.get("Stage Attempt ID") == 0 and "StateStoreRDD" in rdds:
                    stages[(path.parent.name, info["Stage ID"])] = (info["Number of Tasks"],
                                                                     set())
            elif event.get("Event") == "SparkListenerTaskEnd":
                stage = stages.get((path.parent.name, event["Stage ID"]))
                if stage is not None:
                    stage[1].add(event["Task Info"]["Executor ID"])
    return list(stages.values())


def _offline(history: Path, probe: str) -> tuple[Counter[str], set[str]]:
    """`kmon check` on the history: counts per type (unseen too), and the evidence ids its
    verdicts get (``kmon.streaming.evidence.evidence_id``), one per anomaly."""
    from kmon.checker import CheckConfig, check
    from kmon.checker.anomaly import Anomaly
    from kmon.history import iter_ops

    report = check(iter_ops(history), CheckConfig(isolation="read_committed"))
    counts: Counter[str] = Counter()
    keys: set[str] = set()
    for t, records in report.errors.items():
        if t in OFFLINE_ONLY:
            continue
        counts[t] += len(records)
        for r in records:
            keys.add(_identity(probe, Anomaly(t, r)))
    if unseen := sum(report.unseen_counts.values()):
        counts["unseen"] = unseen
    return counts, keys


def _identity(probe: str, a: Any) -> str:
    """What names one anomaly whichever stage saw it first: its merge key (an anomaly the fold
    learns in pieces) or its evidence id."""
    from kmon.streaming.evidence import evidence_id

    mk = merge_key(a)
    if mk is None:
        return evidence_id(probe, a.type, a.record)
    return json.dumps([probe, a.type, mk], sort_keys=True, default=str)


def _counted(monitor: MonitorProcess) -> Counter[str]:
    """The monitor's counters by type (``kmon_anomalies_total``; ``unseen`` for
    ``kmon_unseen_verdicts_total``), restored across driver restarts."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    url = f"http://127.0.0.1:{monitor.port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    out: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "kmon_anomalies_total" and s.value:
                out[s.labels["anomaly"]] += int(s.value)
            elif s.name == "kmon_unseen_verdicts_total" and s.value:
                out["unseen"] += int(s.value)
    return out


def _anomalies(counts: Counter[str]) -> Counter[str]:
    return Counter({t: n for t, n in counts.items() if t != "unseen"})


def _last_commit(monitor: MonitorProcess) -> int:
    commits = monitor.workdir / "checkpoint" / "keys" / "commits"
    return max((int(p.name) for p in commits.glob("[0-9]*") if p.name.isdigit()), default=-1)


def _create_events_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, num_partitions=4, replication_factor=3)])[
            topic].result(30)


def test_the_monitor_on_a_cluster_without_kmon_survives_an_executor_and_a_driver_kill(
        local_cluster: Any, standalone: SparkStandalone, kmon_archive: Path,
        tmp_path: Path) -> None:
    from kmon.checker.anomaly import Anomaly
    from kmon.nemesis.records import DeleteRecords

    _bare_python_cannot_import_kmon(standalone, tmp_path)
    tag = uuid.uuid4().hex[:6]
    eventlog = tmp_path / "eventlog"
    eventlog.mkdir()
    monitor = MonitorProcess(
        local_cluster, tmp_path, f"sa-{tag}", local_cluster.ports.metrics(MONITOR_SLOT),
        settings={"spark.eventLog.enabled": "true", "spark.eventLog.compress": "false",
                  "spark.eventLog.dir": eventlog.as_uri(),
                  # pages of one chunk: the lagging readers' keys get cold window pages,
                  # read back on the other executor and after the driver's restart
                  "state.page.slots": "256"})
    # The driver is kmon's own process (its virtualenv); the workers get the archive.
    on_standalone(monitor, standalone, kmon_archive)
    bootstrap = local_cluster.bootstrap
    _create_events_topic(bootstrap, monitor.events_topic)
    prefix = f"kmon-sa-{tag}"
    history = tmp_path / "probe.jsonl"
    probe = ProbeChild({
        "kafka.bootstrap.servers": bootstrap, "events.kafka.bootstrap.servers": bootstrap,
        "name": f"sa{tag}", "topic_prefix": prefix, "events.topic": monitor.events_topic,
        "rate": "30", "processes": "2", "metrics.port": "0", "final_read_timeout": "30",
        **presets.get("lagging-readers").probe_settings(local_cluster)}, history)
    monitor.start()
    probe.start()
    try:
        wait_until(lambda: _last_commit(monitor) >= 0, "the monitor's first micro-batch", 600)
        # Acknowledged records deleted before the lagging readers reached them.
        fault = DeleteRecords(local_cluster, topic_prefix=prefix, count=4, interval=1.0)
        fault.start()
        time.sleep(8)
        deleted = fault.stop().as_json()
        # A lost node: worker 1's JVM and its executor; the stages' tasks move to worker 2.
        before = _last_commit(monitor)
        killed = standalone.kill_worker(WORKER_KILLED)
        assert len(killed) >= 2, f"worker {WORKER_KILLED} had no executor: {killed}"
        wait_until(lambda: _last_commit(monitor) > before + 1,
                   "micro-batches after the executor was lost", 600)
        standalone.start_worker(WORKER_KILLED)
        standalone.wait_workers(2)
        # A lost driver: SIGKILL, then a new one on the same checkpoint.
        monitor.kill()
        monitor.start()
        time.sleep(10)  # traffic under the new driver
    finally:
        summary = probe.shutdown()
    try:
        assert summary.get("events_dropped", 0) == 0, summary
        settle_monitor(monitor, 600.0)
        evidence = [e for e in read_evidence(bootstrap, monitor.anomalies_topic)
                    if not e.get("update")]
        counted = _counted(monitor)
    finally:
        monitor.stop()

    offline, offline_ids = _offline(history, probe.probe_id)
    reported = Counter(e["anomaly"] for e in evidence)
    print(f"\nDeleteRecords {deleted.get('info')}; worker {WORKER_KILLED} killed "
          f"(pids {killed}); kmon check {dict(offline)}; monitor {dict(reported)}")
    assert offline["lost-write"] > 0, "the deletion removed nothing the readers had not read"
    assert _anomalies(reported) == _anomalies(offline)
    # The counters, restored by the new driver: nothing counted twice.
    assert _anomalies(counted) == _anomalies(offline)
    # Unseen verdicts are not anomalies: the monitor gives one to each value unread for
    # unseen.grace, and these readers lag on purpose, so values they read later get one too;
    # kmon check counts the values never read, each of which must have had its verdict.
    assert reported["unseen"] == counted["unseen"] >= offline["unseen"] > 0
    assert {_identity(probe.probe_id, Anomaly(e["anomaly"], e["record"]))
            for e in evidence if e["anomaly"] != "unseen"} == offline_ids
    # The cluster defaults of state.partitions and txn.partitions (half): the folds in that
    # many tasks, on both executors.
    stages = _stateful_stages(eventlog)
    assert {n for n, _ in stages} == {CLUSTER_STATE_PARTITIONS, CLUSTER_STATE_PARTITIONS // 2}, \
        stages
    assert max(len(execs) for _, execs in stages) == 2, stages
