"""The monitor end to end: op events in a real topic, real Spark, metrics and evidence out.

One monitor run (module fixture) reads one events topic holding, in this order: malformed
events, one small crafted history per anomaly type (each its own probe, its keys placed on a
topic named after the case), a healthy synthetic run, and a last event an hour of event time
later that moves the watermark past every grace period. Each test then asserts on what the run
exported. (``test_monitor_restart`` compares a monitor killed mid-stream and restarted from its
checkpoint with one that ran through.)

Nothing here is timed: waits poll for an expected outcome and fail only when it never comes.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kmon.checker.anomaly import Anomaly
from kmon.checker.report import merge_key
from kmon.history import avro
from kmon.history.model import Op, OpMeta
from kmon.streaming import config, decode, replay
from kmon.streaming.monitor import Monitor
from kmon.synth import SynthConfig, healthy
from tests.helpers import wait_until
from tests.unit.streaming.cases import CASES, placed

SECOND = 1_000_000_000
HEALTHY_EVENTS = 3_000


def _config(bootstrap: str, tmp: Any, run: str, **extra: str) -> config.MonitorConfig:
    return config.from_mapping({
        "kafka.bootstrap.servers": bootstrap, "checkpoint": str(tmp / f"ck-{run}"),
        "topics.events": f"ev-{run}", "topics.anomalies": f"an-{run}",
        "topics.facts": f"fa-{run}", "topics.dead-letters": f"dl-{run}",
        "metrics.port": 0, "trigger": "500ms", "txn.trigger": "500ms", "grace": "2s",
        "watermark.delay": "1s",
        "unseen.grace": "20s", **extra})


def _create(bootstrap: str, topic: str, partitions: int = 2) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                  replication_factor=1)])[topic].result(30)


def _producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap,
                     "enable.idempotence": True})  # each event exactly once, in order


def _read(bootstrap: str, topic: str) -> list[Any]:
    """Every record now in ``topic`` (all partitions, from the start)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                  "enable.auto.commit": False})  # assigned partitions, read once
    try:
        meta = c.list_topics(topic, timeout=10).topics[topic]
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in meta.partitions}
        c.assign([TopicPartition(topic, p, 0) for p in ends])
        out: list[Any] = []
        left = {p for p, end in ends.items() if end > 0}
        deadline = time.monotonic() + 30
        while left and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append(msg)
            if msg.offset() >= ends[msg.partition()] - 1:
                left.discard(msg.partition())
        return out
    finally:
        c.close()


def _evidence(bootstrap: str, topic: str) -> list[dict]:
    """Evidence records, duplicates (a replayed micro-batch) dropped by id."""
    seen: dict[str, dict] = {}
    for msg in _read(bootstrap, topic):
        rec = json.loads(msg.value())
        seen.setdefault(rec["id"], rec)
    return list(seen.values())


def _malformed(now: int) -> list[tuple[bytes, list | None]]:
    good = avro.encode_op(Op(1, now, 1, "ok", "send", [("send", 1, 1, 0)],
                             meta=OpMeta(probe="bad")))
    hdr = avro.kafka_headers()

    def event(**kw: Any) -> bytes:
        fields = {"index": 2, "time": now, "process": 1, "type": "ok", "f": "send",
                  "value": [("send", 1, 2, 1)], **kw}
        return avro.encode_op(Op(meta=OpMeta(probe="bad"), **fields))

    return [
        (b"\x00\x01 not avro at all", hdr),  # undecodable
        (good, None),  # no schema header
        (good, [(avro.SCHEMA_HEADER, b"op-event/99")]),  # unknown version
        (event(index=-5), hdr),  # negative index
        (event(value=[("send", 1, 2, -3)]), hdr),  # negative offset
        (event(time=now + 3600 * SECOND), hdr),  # an hour ahead of its Kafka timestamp
    ]


CLUSTER = "it-cluster"  # the monitor's cluster setting: on every metric and evidence record
LEADER = 2  # the cases' keys' leader broker, as their placements say

