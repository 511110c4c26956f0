"""The driver's outputs: delivered, counted once, skipped on replay, restored on restart."""

from __future__ import annotations

import json
import re
import threading

import pytest

from kmon.checker.sink import TxnFact
from kmon.streaming.keyfold import (
    ANOMALY,
    DEAD,
    FACT,
    FACTS_FORMAT,
    FACTS_PER_RECORD,
    STATS,
    UNSEEN,
    KeyFold,
    facts_record,
)
from kmon.streaming.metrics import E2E_BUCKETS, MonitorMetrics, registry_with
from kmon.streaming.outputs import (
    KEYS,
    TRANSACTIONS,
    BatchInterrupted,
    DeliveryError,
    Outputs,
    interruption,
)
from kmon.streaming.snapshots import LocalSnapshotStore
from kmon.streaming.txnfold import parse_facts
from tests.unit.streaming.online import settings


class FakeMsg:
    def __init__(self, topic: str) -> None:
        self._topic = topic

    def topic(self) -> str:
        return self._topic


class FakeProducer:
    def __init__(self, fail: bool = False) -> None:
        self.sent: list[tuple] = []
        self.pending: list = []
        self.fail = fail

    def produce(self, topic, value=None, key=None, headers=None, on_delivery=None):
        self.sent.append((topic, key, value, headers))
        self.pending.append((on_delivery, topic))

    def poll(self, timeout):
        return 0

    def flush(self, timeout):
        for cb, topic in self.pending:
            cb("broker said no" if self.fail else None, FakeMsg(topic))
        self.pending = []
        return 0


def _row(kind: str, **kw):
    base = {"kind": kind, "probe": "p", "key": "1", "topic": "t", "part": 0, "broker": None,
            "atype": None,
            "id": None, "verdict": None, "upd": False, "decided": None, "writer": None,
            "body": None, "unseen": None, "lag": None, "e2e": None, "e2e_sum": None,
            "frags": 0, "state_bytes": 0, "state_written": 0, "raw": None, "settled": False}
    base.update(kw)
    return base


def _evidence(rid: str, anomaly: str = "lost-write", update: bool = False) -> dict:
    body = {"id": rid, "verdict": rid, "update": update, "anomaly": anomaly, "record": {}}
    return _row(ANOMALY, atype=anomaly, id=rid, verdict=rid, upd=update, decided=1_000_000_000,
                body=json.dumps(body))


def _fact(writer: int, probe: str = "p") -> dict:
    return {"kind": "visible", "writer": writer, "key": "1", "value": "5", "offset": 3,
            "outcome": "ok", "time": 10, "wm": 0, "probe": probe, "topic": "t", "partition": 0}


def _txn_fact(writer: int, kind: str = "visible") -> TxnFact:
    return TxnFact(kind, writer, 1, writer * 10, writer + 3, "info", 10 + writer, 7, 99)


def test_stage_1_groups_its_facts_by_writer_bucket_in_bounded_records() -> None:
    kf = KeyFold("p", 1, settings())
    kf.topic, kf.partition, kf.leader = "t", 1, 4
    many = [_txn_fact(16 * i) for i in range(FACTS_PER_RECORD + 5)]  # all bucket 0
    kf.facts = [_txn_fact(3), *many, _txn_fact(35, "invisible")]
    rows: list[dict] = []
    kf._flush_facts(rows, 77)
    got = [(r["writer"], json.loads(r["body"])) for r in rows]
    assert [(bucket, len(rec["vis"]) + len(rec["inv"])) for bucket, rec in got] == [
        (0, FACTS_PER_RECORD), (0, 5), (3, 2)]
    assert got[2][1] == {"v": FACTS_FORMAT, "probe": "p", "key": 1, "topic": "t",
                         "partition": 1, "leader": 4, "wm": 77,
                         "vis": [[3, 30, 6, 13]], "inv": [[35, 350, 38, "info", 45, 7, 99]]}
    assert [w for _, rec in got[:2] for w, *_ in rec["vis"]] == [f.writer for f in many]
    assert kf.facts == []
    kf._flush_facts(rows, 78)  # nothing new: no row
    assert len(rows) == 3


