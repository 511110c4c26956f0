"""One watermark per events partition: evidence held up in one partition holds back absence
verdicts (real cluster, real Spark).

A reader's poll proves a value was not lost, but its completion is stuck in events partition 1
(its leader failing over, say) while partition 0 runs five minutes of event time ahead. With one
watermark for the topic the monitor reported the value lost as soon as partition 0's clock
passed the grace period: a false alarm. Now it waits for partition 1, and a lost write that
partition 1 has no say in is still reported once both partitions are past it.
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from kmon.history import avro
from kmon.history.model import Op, clock_tick
from kmon.streaming import replay
from kmon.streaming.config import ConfigError
from kmon.streaming.monitor import EventsTopicChanged, Monitor
from tests.checker.helpers import history, poll, send
from tests.helpers import wait_until
from tests.integration.test_monitor import SECOND, _config, _create, _producer
from tests.unit.streaming.cases import CASES, placed

HELD, CONTROL = "held", "control"


def _to_partition(producer: Any, topic: str, ops: list[Op], partition: int) -> None:
    headers = avro.kafka_headers()
    for op in ops:
        producer.produce(topic, value=avro.encode_op(op), partition=partition, headers=headers)
    producer.flush(30)


def _watermark_s(monitor: Monitor) -> float:
    p = monitor.queries["keys"].lastProgress or {}
    wm = (p.get("eventTime") or {}).get("watermark")
    return datetime.fromisoformat(wm.replace("Z", "+00:00")).timestamp() if wm else 0.0


def _found(monitor: Monitor) -> set[tuple[str, str]]:
    return {(k.anomaly, k.topic) for k in monitor.metrics.anomalies}


def test_a_lagging_events_partition_holds_back_absence_verdicts(
    spark: Any, kafka_bootstrap: str, tmp_path: Any,
) -> None:
    start = time.time_ns() - 600 * SECOND
    # Key 1: offsets 0 and 1 written; process 1 reads only offset 1 (so 0 looks lost), process
    # 2 reads both -- its poll is the evidence stuck in partition 1.
    ops = replay.as_events(placed(history(
        (0, "ok", "send", [send(1, "a", 0)]), (0, "ok", "send", [send(1, "b", 1)]),
        (1, "ok", "poll", [poll({1: [(1, "b")]})]),
        (2, "ok", "poll", [poll({1: [(0, "a"), (1, "b")]})])), HELD),
        probe=HELD, time_offset_ns=start, time_scale=1_000_000)
    held = [op for op in ops if op.process == 2]
    fresh = [op for op in ops if op.process != 2]
    control = list(replay.as_events(placed(CASES["lost-write"][1], CONTROL), probe=CONTROL,
                                    time_offset_ns=start, time_scale=1_000_000))
    ahead = start + 300 * SECOND

    cfg = _config(kafka_bootstrap, tmp_path, "w" + uuid.uuid4().hex[:8])
    _create(kafka_bootstrap, cfg.events_topic, partitions=2)
    p = _producer(kafka_bootstrap)
    monitor = Monitor(cfg, spark)
    monitor.start()
    try:
        assert monitor.partitions == [0, 1]
        # Partition 1 has its reader's invoke, then nothing; partition 0 runs ahead.
        _to_partition(p, cfg.events_topic, held[:1], 1)
        _to_partition(p, cfg.events_topic, [*fresh, *control, clock_tick(ahead, "clock")], 0)
        sent = 1 + len(fresh) + len(control) + 1
        wait_until(lambda: monitor.metrics.events >= sent and _watermark_s(monitor) > 0,
                   "partition 0's events read", 120)
        time.sleep(3)  # micro-batches enough for verdicts, had the watermark allowed them
        assert _watermark_s(monitor) < start / 1e9 + 10, "the watermark followed partition 0"
        # The control's poll skip is a presence anomaly, reported at once; absence waits.
        assert _found(monitor) == {("poll-skip", CONTROL)}, "decided before partition 1 caught up"

        # Partition 1 catches up: the stuck poll, then its clock.
        _to_partition(p, cfg.events_topic, [*held[1:], clock_tick(ahead, "clock")], 1)
        wait_until(lambda: ("lost-write", CONTROL) in _found(monitor),
                   "the control's lost write, once both partitions are past it", 120)
        time.sleep(3)
        assert _found(monitor) == {("poll-skip", CONTROL), ("lost-write", CONTROL)}

        # A partition added while it runs would go unread: the monitor stops, naming it ...
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        admin.create_partitions([NewPartitions(cfg.events_topic, 3)])[cfg.events_topic].result(30)

        def check_now() -> bool:
            monitor._partitions_checked = 0.0  # due now, not in a minute
            return monitor.await_termination(timeout=0.5)

        with pytest.raises(EventsTopicChanged, match=r"now has partitions \[0, 1, 2\]"):
            wait_until(check_now, "the check", 60)
    finally:
        monitor.stop()
        p.flush(10)
        p.close()
    # ... and its checkpoint, written for two sources, is refused for three.
    with pytest.raises(ConfigError, match=r"checkpoint: .* new checkpoint location"):
        Monitor(cfg, spark).start()


def test_a_backlog_is_read_in_proportion_across_events_partitions(
    spark: Any, kafka_bootstrap: str, tmp_path: Any,
) -> None:
    """Through a backlog, each events partition's source reads its share of a batch in
    proportion to its backlog (``monitor.source_caps``), so that partitions holding unequal
    shares of the events advance through the same event time; an even split let the larger
    one fall behind batch after batch."""
    start = time.time_ns() - 600 * SECOND
    ticks = [clock_tick(start + i * 10_000_000, "clock") for i in range(1200)]
    cfg = _config(kafka_bootstrap, tmp_path, "c" + uuid.uuid4().hex[:8],
                  **{"max.events.per.trigger": "400"})
    _create(kafka_bootstrap, cfg.events_topic, partitions=2)
    p = _producer(kafka_bootstrap)
    _to_partition(p, cfg.events_topic, ticks[:900], 0)  # three quarters of the events
    _to_partition(p, cfg.events_topic, ticks[900:], 1)
    p.close()
    monitor = Monitor(cfg, spark)
    monitor.start()
    try:
        assert monitor.source_caps == {0: 300, 1: 100}
        wait_until(lambda: monitor.metrics.events >= 1200, "the backlog read", 120)
        busy = [q for q in monitor.queries["keys"].recentProgress if q["numInputRows"] > 0]
        first = busy[0]["sources"]  # one source per partition, in partition order
        assert [s["numInputRows"] for s in first] == [300, 100]
        assert len(busy) == 3  # both partitions drained together, batch by batch
    finally:
        monitor.stop()
