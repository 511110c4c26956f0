"""The monitor killed mid-stream and restarted from its checkpoint: the same verdicts and
counters as a run straight through (real cluster, real Spark; nothing timed)."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from kmon.checker.anomaly import Anomaly
from kmon.checker.report import merge_key
from kmon.history.model import Op
from kmon.streaming import replay
from kmon.streaming.monitor import Monitor, recorded_partitions
from kmon.synth import SynthConfig, healthy
from tests.helpers import wait_until
from tests.integration.test_monitor import SECOND, _config, _create, _evidence, _producer
from tests.unit.streaming.cases import CASES, placed

RESTART_CASES = ("lost-write", "duplicate", "torn-transaction", "G1a", "poll-skip")


def _restart_stream(start: int) -> list[list[Op]]:
    """Two halves of one stream: crafted cases and healthy traffic, then the clock tick."""
    first, second = [], []
    for n, name in enumerate(RESTART_CASES):
        _, ops = CASES[name]
        evs = list(replay.as_events(placed(ops, name), probe=name,
                                    time_offset_ns=start + n * SECOND,
                                    time_scale=1_000_000))
        (first if n % 2 == 0 else second).extend(evs)
    synth = list(replay.as_events(
        placed(list(healthy(2_000, SynthConfig(keys=4, processes=2, keys_per_process=2))),
               "healthy"), probe="healthy", time_offset_ns=start + 30 * SECOND))
    first.extend(synth[:1_000])
    second.extend(synth[1_000:])
    # (``start`` is ten minutes ago)
    second.append(replay.clock_tick(start + 590 * SECOND, "clock"))
    return [first, second]


def _summary(evidence: list[dict]) -> set:
    out = set()
    for e in evidence:
        if e["update"]:
            continue
        mk = merge_key(Anomaly(e["anomaly"], e["record"]))
        out.add((e["probe"], e["anomaly"], json.dumps(mk if mk else e["record"],
                                                      sort_keys=True, default=str)))
    return out


def _counters(monitor: Monitor) -> dict:
    m = monitor.metrics
    return {"anomalies": dict(m.anomalies), "dead": dict(m.dead_letters),
            "unseen": dict(m.unseen_verdicts)}


def _wait_done(monitor: Monitor, events: int) -> None:
    def done() -> bool:
        found = {(k.anomaly, k.topic) for k in monitor.metrics.anomalies}
        return (monitor.metrics.events >= events
                and all((CASES[c][0], c) in found for c in RESTART_CASES))

    wait_until(done, "verdicts of the whole stream", 240)
    time.sleep(3)  # a few more micro-batches: nothing later may change the outcome


def test_kill_and_restart_gives_the_same_verdicts(
    spark: Any, kafka_bootstrap: str, tmp_path: Any,
) -> None:
    start = time.time_ns() - 600 * SECOND
    halves = _restart_stream(start)
    total = sum(len(h) for h in halves)

    # Uninterrupted.
    straight = _config(kafka_bootstrap, tmp_path, "s" + uuid.uuid4().hex[:8])
    _create(kafka_bootstrap, straight.events_topic)
    p = _producer(kafka_bootstrap)
    for h in halves:
        replay.produce(p, straight.events_topic, h)
    m = Monitor(straight, spark)
    m.start()
    try:
        _wait_done(m, total)
        expected, counts = _evidence(kafka_bootstrap, straight.anomalies_topic), _counters(m)
    finally:
        m.stop()
    assert {e["probe"] for e in expected} == set(RESTART_CASES)

    # Killed mid-stream: the driver dies after a micro-batch's outputs went out but before
    # anything recorded them (its snapshot, Spark's commit), then a new driver restarts.
    cfg = _config(kafka_bootstrap, tmp_path, "r" + uuid.uuid4().hex[:8])
    _create(kafka_bootstrap, cfg.events_topic)
    replay.produce(p, cfg.events_topic, halves[0])
    first = Monitor(cfg, spark)
    first.start()
    killed = _kill_after_first_verdict(first)
    try:
        wait_until(lambda: killed["done"] or not first.queries["keys"].isActive,
                   "the kill", 240)
        # Stage 1 stopped because of the simulated crash, not for a reason of its own.
        assert killed["done"], f"stage 1 died before the kill: {first.queries['keys'].exception()}"
    finally:
        first.stop()
    replay.produce(p, cfg.events_topic, halves[1])
    # Fresh metrics, restored from the checkpoint; other partition counts asked for, which
    # the checkpoint's stages do not take.
    first_counts = (first.state_partitions, first.txn_partitions)
    assert first.txn_partitions == max(1, first.state_partitions // 2)  # the default
    asked = replace(cfg, state_partitions=first.state_partitions + 1,
                    txn_partitions=first.txn_partitions + 1)
    second = Monitor(asked, spark)
    second.start()
    try:
        _wait_done(second, total)
        got, again = _evidence(kafka_bootstrap, cfg.anomalies_topic), _counters(second)
    finally:
        second.stop()
    assert _summary(got) == _summary(expected)
    assert again == counts
    assert (second.state_partitions, second.txn_partitions) == first_counts
    assert (_recorded(cfg.stage1_checkpoint), _recorded(cfg.stage2_checkpoint)) == first_counts


def _recorded(checkpoint: str) -> int | None:
    """The shuffle partitions a query's latest offsets file records."""
    offsets = Path(checkpoint, "offsets")
    latest = max((f for f in offsets.iterdir() if f.name.isdigit()), key=lambda f: int(f.name))
    return recorded_partitions(latest.read_text().splitlines())


def _kill_after_first_verdict(monitor: Monitor) -> dict:
    """Make stage 1's driver 'crash' right after it delivered its first verdicts."""
    outputs = monitor.outputs
    state = {"done": False}
    real_save = outputs._save

    def crash_once() -> None:
        if not state["done"] and sum(monitor.metrics.anomalies.values()) > 0:
            state["done"] = True
            raise RuntimeError("simulated driver crash after delivery, before the snapshot")
        real_save()

    outputs._save = crash_once  # type: ignore[method-assign]
    return state




def test_a_stop_in_the_middle_of_a_batch_is_a_clean_stop(
    spark: Any, kafka_bootstrap: str, tmp_path: Any,
) -> None:
    """``stop()`` interrupts the batch in flight. Spark recognises that interruption by
    matching the Python error's text, which used to carry the whole Java stack trace: the
    match overflowed the stream thread's stack, which died with a StackOverflowError dump and
    never reached "Stopped" (seen on most stops mid-batch before ``outputs.stop_aware``)."""
    cfg = _config(kafka_bootstrap, tmp_path, "x" + uuid.uuid4().hex[:8],
                  **{"max.events.per.trigger": "4000"})  # a backlog of batches of seconds
    _create(kafka_bootstrap, cfg.events_topic)
    replay.produce(_producer(kafka_bootstrap), cfg.events_topic, replay.as_events(
        placed(list(healthy(40_000, SynthConfig())), "healthy"), probe="healthy",
        time_offset_ns=time.time_ns() - 600 * SECOND))
    m = Monitor(cfg, spark)
    m.start()
    keys = m.queries["keys"]
    try:
        wait_until(lambda: any(p["numInputRows"] for p in keys.recentProgress),
                   "a first busy batch", 240)
        wait_until(lambda: keys.status["isTriggerActive"], "the next batch", 60)
        time.sleep(1.0)  # past its planning, into its job (the foreachBatch collect)
    finally:
        m.stop()
    assert {name: q.status["message"] for name, q in m.queries.items()} == {
        name: "Stopped" for name in m.queries}
    assert all(q.exception() is None for q in m.queries.values())