def _fields(f: TxnFact) -> tuple:
    return (f.kind, f.writer, f.key, f.value, f.offset, f.outcome, f.time, f.reader,
            f.max_read)


def test_stage_2_reads_back_the_facts_stage_1_wrote_in_their_types() -> None:
    for key, value in ((1, 10), ("k", "v-1"), (2, "7")):
        facts = [TxnFact("visible", 16, key, value, 3, "ok", 10),
                 TxnFact("invisible", 32, key, value, None, "info", 11, 5, 9)]
        body = json.dumps(facts_record("p", key, "t", 2, None, 5, facts))
        [rec] = parse_facts(body.encode(), "p", 0, 16)
        assert (rec.key_text, rec.place, rec.wm) == (json.dumps(key), ("t", 2, None), 5)
        assert [_fields(f) for f in rec.facts] == [_fields(f) for f in facts]


def test_stage_2_reads_a_facts_record_for_its_own_probe_and_bucket_only() -> None:
    facts = [_txn_fact(16), _txn_fact(3), _txn_fact(32, "invisible")]
    body = json.dumps(facts_record("p", 1, "t", 1, 4, 0, facts)).encode()
    [rec] = parse_facts(body, "p", 0, 16)
    assert [f.writer for f in rec.facts] == [16, 32]
    assert parse_facts(body, "q", 0, 16) == []  # another probe's
    assert parse_facts(body, "p", 5, 16) == []  # no fact of bucket 5
    for junk in (b"not json", b'{"a": 1}', b'{"v": 2, "probe": "p"}', b"[1]",
                 body.replace(b'"wm": 0', b'"wm": "x"')):
        assert parse_facts(junk, "p", 0, 16) == []


def test_stage_2_still_reads_the_facts_format_before_records() -> None:
    """Records of the previous release, still in the facts topic after an upgrade."""
    many = [_fact(16 * i) for i in range(5)]
    got = parse_facts(json.dumps(many).encode(), "p", 0, 16)
    assert [(r.key_text, r.place, r.wm) for r in got] == [("1", ("t", 0, None), 0)] * 5
    assert [_fields(r.facts[0]) for r in got] == [
        ("visible", 16 * i, 1, 5, 3, "ok", 10, -1, -1) for i in range(5)]
    assert len(parse_facts(json.dumps([_fact(3), _fact(16)]).encode(), "p", 0, 16)) == 1
    incomplete = {k: v for k, v in _fact(16).items() if k != "outcome"}
    assert len(parse_facts(json.dumps([incomplete, _fact(32)]).encode(), "p", 0, 16)) == 1


def test_the_driver_produces_facts_records_as_stage_1_made_them(tmp_path) -> None:
    out = _outputs(tmp_path)
    body = json.dumps([_fact(3), _fact(19)])
    out.handle(KEYS, 0, [_row(FACT, writer=3, body=body),
                         _row(FACT, probe="q", writer=0, body=json.dumps([_fact(16, "q")]))])
    assert [(t, k, v) for t, k, v, _ in out.producer.sent] == [
        ("fa", "3/p", body), ("fa", "0/q", json.dumps([_fact(16, "q")]))]


def _outputs(tmp_path, producer=None, metrics=None, now=2.0):
    return Outputs(anomalies_topic="an", facts_topic="fa", dead_letter_topic="dl",
                   producer=producer or FakeProducer(), metrics=metrics or MonitorMetrics(),
                   store=LocalSnapshotStore(tmp_path / "metrics"), e2e_bounds_s=E2E_BUCKETS,
                   clock=lambda: now)


def _count(m: MonitorMetrics, anomaly: str = "lost-write", broker: str = "unknown"
           ) -> float | None:
    return registry_with(m).get_sample_value(
        "kmon_anomalies_total", {"cluster": "local", "anomaly": anomaly, "topic": "t",
                                 "partition": "0", "broker": broker})


class _Registry:
    """A registry's samples looked up with ``cluster="local"`` (and ``broker="unknown"`` where
    the metric has it) unless told otherwise."""

    def __init__(self, m: MonitorMetrics) -> None:
        self.reg = registry_with(m)

    def get_sample_value(self, name: str, labels: dict[str, str] | None = None
                         ) -> float | None:
        labels = {"cluster": "local", **(labels or {})}
        if "topic" in labels:
            labels.setdefault("broker", "unknown")
        return self.reg.get_sample_value(name, labels)


