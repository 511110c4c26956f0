"""The recorder: one totally ordered, well-formed history, to the file and the events producer;
the probe's metrics as exported (names and labels exactly as docs/metrics.md says)."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from kmon.checker import check
from kmon.history import KeyPlacement, Rebalance, iter_jsonl
from kmon.history.avro import decode_op
from kmon.history.model import Op, clock_tick, is_clock_tick
from kmon.probes.metrics import ProbeMetrics
from kmon.probes.recorder import Emitter, Recorder
from tests.unit.probes.test_probe_metrics import exercise

DOCS = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"


@pytest.fixture
def metrics() -> ProbeMetrics:
    return ProbeMetrics(CollectorRegistry())


def sample(m: ProbeMetrics, name: str, **labels: str) -> float:
    return m.registry.get_sample_value(name, {"cluster": m.identity.cluster, **labels}) or 0.0


def test_ops_get_increasing_indices_and_times(metrics: ProbeMetrics) -> None:
    rec = Recorder("p.1", metrics)
    a = rec.invoke(0, "send", [("send", 1, 10, None)])
    b = rec.invoke(1, "poll", [("poll", None)])
    c = rec.complete(0, "ok", [("send", 1, 10, 0)],
                     rec.meta(placements={1: KeyPlacement("t.0", 1, 2, 3)}))
    d = rec.complete(1, "ok", [("poll", {1: [(0, 10)]})],
                     rebalance_log=(Rebalance("assigned", (1,)),))
    assert [op.index for op in (a, b, c, d)] == [0, 1, 2, 3]
    assert a.time < b.time < c.time < d.time
    assert c.meta.invoke_time == a.time and d.meta.invoke_time == b.time
    assert c.meta.probe == "p.1"
    assert sample(metrics, "kmon_probe_ops_total", f="send", type="ok") == 1
    assert sample(metrics, "kmon_probe_op_duration_seconds_count", f="poll") == 1


def test_one_op_at_a_time_per_process(metrics: ProbeMetrics) -> None:
    rec = Recorder("p.1", metrics)
    rec.invoke(0, "poll", [("poll", None)])
    with pytest.raises(RuntimeError, match="pending"):
        rec.invoke(0, "poll", [("poll", None)])


def test_shutdown_completes_pending_ops_as_info(metrics: ProbeMetrics) -> None:
    out = io.StringIO()
    rec = Recorder("p.1", metrics, history=out)
    rec.invoke(0, "txn", [("send", 1, 10, None)],
               rec.meta(transactional_id="t-0", txn_seq=4))
    rec.invoke(1, "poll", [("poll", None)])
    rec.complete(1, "ok", [("poll", {})])
    assert rec.retire_pending("probe shut down") == 1
    # The op's own late completion is dropped: the history already said info; and so is
    # what the process's hung call does next once it returns (an info ends a process).
    assert rec.complete(0, "ok", [("send", 1, 10, 5)]) is None
    rec.invoke(0, "commit", [("commit", 1, 6)])
    rec.invoke(1, "poll", [("poll", None)])  # a process that was not hung goes on
    rec.complete(1, "ok", [("poll", {})])
    ops = list(iter_jsonl(out.getvalue().splitlines()))
    assert [(o.process, o.type, o.f) for o in ops[-3:]] == [
        (0, "info", "txn"), (1, "invoke", "poll"), (1, "ok", "poll")]
    info = ops[-3]
    assert info.meta.error == "probe shut down" and info.meta.txn_seq == 4
    assert check(ops).valid


def test_a_sealed_history_records_nothing_more(metrics: ProbeMetrics) -> None:
    out = io.StringIO()
    rec = Recorder("p.1", metrics, history=out)
    rec.invoke(2, "poll", [("poll", None)])
    assert rec.seal("probe shut down") == 1
    rec.invoke(3, "poll", [("poll", None)])
    assert rec.complete(3, "ok", [("poll", {})]) is None
    ops = list(iter_jsonl(out.getvalue().splitlines()))
    assert [(o.process, o.type) for o in ops] == [(2, "invoke"), (2, "info")]
    assert check(ops).valid


def test_history_file_reads_back_equal(metrics: ProbeMetrics) -> None:
    out = io.StringIO()
    rec = Recorder("p.1", metrics, history=out)
    written = [
        rec.invoke(3, "assign", [7, 8]),
        rec.complete(3, "ok", [7, 8], rec.meta(placements={7: KeyPlacement("t.0", 0)})),
        rec.invoke(3, "poll", [("poll", None)]),
        rec.complete(3, "ok", [("poll", {7: [(0, 5)], 8: []})]),
    ]
    assert list(iter_jsonl(out.getvalue().splitlines())) == written


class FakeProducer:
    """Stands in for librdkafka: a queue of ``room`` events, then BufferError."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.sent: list[tuple[bytes, bytes, list]] = []
        self.callbacks: list = []

    def produce(self, topic: str, value: bytes, key: bytes, headers: list, on_delivery) -> None:
        if len(self.sent) >= self.room:
            raise BufferError("Local: Queue full")
        self.sent.append((key, value, headers))
        self.callbacks.append(on_delivery)

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        return 0