MALFORMED_REASONS = [decode.UNDECODABLE, decode.NO_HEADER, decode.UNKNOWN_VERSION,
                     decode.NEGATIVE_INDEX, decode.NEGATIVE_OFFSET, decode.TIME_IN_FUTURE]


@pytest.fixture(scope="module")
def run(spark: Any, kafka_bootstrap: str, tmp_path_factory: Any) -> Iterator[dict]:
    tag = uuid.uuid4().hex[:8]
    cfg = _config(kafka_bootstrap, tmp_path_factory.mktemp("monitor"), tag, cluster=CLUSTER)
    _create(kafka_bootstrap, cfg.events_topic)
    monitor = Monitor(cfg, spark)
    monitor.start()
    try:
        start = time.time_ns() - 600 * SECOND  # history clocks start ten minutes ago
        p = _producer(kafka_bootstrap)
        for value, headers in _malformed(time.time_ns()):
            p.produce(cfg.events_topic, value=value, headers=headers)
        for name, (_, ops) in CASES.items():
            replay.produce(p, cfg.events_topic, replay.as_events(
                placed(ops, name, LEADER), probe=name, time_offset_ns=start,
                time_scale=1_000_000))
        synth = healthy(HEALTHY_EVENTS, SynthConfig(keys=8, processes=4, keys_per_process=4))
        replay.produce(p, cfg.events_topic, replay.as_events(
            placed(list(synth), "healthy"), probe="healthy", time_offset_ns=start + 60 * SECOND))
        replay.produce(p, cfg.events_topic, [replay.clock_tick(time.time_ns(), "clock")])

        def all_in() -> bool:
            m = monitor.metrics
            found = {(k.anomaly, k.topic) for k in m.anomalies}
            return (sum(m.dead_letters.values()) >= len(MALFORMED_REASONS)
                    and all((a, case) in found for case, (a, _) in CASES.items())
                    and m.events >= HEALTHY_EVENTS)

        wait_until(all_in, "every case's verdict, every dead letter", timeout=240)
        time.sleep(2)  # let stage 2 and the last micro-batches settle (nothing is asserted on it)
        yield {"cfg": cfg, "monitor": monitor, "bootstrap": kafka_bootstrap,
               "evidence": _evidence(kafka_bootstrap, cfg.anomalies_topic)}
    finally:
        monitor.stop()