def test_batch_delivers_and_counts(tmp_path) -> None:
    out = _outputs(tmp_path)
    rows = [_evidence("a1"), _evidence("a1b", update=True),
            _row(UNSEEN, atype="unseen", id="u1", body=json.dumps({"id": "u1"})),
            _row(FACT, writer=1, body=json.dumps([_fact(33), _fact(1)])),
            _row(DEAD, atype="undecodable", id="ev:0:5", raw=b"\x00junk"),
            _row(STATS, unseen=2, lag=3_000_000_000, e2e=[1] + [0] * 15, e2e_sum=1000)]
    out.handle(KEYS, 0, rows)
    sent = out.producer.sent
    assert [(t, k) for t, k, _, _ in sent] == [("an", "a1"), ("an", "a1b"), ("an", "u1"),
                                               ("fa", "1/p"), ("dl", "ev:0:5")]
    assert json.loads(sent[0][2])["detected_at"] == 2_000_000_000
    assert sent[4][2] == b"\x00junk"
    assert dict(sent[4][3])["kmon-dead-letter-reason"] == b"undecodable"
    assert json.loads(sent[3][2]) == [_fact(33), _fact(1)]  # writers 33 and 1: bucket 1 of 16
    m = out.metrics
    assert _count(m) == 1  # the update is evidence, not a new verdict
    reg = _Registry(m)
    assert reg.get_sample_value("kmon_detection_latency_seconds_sum",
                                {"anomaly": "lost-write"}) == pytest.approx(1.0)
    assert reg.get_sample_value("kmon_dead_letters_total", {"reason": "undecodable"}) == 1
    assert reg.get_sample_value("kmon_unseen_verdicts_total", {"topic": "t",
                                                              "partition": "0"}) == 1
    assert reg.get_sample_value("kmon_unseen_values", {"topic": "t", "partition": "0"}) == 2
    assert reg.get_sample_value("kmon_realtime_lag_seconds", {"topic": "t",
                                                             "partition": "0"}) == 3.0


def test_replayed_batch_is_skipped_whole(tmp_path) -> None:
    out = _outputs(tmp_path)
    out.handle(KEYS, 0, [_evidence("a1")])
    out.handle(KEYS, 0, [_evidence("a1")])  # Spark replays batch 0 after a crash
    assert _count(out.metrics) == 1 and len(out.producer.sent) == 1
    out.handle(TRANSACTIONS, 0, [_evidence("t1", "torn-transaction")])  # stages count apart
    assert _count(out.metrics, "torn-transaction") == 1


def test_restart_continues_counters_and_recognises_replays(tmp_path) -> None:
    first = _outputs(tmp_path)
    first.handle(KEYS, 0, [_evidence("a1")])
    first.handle(KEYS, 1, [_evidence("a2")])
    first.progress(KEYS, {"batchId": 1, "numInputRows": 40, "durationMs": {}, "eventTime": {}})
    again = _outputs(tmp_path)  # a new driver: fresh metrics, same checkpoint
    assert again.restore() is not None
    assert _count(again.metrics) == 2
    again.handle(KEYS, 1, [_evidence("a2")])  # replay of the last batch: nothing new
    again.handle(KEYS, 2, [_evidence("a3")])
    again.progress(KEYS, {"batchId": 1, "numInputRows": 40, "durationMs": {}, "eventTime": {}})
    assert _count(again.metrics) == 3
    assert _Registry(again.metrics).get_sample_value("kmon_monitor_events_total") == 40


def test_failed_delivery_fails_the_batch_and_counts_nothing(tmp_path) -> None:
    out = _outputs(tmp_path, producer=FakeProducer(fail=True))
    with pytest.raises(DeliveryError):
        out.handle(KEYS, 0, [_evidence("a1")])
    assert not _count(out.metrics)
    out.producer.fail = False
    out.handle(KEYS, 0, [_evidence("a1")])  # Spark retries the batch
    assert _count(out.metrics) == 1


