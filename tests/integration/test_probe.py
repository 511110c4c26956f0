"""The probe on the real local cluster: what it records is what the clients saw.

A healthy run and a run through a broker SIGKILL/restart must both give histories the checker
finds valid with zero anomalies, while exercising transactions, deliberate aborts,
subscribe-mode rebalances, crash ops and key rotation; the events topic must decode to the same
history as the local file; SIGTERM must stop `kmon probe` cleanly. Each run prints its summary
(op rate, outcome shares) for the notes (`pytest -s` shows it).

The workloads run in child processes (``ProbeChild``), as the detection matrix runs them: a
crash of librdkafka under a fault then fails one test, and no client of theirs is left in the
test process when later tests kill brokers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from kmon.checker import check
from kmon.history import Op, iter_ops
from kmon.history.avro import decode_event
from kmon.history.model import is_clock_tick
from kmon.local.cluster import LocalCluster
from kmon.nemesis.probe_child import ProbeChild
from kmon.probes import values as V
from kmon.probes.clients import HUNG_TEXT

# Shares turned up from the defaults so one short run sees every kind of op many times.
BUSY = {
    "processes": "4",
    "rate": "40",
    "txn_share": "0.4",
    "abort_share": "0.3",
    "crash_share": "0.01",
    "subscribe_share": "0.6",
    "mode_switch_ops": "25",
    "catchup_interval": "15",
    "values_per_key": "80",  # rotate keys: new topics appear and drained ones are deleted
    "drain_time": "5",
    "metrics.port": "0",
    "seed": "5",
}


Run = tuple[list[Op], dict[str, Any], ProbeChild]


def probe_run(bootstrap: str, tmp_path: Path, seconds: float, during: Any = None,
              **extra: str) -> Run:
    """Run a probe for ``seconds`` (calling ``during(elapsed)`` every second); return its
    history file's ops, its summary and the stopped probe (its metrics, its settings)."""
    tag = uuid.uuid4().hex[:6]
    probe = ProbeChild({"kafka.bootstrap.servers": bootstrap, "name": f"it{tag}",
                        "events.topic": f"kmon-it-events-{tag}", **BUSY, **extra},
                       tmp_path / "history.jsonl")
    probe.start()
    start = time.monotonic()
    try:
        while (elapsed := time.monotonic() - start) < seconds:
            if during is not None:
                during(elapsed)
            time.sleep(1.0)
    finally:
        summary = probe.shutdown()
    print(f"\nprobe summary: {json.dumps(summary)}")
    return list(iter_ops(probe.history)), summary, probe


def assert_zero_anomalies(ops: list[Op]) -> None:
    report = check(ops)
    assert report.valid, report.summary()
    assert report.errors == {}, report.summary()
    assert sum(report.unseen_counts.values()) == 0, "the final read left acked values unseen"


def _returned_commit(op: Op) -> bool:
    """An offset commit whose call returned: ``info`` when refused (a first attempt librdkafka
    retried may have been stored), yet nothing of it is in flight, so its process keeps its id
    (docs/probes.md; the checker bounds its effect by INDOUBT_NS). Only a commit still running
    at ``op_timeout`` (``Hung``) retires its process."""
    error = op.meta.error if op.meta is not None else None
    return op.f == "commit" and HUNG_TEXT not in (error or "")