def test_emitter_keys_by_process_and_counts_drops(metrics: ProbeMetrics,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeProducer(room=3)
    monkeypatch.setattr("kmon.probes.recorder.Producer", lambda conf: fake)
    em = Emitter({}, "events", metrics)
    rec = Recorder("p.1", metrics, emitter=em)
    ops = [rec.invoke(5, "poll", [("poll", None)]), rec.complete(5, "ok", [("poll", {})]),
           rec.invoke(6, "crash", None), rec.complete(6, "info", None)]
    assert [k for k, _, _ in fake.sent] == [b"5", b"5", b"6"]
    assert decode_op(fake.sent[1][1]) == ops[1]
    assert fake.sent[0][2] == [("kmon-schema", b"op-event/3")]
    assert (em.emitted, em.dropped) == (3, 1)  # the 4th found the buffer full
    from confluent_kafka import KafkaError
    fake.callbacks[0](KafkaError(KafkaError._MSG_TIMED_OUT), None)
    assert em.dropped == 2
    assert sample(metrics, "kmon_probe_events_emitted_total") == 3
    assert sample(metrics, "kmon_probe_events_dropped_total") == 2
    em.close(1.0)


class CountingProducer(FakeProducer):
    """A fake producer that knows how many of its events await a delivery report."""

    def __len__(self) -> int:
        return len(self.callbacks)

    def report(self, err: Any) -> None:
        self.callbacks.pop(0)(err, None)


def test_a_timed_out_delivery_renews_the_producer_and_the_old_one_drains(
        metrics: ProbeMetrics, monkeypatch: pytest.MonkeyPatch) -> None:
    from confluent_kafka import KafkaError

    made: list[CountingProducer] = []
    monkeypatch.setattr("kmon.probes.recorder.Producer",
                        lambda conf: made.append(CountingProducer(room=10)) or made[-1])
    em = Emitter({}, "events", metrics)
    for i in range(3):
        em.emit(Op(i, 5, 0, "invoke", "poll", [("poll", None)]))
    old = made[0]
    old.report(KafkaError(KafkaError._MSG_TIMED_OUT))  # stuck: everything it holds times out
    deadline = time.monotonic() + 10
    while em.renewals == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert em.renewals == 1 and em.producer is made[1] and em.dropped == 1
    em.emit(Op(3, 5, 0, "invoke", "poll", [("poll", None)]))
    assert len(made[1].sent) == 1 and len(old) == 2  # the old one still holds two
    old.report(None)
    old.report(KafkaError(KafkaError._MSG_TIMED_OUT))
    assert (em.delivered, em.dropped) == (1, 2)
    deadline = time.monotonic() + 10
    while em._retired and time.monotonic() < deadline:
        time.sleep(0.05)
    assert em._retired == [] and em.renewals == 1  # at most one renewal a minute
    em.close(1.0)


def test_a_failure_other_than_a_timeout_renews_nothing(
        metrics: ProbeMetrics, monkeypatch: pytest.MonkeyPatch) -> None:
    from confluent_kafka import KafkaError

    fake = CountingProducer(room=10)
    monkeypatch.setattr("kmon.probes.recorder.Producer", lambda conf: fake)
    em = Emitter({}, "events", metrics)
    em.emit(Op(0, 5, 0, "invoke", "poll", [("poll", None)]))
    fake.report(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    time.sleep(0.5)  # (the poller had its chance to renew)
    assert em.renewals == 0 and em.producer is fake and em.dropped == 1
    em.close(1.0)


class TickingProducer(FakeProducer):
    """A fake producer with metadata: the events topic has ``partitions`` partitions."""

    def __init__(self, room: int, partitions: int) -> None:
        super().__init__(room)
        self.partitions = partitions
        self.to: list[int | None] = []
        self.left = 0  # what flush() reports undelivered

    def produce(self, topic: str, value: bytes, headers: list, on_delivery,
                key: bytes | None = None, partition: int | None = None) -> None:
        super().produce(topic, value, key, headers, on_delivery)
        self.to.append(partition)

    def list_topics(self, topic: str, timeout: float) -> Any:
        meta = SimpleNamespace(error=None, partitions=dict.fromkeys(range(self.partitions)))
        return SimpleNamespace(topics={topic: meta})

    def flush(self, timeout: float) -> int:
        return self.left


def test_emitter_ticks_every_partition_and_counts_no_tick_as_an_op_event(
        metrics: ProbeMetrics, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = TickingProducer(room=6, partitions=3)
    monkeypatch.setattr("kmon.probes.recorder.Producer", lambda conf: fake)
    em = Emitter({}, "events", metrics, probe="p.1")
    em.emit(Op(0, 5, 0, "invoke", "poll", [("poll", None)]))
    em.tick()
    assert fake.to == [None, 0, 1, 2]  # the op event by key, a tick to each partition
    ticks = [decode_op(v) for _, v, _ in fake.sent[1:]]
    assert all(is_clock_tick(t) and t.meta.probe == "p.1" for t in ticks)
    assert [k for k, _, _ in fake.sent[1:]] == [None, None, None]
    em.tick()  # two partitions' worth of room left: the rest of the tick is skipped
    assert fake.to[4:] == [0, 1] and em.ticks == 5
    assert (em.emitted, em.dropped) == (1, 0)
    fake.callbacks[1](None, None)  # one tick delivered; four are still queued at close
    fake.left = 4
    assert em.close(1.0) == 0 and em.dropped == 0
    assert sample(metrics, "kmon_probe_events_emitted_total") == 1


def test_a_clock_tick_is_not_an_op_for_the_checker() -> None:
    ops = [clock_tick(10, "p"), Op(0, 20, 0, "invoke", "send", [("send", 1, 1, None)]),
           Op(1, 30, 0, "ok", "send", [("send", 1, 1, 0)])]
    assert check(ops).stats["ops"] == 2
    assert check(ops[:1]).reason is not None  # ticks alone test nothing


def _documented_probe_metrics() -> dict[str, tuple[str, set[str]]]:
    text = DOCS.read_text()
    section = text.split("## Probe", 1)[1]
    out = {}
    for m in re.finditer(r"^\| `(kmon_probe_\w+)` \| (\w+) \| ([^|]*)\|", section, re.M):
        labels = {x.strip(" `") for x in m.group(3).split(",") if x.strip(" `")}
        out[m.group(1)] = (m.group(2), labels)
    return out


def test_exported_metrics_are_exactly_the_documented_ones(metrics: ProbeMetrics) -> None:
    m = metrics
    exercise(m)
    exported = {}
    for fam in m.registry.collect():
        name = fam.name + ("_total" if fam.type == "counter" else "")
        labels = set()
        for s in fam.samples:
            labels |= set(s.labels) - {"le"}
        exported[name] = (fam.type, labels)
    documented = _documented_probe_metrics()
    assert documented, "no probe metrics found in docs/metrics.md"
    assert exported == documented
