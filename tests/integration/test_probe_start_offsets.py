"""Where a probe consumer starts a partition, on the real cluster.

librdkafka 2.16 positions a partition assigned without an offset by its own queries, and those
race with the next assign or seek: re-assigned while a transaction's offset commit keeps the
committed offset pending, the consumer restarted from the log start, a rewind the checker
reported as ``nonmonotonic-poll`` in healthy probe runs. The probe now assigns absolute
offsets (``clients.start_offsets``); these tests pin down that it starts where it should.
"""

from __future__ import annotations

import contextlib
import io
import random
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kmon.checker import CheckConfig, Checker
from kmon.history import Op, OpMeta, Start, loads
from kmon.probes import clients as C
from kmon.probes import config as probe_config
from kmon.probes.metrics import ProbeMetrics
from kmon.probes.process import Process, encode_value
from kmon.probes.workload import Workload


@pytest.fixture
def workload(kafka_bootstrap: str, tmp_path: Path,
             request: pytest.FixtureRequest) -> Iterator[Workload]:
    """A one-key probe workload; a test's ``workload_settings`` mark adds settings."""
    tag = uuid.uuid4().hex[:6]
    mark = request.node.get_closest_marker("workload_settings")
    cfg = probe_config.load(env={}, overrides={
        "kafka.bootstrap.servers": kafka_bootstrap, "name": f"start{tag}", "partitions": "1",
        "live_keys": "1", "events.enabled": "false", "history": str(tmp_path / "h.jsonl"),
        "metrics.port": "0", **(mark.kwargs if mark else {})})
    wl = Workload(cfg, ProbeMetrics(), io.StringIO())
    wl.keyspace.start()
    yield wl
    wl.admin.delete_topics(list(wl.keyspace.topics), request_timeout=30)


def _filled_key(bootstrap: str, workload: Workload, n: int) -> tuple[int, str, int]:
    """The probe's one key with ``n`` records written to it: key, topic, partition."""
    key = workload.keyspace.readable_keys()[0]
    topic, partition = workload.keyspace.topic_partition(key)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        p.produce(topic, value=encode_value(i), partition=partition)
    assert p.flush(30) == 0
    return key, topic, partition


def _read(proc: Process, key: int, want: int) -> list[int]:
    offsets: list[int] = []
    for _ in range(50):
        reads = proc.poll()
        assert reads is not None
        offsets += [off for off, _ in reads.get(key, [])]
        if len(offsets) >= want:
            break
    return offsets


def _history(workload: Workload) -> list[Op]:
    history = workload.recorder.history
    assert isinstance(history, io.StringIO)
    return loads(history.getvalue(), "jsonl")


def _starts(workload: Workload) -> list[tuple[str, str | None, dict[Any, Start]]]:
    """(type, group, starts) of every assign op's completion."""
    return [(o.type, o.meta.group, o.meta.starts) for o in _history(workload)
            if o.f == "assign" and o.type != "invoke"]


def _reassign_while_pending(kafka_bootstrap: str, workload: Workload,
                            outside: list[Op] | None = None) -> tuple[int, list[int]]:
    """The key's group commits 10, then a transaction holds 20 pending for 2 s while the probe
    assigns the key, and re-assigns it 0.5 s later; returns the key and the offsets read.
    ``outside`` receives those two commits as ops of two processes outside the probe."""
    key, topic, partition = _filled_key(kafka_bootstrap, workload, 30)
    group = f"{workload.cfg.topic_prefix}-assign"  # the group assign-mode consumers use
    committer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
    t0 = time.time_ns()
    committer.commit(offsets=[TopicPartition(topic, partition, 10)], asynchronous=False)
    t1 = time.time_ns()
    # A transaction moves the group's offset to 20; until it commits, 20 is pending.
    txn = Producer({"bootstrap.servers": kafka_bootstrap,
                    "transactional.id": f"start-{uuid.uuid4().hex[:6]}"})
    txn.init_transactions(30)
    txn.begin_transaction()
    t2 = time.time_ns()
    txn.send_offsets_to_transaction([TopicPartition(topic, partition, 20)],
                                    committer.consumer_group_metadata(), 30)
    timer = threading.Timer(2.0, txn.commit_transaction, args=(30,))
    timer.start()
    proc = Process(0, workload, random.Random(0))
    try:
        assert proc.assign([key])
        time.sleep(0.5)  # librdkafka, left to position it, would be retrying its offset query
        # ... and restart this re-assign from offset 0 (an old query's answer lands on it)
        assert proc.assign([key])
        offsets = _read(proc, key, 10)
    finally:
        timer.join()
        t3 = time.time_ns()  # (the transaction committed by now)
        proc.close_clients()
        committer.close()
    if outside is not None:
        for p, off, f, start, end in ((1000, 10, "commit", t0, t1), (1001, 20, "txn", t2, t3)):
            mops = [("commit", key, off)]
            outside += [Op(-1, start, p, "invoke", f, mops, meta=OpMeta(group=group)),
                        Op(-1, end, p, "ok", f, mops,
                           meta=OpMeta(group=group, invoke_time=start))]
    return key, offsets


def test_a_reassign_while_an_offset_commit_is_pending_starts_at_the_committed_offset(
    kafka_bootstrap: str, workload: Workload,
) -> None:
    key, offsets = _reassign_while_pending(kafka_bootstrap, workload)
    assert offsets[:10] == list(range(20, 30))
    group = f"{workload.cfg.topic_prefix}-assign"
    # committed() waited out the pending transactional commit, both times
    assert _starts(workload) == [("ok", group, {key: Start(20, "committed")})] * 2
    commits = [o for o in _history(workload) if o.f == "commit" and o.type != "invoke"]
    assert commits and commits[-1].type == "ok" and commits[-1].commits() == [(key, 30)]