def contract_violations(ops: list[Op]) -> list[str]:
    """What the checker relies on besides validity, op by op (empty when all holds)."""
    bad: list[str] = []
    retired: set[int] = set()
    pending: dict[int, Op] = {}
    assigned: dict[int, set[int]] = {}
    for op in ops:
        p = op.process
        if p in retired:
            bad.append(f"op {op.index}: process {p} reused after a crash/info")
        if op.type == "invoke":
            if p in pending:
                bad.append(f"op {op.index}: process {p} invoked twice")
            pending[p] = op
            continue
        inv = pending.pop(p, None)
        if inv is None or inv.f != op.f:
            bad.append(f"op {op.index}: completion without its invoke")
            continue
        m = op.meta
        if m is None or m.invoke_time != inv.time or not m.probe:
            bad.append(f"op {op.index}: meta lacks invoke_time/probe")
            continue
        if op.f == "crash" or (op.type == "info" and not _returned_commit(op)):
            retired.add(p)
        sends = op.sends()
        if op.f == "send" and len(op.value) != 1:
            bad.append(f"op {op.index}: a send op with {len(op.value)} mops")
        if op.f == "txn":
            if len({k for k, _, _ in sends}) != len(sends):
                bad.append(f"op {op.index}: two sends to one key in a transaction")
            if m.transactional_id is None or m.txn_seq is None:
                bad.append(f"op {op.index}: txn without transactional id/seq")
        for _k, v, off in sends:
            if V.decode(v).process != p:
                bad.append(f"op {op.index}: value {v} does not name process {p}")
            if op.type == "ok" and off is None:
                bad.append(f"op {op.index}: ok send without offset")
        touched = {k for k, _, _ in sends} | set(op.reads())
        if op.f in ("assign", "subscribe"):
            touched |= set(op.value)
        if missing := touched - set(m.placements):
            bad.append(f"op {op.index}: no placement for keys {sorted(missing)}")
        if op.f == "assign" and op.type == "ok":
            assigned[p] = set(op.value)
        elif op.f == "subscribe":
            assigned.pop(p, None)
        elif (op.f == "poll" and op.type == "ok" and p in assigned and not op.rebalance_log
              and set(op.reads()) != assigned[p]):
            bad.append(f"op {op.index}: poll lists {sorted(op.reads())}, "
                           f"assigned {sorted(assigned[p])}")
    return bad[:20]