def test_progress_reports(tmp_path) -> None:
    out = _outputs(tmp_path, now=1_700_000_010.0)
    out.progress(KEYS, {"batchId": 3, "numInputRows": 100, "inputRowsPerSecond": 50.0,
                        "durationMs": {"triggerExecution": 800},
                        "eventTime": {"watermark": "2023-11-14T22:13:20.000Z"},
                        "stateOperators": [{"numRowsTotal": 64, "memoryUsedBytes": 4096}]})
    out.progress(TRANSACTIONS, {"batchId": 9, "numInputRows": 5, "durationMs": {},
                                "stateOperators": [{"numRowsTotal": 16,
                                                    "memoryUsedBytes": 100}]})
    reg = _Registry(out.metrics)
    assert reg.get_sample_value("kmon_monitor_events_total") == 100  # stage 1's input only
    assert reg.get_sample_value("kmon_monitor_watermark_delay_seconds") == pytest.approx(10.0)
    assert reg.get_sample_value("kmon_monitor_state_rows", {"operator": "keys"}) == 64
    assert reg.get_sample_value("kmon_monitor_state_rows", {"operator": "transactions"}) == 16
    assert reg.get_sample_value("kmon_monitor_batch_duration_seconds_sum") == 0.8


def test_snapshots_keep_the_newest_and_survive_a_torn_file(tmp_path) -> None:
    store = LocalSnapshotStore(tmp_path)
    for n in range(6):
        store.save({"n": n})
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) == 4 and names[-1].endswith("000006.json")
    (tmp_path / names[-1]).write_text("{not json")
    again = LocalSnapshotStore(tmp_path)
    assert again.load()["n"] == 4
    again.save({"n": 7})  # numbering continues past the torn one
    assert LocalSnapshotStore(tmp_path).load()["n"] == 7


# Spark's StreamExecution.PROXY_ERROR, by which it tells a stopped Python foreachBatch from a
# failed one (the dots are unescaped there too).
_SPARK_STOP_CHECK = re.compile(
    r"py4j.protocol.Py4JJavaError: An error occurred while calling.+(\r\n|\r|\n): "
    r"(java.lang.InterruptedException|java.io.InterruptedIOException|"
    r"java.nio.channels.ClosedByInterruptException)")
_JAVA_STACK = "".join(f"\n\tat org.apache.spark.Frame{i}.run(Frame.scala:{i})" for i in range(200))


class FakeJavaError(Exception):
    """What a Py4JJavaError prints: the call, the Java exception, its whole stack."""


class InterruptedFrame:
    def __init__(self, cause: str) -> None:
        self.cause = cause

    def collect(self):
        raise FakeJavaError(f"An error occurred while calling o910.collectToPython.\n: "
                            f"{self.cause}{_JAVA_STACK}")


@pytest.mark.parametrize("cause", [
    "java.lang.InterruptedException",
    "java.nio.channels.ClosedByInterruptException",
    "org.apache.spark.SparkException: [SPARK_JOB_CANCELLED] Job 7 cancelled Query kmon-keys "
    "[id = 1, runId = 2] was stopped SQLSTATE: XXKDA",
])
def test_a_batch_interrupted_by_stop_says_so_in_two_lines(tmp_path, cause: str) -> None:
    out = _outputs(tmp_path)
    with pytest.raises(BatchInterrupted) as info:
        out.key_batch(InterruptedFrame(cause), 0)
    text = str(info.value)
    assert len(text.splitlines()) == 2 and "Frame0" not in text
    assert _SPARK_STOP_CHECK.search(text)
    assert cause in text
    assert out.done[KEYS] == -1  # nothing delivered: the checkpoint replays the batch


def test_other_batch_errors_pass_unchanged(tmp_path) -> None:
    out = _outputs(tmp_path)
    frame = InterruptedFrame("org.apache.spark.SparkException: [SPARK_JOB_CANCELLED] Job 7 "
                             "cancelled because the user asked")
    with pytest.raises(FakeJavaError):
        out.txn_batch(frame, 0)
    assert interruption(ValueError("no newline")) is None
    assert interruption(FakeJavaError("calling x\n: java.lang.OutOfMemoryError")) is None