def _sample(monitor: Monitor, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples that have ``labels`` (whatever their other labels:
    ``cluster``, ``broker``)."""
    return sum(s.value for fam in monitor.registry.collect() for s in fam.samples
               if s.name == name and labels.items() <= s.labels.items())


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_anomaly_type_raises_its_metric_and_evidence(run: dict, case: str) -> None:
    anomaly, _ = CASES[case]
    monitor = run["monitor"]
    labelled = [k for k in monitor.metrics.anomalies if k.anomaly == anomaly and k.topic == case]
    assert labelled, f"no {anomaly} counted for topic {case}"
    assert sum(_sample(monitor, "kmon_anomalies_total", cluster=CLUSTER, anomaly=anomaly,
                       topic=case, partition=k.partition, broker=k.broker)
               for k in labelled) >= 1
    assert {k.broker for k in labelled} == {str(LEADER)}
    assert _sample(monitor, "kmon_anomaly_last_timestamp_seconds", cluster=CLUSTER,
                   anomaly=anomaly, topic=case, broker=str(LEADER)) > 0
    assert _sample(monitor, "kmon_detection_latency_seconds_count", anomaly=anomaly) >= 1
    records = [e for e in run["evidence"] if e["probe"] == case and e["anomaly"] == anomaly]
    assert records
    e = records[0]
    assert e["topic"] == case and e["partition"] is not None and e["key"] is not None
    assert e["values"] and e["ops"]
    assert e["offsets"] or anomaly == "precommitted-read"  # (its record names no offset)
    assert all({"index", "process", "time"} <= set(o) for o in e["ops"])
    assert e["detected_at"] >= e["decided_time"] > 0
    assert e["record"]["key"] == e["key"]
    assert (e["cluster"], e["broker"]) == (CLUSTER, LEADER)


def test_each_verdict_is_counted_once(run: dict) -> None:
    new = [e for e in run["evidence"] if not e["update"] and e["anomaly"] != "unseen"]
    counted = sum(run["monitor"].metrics.anomalies.values())
    assert counted == len(new)
    keys = [merge_key(Anomaly(e["anomaly"], e["record"])) for e in new]
    keyed = [(e["probe"], k) for e, k in zip(new, keys, strict=True) if k is not None]
    assert len(keyed) == len(set(keyed))


def test_healthy_run_has_no_anomaly(run: dict) -> None:
    assert not [e for e in run["evidence"] if e["probe"] == "healthy"]
    assert not [k for k in run["monitor"].metrics.anomalies if k.topic == "healthy"]
    m = run["monitor"]
    assert _sample(m, "kmon_end_to_end_delay_seconds_count", topic="healthy") > 0
    assert _sample(m, "kmon_monitor_events_total") >= HEALTHY_EVENTS
    assert _sample(m, "kmon_monitor_state_rows", operator="keys") > 0


def test_malformed_events_go_to_dead_letters_and_the_monitor_goes_on(run: dict) -> None:
    monitor, cfg = run["monitor"], run["cfg"]
    for reason in MALFORMED_REASONS:
        assert _sample(monitor, "kmon_dead_letters_total", reason=reason) == 1, reason
    letters = _read(run["bootstrap"], cfg.dead_letter_topic)
    reasons = sorted(dict(m.headers())["kmon-dead-letter-reason"].decode() for m in letters)
    assert reasons == sorted(MALFORMED_REASONS)
    assert b"not avro at all" in b"".join(m.value() for m in letters)
    # the events after them were all checked: every case's verdict is there
    assert all(q.isActive for q in monitor.queries.values())


def test_the_monitor_is_prometheus_scrapable(run: dict) -> None:
    from prometheus_client import generate_latest

    text = generate_latest(run["monitor"].registry).decode()
    for name in ("kmon_anomalies_total", "kmon_unseen_values", "kmon_realtime_lag_seconds",
                 "kmon_end_to_end_delay_seconds_bucket", "kmon_monitor_events_total",
                 "kmon_monitor_batch_duration_seconds_bucket", "kmon_monitor_state_bytes",
                 "kmon_monitor_watermark_delay_seconds", "kmon_dead_letters_total",
                 "kmon_detection_latency_seconds_bucket", "kmon_monitor_input_events_per_second",
                 "kmon_monitor_last_batch_timestamp_seconds", "kmon_monitor_state_rows",
                 "kmon_anomaly_last_timestamp_seconds", "kmon_monitor_start_timestamp_seconds"):
        assert f"\n{name}" in text, name
    samples = [line for line in text.splitlines() if line.startswith("kmon_")]
    assert samples and all(f'cluster="{CLUSTER}"' in line for line in samples)


def test_the_monitor_exports_its_output_topics_replicas(run: dict) -> None:
    """It created them (3 brokers: 3 replicas) and says so, for the single-replica alert."""
    cfg, reg = run["cfg"], run["monitor"].registry
    for topic in (cfg.anomalies_topic, cfg.facts_topic, cfg.dead_letter_topic):
        assert reg.get_sample_value("kmon_monitor_output_topic_replicas",
                                    {"cluster": CLUSTER, "topic": topic}) == 3, topic
    assert reg.get_sample_value("kmon_monitor_brokers", {"cluster": CLUSTER}) == 3


def test_expected_warnings_are_quiet(run: dict, spark: Any) -> None:
    """The state server's warning for every first read of a key (each transaction, in stage
    2) and the trigger's for every batch longer than it would drown an operator's log; a
    started monitor raises those loggers to ERROR. Each is named after a class Spark has (a
    logger of a misspelt name would be raised, silently, to no effect)."""
    from kmon.streaming.session import QUIET_LOGGERS

    jvm = spark.sparkContext._jvm
    for name, level in QUIET_LOGGERS.items():
        assert jvm.java.lang.Class.forName(name).getName() == name
        assert jvm.org.apache.logging.log4j.LogManager.getLogger(name).getLevel().toString() \
            == level


def test_the_reading_step_makes_the_checkers_fragments(spark: Any) -> None:
    """Raw events through the monitor's reading step in Spark (header in the JVM, the compiled
    reader in ``mapInArrow``, fragments pickled per key): exactly ``split``'s fragments."""
    import datetime

    from kmon.history.fragment import split, to_row
    from kmon.history.model import KeyPlacement, Rebalance
    from kmon.streaming.decode import unpack_fragments

    ops = [o for _, h in CASES.values() for o in h]
    ops += list(healthy(2_000, SynthConfig(keys=4, processes=2, keys_per_process=2)))
    for n, o in enumerate(ops):  # unique op indices across the histories
        o.index = n
    ops += [
        Op(9000, 1, 7, "ok", "txn", [("send", 1, 5, 7), ("send", "k", "v", None),
                                     ("poll", {1: [(3, 4), (4, "s"), (5, 2**60)], "x": []}),
                                     ("send", 1, 6, 8), ("poll", {1: [(6, 9)]})],
           rebalance_log=(Rebalance("assigned", (1, "y")),),
           meta=OpMeta(probe="p", invoke_time=0, placements={1: KeyPlacement("t", 0)})),
        Op(9001, 2, 7, "ok", "assign", [1, 2, "z"]), Op(9002, 3, 7, "info", "crash", None),
    ]
    hdr = [(avro.SCHEMA_HEADER, bytearray(avro.schema_header_value()))]
    rows = [(bytearray(avro.encode_op(o)), hdr, datetime.datetime(2100, 1, 1), "ev", 0, n)
            for n, o in enumerate(ops)]
    rows.append((bytearray(b"junk"), hdr, datetime.datetime(2100, 1, 1), "ev", 0, len(rows)))
    df = spark.createDataFrame(rows, "value binary, headers array<struct<key:string,"
                               "value:binary>>, timestamp timestamp, topic string, "
                               "partition int, offset long").repartition(3)
    got: dict[tuple, list] = {}
    dead = []
    for r in decode.key_rows(df, "5 seconds", 300_000).collect():
        if r.probe == decode.DEAD_PROBE:
            dead += [(r.ks, src) for _, src in decode.dead_letters(r.blob)]
            continue
        key = decode.key_of(r.kl, r.ks)
        for fr in unpack_fragments(key, r.blob):
            got[(fr.op, fr.key)] = to_row(fr)
    want = {}
    for o in ops:
        if o.type != "invoke":
            it = o.meta.invoke_time if o.meta and o.meta.invoke_time is not None else None
            want.update({(fr.op, fr.key): to_row(fr) for fr in split(o, it)})
    assert got == want
    assert dead == [(decode.UNDECODABLE, f"ev:0:{len(rows) - 1}")]


def test_investigate_explains_the_monitors_own_evidence(
        run: dict, capsys: pytest.CaptureFixture[str]) -> None:
    """`kmon investigate <id>` finds the record the monitor wrote, rebuilds the key's story
    from the op events the monitor read, and confirms it (test_investigate_kafka uses a
    hand-made record; this one is the monitor's)."""
    from kmon.cli import main

    [rec] = [e for e in run["evidence"] if e["probe"] == "lost-write"
             and e["anomaly"] == "lost-write" and not e["update"]]
    cfg = run["cfg"]
    code = main(["investigate", rec["id"], "--bootstrap", run["bootstrap"],
                 "--events-topic", cfg.events_topic, "--anomalies-topic", cfg.anomalies_topic,
                 "--window", "2"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"kmon investigate: lost-write {rec['id']} on key " in out, out
    assert "(topic lost-write, partition " in out, out
    assert "663" in out  # the value no reader saw
    assert "Verdict: lost-write confirmed" in out, out