def read_events(bootstrap: str, topic: str, probe: str,
                ticks: Counter[int] | None = None) -> list[Op]:
    """Every op event of ``probe`` on ``topic``, decoded, in index order; its clock ticks are
    counted per partition in ``ticks``."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"it-{uuid.uuid4().hex}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        parts = list(c.list_topics(topic, timeout=10).topics[topic].partitions)
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in parts}
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        pos = dict.fromkeys(parts, 0)
        ops = []
        deadline = time.monotonic() + 60
        while any(pos[p] < ends[p] for p in parts) and time.monotonic() < deadline:
            for m in c.consume(1000, 1.0):
                if m.error() is None:
                    pos[m.partition()] = m.offset() + 1
                    op = decode_event(m.value(), m.headers())
                    if op.meta is None or op.meta.probe != probe:
                        continue
                    if is_clock_tick(op):
                        if ticks is not None:
                            ticks[m.partition()] += 1
                    else:
                        ops.append(op)
        return sorted(ops, key=lambda o: o.index)
    finally:
        c.close()


@pytest.fixture(scope="module")
def healthy(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory,
            ) -> Iterator[Run]:
    yield probe_run(kafka_bootstrap, tmp_path_factory.mktemp("healthy"), 60)


def test_healthy_run_has_zero_anomalies(healthy: Run) -> None:
    ops, summary, _ = healthy
    assert summary["abandoned_ops"] == 0 and summary["events_dropped"] == 0
    assert summary["final_read"]["reached"], summary["final_read"]
    assert_zero_anomalies(ops)


def test_healthy_run_exercises_every_path(healthy: Run) -> None:
    ops, _, probe = healthy
    done = Counter((o.f, o.type) for o in ops if o.type != "invoke")
    assert done[("txn", "ok")] >= 20 and done[("send", "ok")] >= 20
    assert done[("poll", "ok")] >= 20 and done[("crash", "info")] >= 2
    assert done[("subscribe", "ok")] >= 2 and done[("assign", "ok")] >= 2
    aborted = [o for o in ops if o.f == "txn" and o.type == "fail" and o.meta.deliberate_abort]
    assert len(aborted) >= 5
    # Transactions that polled something, committed and aborted ones.
    assert any(o.reads() and any(o.reads().values()) for o in aborted)
    kinds = Counter(r.kind for o in ops for r in o.rebalance_log)
    assert kinds["assigned"] >= 2 and kinds["revoked"] >= 1
    # Keys rotated: more topics than the live ones were used.
    topics = {pl.topic for o in ops if o.meta for pl in o.meta.placements.values()}
    assert len(topics) > 2, topics
    assert any(pl.leader is not None for o in ops if o.meta for pl in o.meta.placements.values())
    assert probe.sample("kmon_probe_ops_total", {"f": "txn", "type": "ok"}) == done[("txn", "ok")]


def test_healthy_run_keeps_the_op_contract(healthy: Run) -> None:
    ops, _, _ = healthy
    assert contract_violations(ops) == []


def test_healthy_run_records_offset_commits_and_starts(healthy: Run) -> None:
    ops, _, probe = healthy
    prefix = probe.overrides["name"]
    groups = {f"kmon-probe-{prefix}-assign", f"kmon-probe-{prefix}-subscribe"}
    done = [o for o in ops if o.type != "invoke"]
    commits = [o for o in done if o.f == "commit"]
    assert sum(o.type == "ok" for o in commits) >= 20
    assert all(o.meta.group in groups and o.commits() for o in commits)
    # A commit op sets each key's offset just past the last record its process's poll read.
    last_poll: dict[Any, Op] = {}
    for o in done:
        if o.f == "poll" and o.type == "ok":
            last_poll[o.process] = o
        elif o.f == "commit":
            read = {k: rs[-1][0] + 1 for k, rs in last_poll[o.process].reads().items() if rs}
            assert dict(o.commits()) == read, o
    # Transactions that polled carry their offset commits, whatever their outcome.
    txns = [o for o in done if o.f == "txn" and o.commits()]
    assert sum(o.type == "ok" for o in txns) >= 5 and any(o.type == "fail" for o in txns)
    for o in txns:
        assert o.meta.group in groups
        assert dict(o.commits()) == {k: rs[-1][0] + 1 for k, rs in o.reads().items() if rs}
    assert probe.sample("kmon_probe_ops_total", {"f": "commit", "type": "ok"}) == sum(
        o.type == "ok" for o in commits)


def test_healthy_run_starts_every_assigned_partition_where_its_group_committed(
        healthy: Run) -> None:
    ops, _, _ = healthy
    done = [o for o in ops if o.type != "invoke"]
    assigns = [o for o in done if o.f == "assign" and o.type == "ok"]
    assert assigns and all(set(o.meta.starts) == set(o.value) for o in assigns)
    assert all(o.meta.group.endswith("-assign") for o in assigns)
    rebalanced = [o for o in done if o.f != "assign" and o.meta.starts]
    assert rebalanced, "no subscribe-mode rebalance recorded a start"
    assert all(o.meta.group.endswith("-subscribe") for o in rebalanced)
    sources = Counter(s.source for o in done for s in o.meta.starts.values())
    assert sources["committed"] >= 5 and sources["reset"] >= 1, sources
    assert set(sources) <= {"committed", "reset", "client"}, sources
    # A committed start is an offset that a commit of its group that may have stored (ok or
    # info, a commit op's or a transaction's) set, invoked before the start's op completed.
    invoked: dict[Any, int] = {}
    written: dict[tuple[str, Any, int], int] = {}  # (group, key, offset) -> earliest invoke
    for o in ops:
        if o.type == "invoke":
            invoked[o.process] = o.index
        elif o.type in ("ok", "info"):
            for k, off in o.commits():
                at = written.get((o.meta.group, k, off), o.index)
                written[(o.meta.group, k, off)] = min(at, invoked[o.process])
    for o in done:
        for k, start in o.meta.starts.items():
            if start.source == "committed":
                assert written.get((o.meta.group, k, start.offset), o.index) < o.index, (
                    o, k, start)


def test_events_topic_decodes_to_the_local_history(
    healthy: Run, kafka_bootstrap: str,
) -> None:
    ops, summary, probe = healthy
    topic = probe.overrides["events.topic"]
    ticks: Counter[int] = Counter()
    events = read_events(kafka_bootstrap, topic, summary["probe"], ticks)
    assert len(events) == len(ops) == summary["events_emitted"]
    assert events == ops
    # A clock tick a second to every partition, also those none of its processes wrote to.
    partitions = int(probe.overrides.get("events.partitions", "6"))
    assert sorted(ticks) == list(range(partitions))
    assert min(ticks.values()) >= 30, ticks  # a 60 s run


def test_kmon_check_cli_agrees(healthy: Run,
                               tmp_path: Path) -> None:
    from kmon.history import dump_jsonl

    path = tmp_path / "h.jsonl"
    with open(path, "w") as f:
        dump_jsonl(healthy[0], f)
    out = subprocess.run([sys.executable, "-m", "kmon.cli", "check", str(path), "--json"],
                         capture_output=True, text=True, timeout=120)
    report = json.loads(out.stdout)
    assert out.returncode == 0 and report["valid"] is True and report["errors"] == {}


def test_broker_sigkill_and_restart_has_zero_anomalies(
    healthy_cluster: LocalCluster, tmp_path: Path,
) -> None:
    cluster = healthy_cluster
    victim = 2
    events: list[str] = []
    outage: list[int] = []  # time.time_ns() of the kill and of the restart, the ops' clock

    def nemesis(elapsed: float) -> None:
        if elapsed >= 12 and not events:
            cluster.kill(victim)
            outage.append(time.time_ns())
            events.append("killed")
        elif elapsed >= 27 and events == ["killed"]:
            outage.append(time.time_ns())
            cluster.start(victim, wait=False)
            events.append("started")

    ops, summary, _ = probe_run(cluster.bootstrap, tmp_path, 50, nemesis)
    assert events == ["killed", "started"]
    # Ops kept completing while the broker was down: sends and transactions both invoked and
    # acknowledged between the kill and the restart.
    down, up = outage
    during = Counter(o.f for o in ops if o.type == "ok" and o.f in ("send", "txn")
                     and o.meta is not None and o.meta.invoke_time is not None
                     and down < o.meta.invoke_time and o.time < up)
    # (at least a few: the count only holds ops of the outage itself, whatever the machine's
    # speed; 17 in 15 s at a load average of 50 on 2 cores, hundreds on a quiet one)
    assert during["send"] > 0 and during["txn"] > 0 and sum(during.values()) >= 5, during
    assert summary["abandoned_ops"] == 0
    assert_zero_anomalies(ops)
    assert contract_violations(ops) == []


def test_sigterm_stops_kmon_probe_cleanly(kafka_bootstrap: str, tmp_path: Path) -> None:
    history = tmp_path / "h.jsonl"
    tag = uuid.uuid4().hex[:6]
    proc = subprocess.Popen(
        [sys.executable, "-m", "kmon.cli", "probe", "-b", kafka_bootstrap, "--name", f"it{tag}",
         "--events-topic", f"kmon-it-events-{tag}", "--history", str(history),
         "--metrics-port", "0", "--rate", "30", "--set", "final_read_timeout=5"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (
                not history.exists() or history.stat().st_size < 20000):
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.5)
        # SIGUSR1 prints every thread's stack (a frozen probe's diagnosis) and the probe runs on.
        proc.send_signal(signal.SIGUSR1)
        grown = history.stat().st_size + 5000
        while time.monotonic() < deadline + 30 and history.stat().st_size < grown:
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "most recent call first" in err and "workload.py" in err, err
    summary = json.loads(out)
    assert summary["ops"] > 0 and summary["events_dropped"] == 0
    ops = list(iter_ops(history))
    assert sum(o.type == "invoke" for o in ops) == sum(o.type != "invoke" for o in ops)
    assert check(ops).valid