class BlockingProducer(FakeProducer):
    """A flush that waits until the test lets it finish."""

    def __init__(self) -> None:
        super().__init__()
        self.flushing = threading.Event()
        self.release = threading.Event()

    def flush(self, timeout):
        self.flushing.set()
        self.release.wait(10)
        return super().flush(timeout)


def test_close_waits_for_a_running_batch_then_refuses_later_callbacks(tmp_path) -> None:
    # A stopped query's last callbacks can outlive stop(); a monitor restarted on the same
    # checkpoint must not race them for the next snapshot number.
    producer = BlockingProducer()
    out = _outputs(tmp_path, producer=producer)
    running = threading.Thread(target=out.handle, args=(KEYS, 0, [_evidence("a")]))
    running.start()
    assert producer.flushing.wait(10)
    closing = threading.Thread(target=out.close)
    closing.start()
    closing.join(0.3)
    assert closing.is_alive()  # waits for the batch in flight
    producer.release.set()
    running.join(10)
    closing.join(10)
    assert not closing.is_alive() and out.closed
    snapshots = sorted(p.name for p in (tmp_path / "metrics").iterdir())
    assert len(snapshots) == 1  # the batch in flight finished and was counted
    with pytest.raises(BatchInterrupted, match="the monitor stopped"):
        out.handle(KEYS, 1, [_evidence("b")])
    out.progress(KEYS, {"batchId": 1, "numInputRows": 10, "durationMs": {}})
    assert sorted(p.name for p in (tmp_path / "metrics").iterdir()) == snapshots
    assert [s[1] for s in producer.sent] == ["a"]


def test_rows_count_under_their_keys_leader_and_the_count_time_is_kept(tmp_path) -> None:
    clock = [100.0]
    out = Outputs(anomalies_topic="an", facts_topic="fa", dead_letter_topic="dl",
                  producer=FakeProducer(), metrics=MonitorMetrics(cluster="c1"),
                  store=LocalSnapshotStore(tmp_path / "metrics"), e2e_bounds_s=E2E_BUCKETS,
                  clock=lambda: clock[0])
    ev = _evidence("a1")
    ev["broker"] = 3
    out.handle(KEYS, 0, [ev, _row(UNSEEN, broker=3, atype="unseen", id="u1",
                                  body=json.dumps({"id": "u1"})),
                         _row(STATS, broker=3, unseen=1, lag=0, e2e=[1] + [0] * 15,
                              e2e_sum=1000)])
    reg = registry_with(out.metrics)
    labels = {"cluster": "c1", "topic": "t", "partition": "0", "broker": "3"}
    assert reg.get_sample_value("kmon_anomalies_total", {**labels, "anomaly": "lost-write"}) == 1
    assert reg.get_sample_value("kmon_anomaly_last_timestamp_seconds",
                                {**labels, "anomaly": "lost-write"}) == 100.0
    assert reg.get_sample_value("kmon_unseen_verdicts_total", labels) == 1
    assert reg.get_sample_value("kmon_unseen_values", labels) == 1
    assert reg.get_sample_value("kmon_end_to_end_delay_seconds_count",
                                {"cluster": "c1", "topic": "t", "broker": "3"}) == 1
    # a restarted driver exports the old time until a new verdict
    clock[0] = 500.0
    again = Outputs(anomalies_topic="an", facts_topic="fa", dead_letter_topic="dl",
                    producer=FakeProducer(), metrics=MonitorMetrics(cluster="c1"),
                    store=LocalSnapshotStore(tmp_path / "metrics"), e2e_bounds_s=E2E_BUCKETS,
                    clock=lambda: clock[0])
    again.restore()
    last = {**labels, "anomaly": "lost-write"}
    reg = registry_with(again.metrics)
    assert reg.get_sample_value("kmon_anomaly_last_timestamp_seconds", last) == 100.0
    ev = _evidence("a2")
    ev["broker"] = 3
    again.handle(KEYS, 1, [ev])
    assert reg.get_sample_value("kmon_anomaly_last_timestamp_seconds", last) == 500.0