@pytest.mark.workload_settings(start_positions="client")
def test_without_the_workaround_librdkafka_restarts_the_reassigned_partition_at_its_log_start(
    kafka_bootstrap: str, workload: Workload,
) -> None:
    """``start_positions: client``: the race the workaround avoids, as the history shows it:
    starts left to the client (no offset), and reads from 0 although 20 is committed. The
    checker, given the group's commits, reports the start as ``offset-commit-reread``."""
    outside: list[Op] = []
    key, offsets = _reassign_while_pending(kafka_bootstrap, workload, outside)
    group = f"{workload.cfg.topic_prefix}-assign"
    assert _starts(workload) == [("ok", group, {key: Start(None, "client")})] * 2
    assert offsets[:10] == list(range(10)), "librdkafka 2.16's race did not show"
    ops = sorted(_history(workload) + outside, key=lambda o: o.time)
    for i, op in enumerate(ops):
        op.index = i
    report = Checker(CheckConfig(cycles=False)).run(ops)
    [reread] = report.errors["offset-commit-reread"]
    assert (reread["key"], reread["group"], reread["offset"], reread["source"]) == (
        key, group, 0, "client")
    assert reread["expected"] in ([10], [10, 20], [20])


def _pending_offset_commit(bootstrap: str, topic: str, partition: int, group: str,
                           committed: int, pending: int) -> threading.Thread:
    """The group's offset committed at ``committed``; a transaction holds it pending at
    ``pending``. The returned thread, once started, commits the transaction."""
    committer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    committer.commit(offsets=[TopicPartition(topic, partition, committed)], asynchronous=False)
    txn = Producer({"bootstrap.servers": bootstrap,
                    "transactional.id": f"start-{uuid.uuid4().hex[:6]}"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.send_offsets_to_transaction([TopicPartition(topic, partition, pending)],
                                    committer.consumer_group_metadata(), 30)
    committer.close()
    return threading.Thread(target=txn.commit_transaction, args=(30,))


@pytest.mark.workload_settings(op_timeout="1.5")
def test_a_catch_up_read_retries_an_assign_that_timed_out(
    kafka_bootstrap: str, workload: Workload, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The probe's final read after a leader pause once gave up on its one assign, whose
    committed-offset lookup timed out, and left acked values unread. Here the lookup times
    out on a pending offset commit (waited for up to ``op_timeout``); the transaction commits
    only once an assign has completed as info, whatever the time that took."""
    key, topic, partition = _filled_key(kafka_bootstrap, workload, 30)
    commit = _pending_offset_commit(kafka_bootstrap, topic, partition,
                                    f"{workload.cfg.topic_prefix}-assign", 10, 20)
    recorder = workload.recorder
    complete = recorder.complete

    def complete_then_commit(process: int, type_: str, *args: Any, **kwargs: Any) -> Any:
        op = complete(process, type_, *args, **kwargs)
        if op is not None and op.f == "assign" and type_ == "info" and not commit.is_alive():
            with contextlib.suppress(RuntimeError):  # started already: a later timeout
                commit.start()
        return op

    monkeypatch.setattr(recorder, "complete", complete_then_commit)
    proc = Process(0, workload, random.Random(0))
    try:
        done = proc.catch_up(60.0, lambda: False)
    finally:
        if commit.ident is not None:
            commit.join()
        proc.close_clients()
    history = recorder.history
    assert isinstance(history, io.StringIO)
    ops = [o for o in loads(history.getvalue(), "jsonl") if o.type != "invoke"]
    assigns = [o.type for o in ops if o.f == "assign"]
    assert commit.ident is not None, f"no assign timed out on the pending commit: {assigns}"
    assert assigns[0] == "info", "the first assign did not time out"
    assert assigns[-1] == "ok"
    assert done.polls > 0 and done.reached, done
    read = [off for o in ops if o.f == "poll" and o.type == "ok"
            for k, rs in o.value[0][1].items() if str(k) == str(key) for off, _ in rs]
    assert read == list(range(20, 30))


def test_a_key_nobody_committed_starts_at_the_log_start(
    kafka_bootstrap: str, workload: Workload,
) -> None:
    key, _, _ = _filled_key(kafka_bootstrap, workload, 5)
    proc = Process(0, workload, random.Random(0))
    try:
        assert proc.assign([key])
        assert _read(proc, key, 5) == [0, 1, 2, 3, 4]
    finally:
        proc.close_clients()
    assert _starts(workload) == [("ok", f"{workload.cfg.topic_prefix}-assign",
                                  {key: Start(0, "reset")})]


@pytest.mark.parametrize(("setting", "expected"), [
    (None, "earliest"), ("smallest", "earliest"), ("latest", "latest"), ("END", "latest"),
    ("error", None),
])
def test_offset_reset_follows_the_consumer_setting(setting: str | None,
                                                   expected: str | None) -> None:
    overrides = {"kafka.bootstrap.servers": "127.0.0.1:1"}
    if setting is not None:
        overrides["consumer.auto.offset.reset"] = setting
    cfg = probe_config.load(env={}, overrides=overrides)
    assert C.offset_reset(cfg) == expected
