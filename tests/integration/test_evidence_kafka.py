"""kmon evidence and a windowed kmon investigate against a real cluster.

Evidence records spread over 60 simulated hours (record timestamps set when producing) on a
3-partition anomalies topic: `kmon evidence` must return exactly the window's matching records
and read fewer records than the topic holds. Then an anomaly two days old among op events of
other days: `kmon investigate ID` finds it reading backwards from the end, and reads op events
only around the times it names.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kmon.cli import main
from kmon.history.avro import encode_op, kafka_headers
from kmon.investigate.sources import locate_evidence
from tests.integration.test_investigate_kafka import OFFSET, VALUE, WRITER, lost_write_ops

HOUR = 3600.0
N = 360  # one record every 10 simulated minutes: 60 hours
STEP = 600.0
ANOMALIES = ("lost-write", "duplicate", "unseen", "poll-skip")
CLUSTERS = ("prod", "staging", None)  # None: a record from before the cluster field


@dataclass(frozen=True)
class Sim:
    """One simulated evidence record: when it was emitted, and where."""

    i: int
    ts: float
    partition: int
    anomaly: str
    cluster: str | None
    broker: int | None

    @property
    def written_broker(self) -> int | None:
        """The broker as the record carries it (records without a cluster have none)."""
        return self.broker if self.cluster is not None else None

    @property
    def id(self) -> str:
        return f"ev-{self.i:04d}"

    def record(self) -> dict[str, Any]:
        rec: dict[str, Any] = {
            "id": self.id, "verdict": self.id, "update": False, "anomaly": self.anomaly,
            "probe": "probe-0", "key": self.i % 4, "topic": "kmon-probe",
            "partition": self.i % 4, "offsets": [self.i], "values": [10**9 + self.i],
            "ops": [{"index": self.i, "process": 1, "time": int(self.ts * 1e9) - 10**9}],
            "decided_time": int(self.ts * 1e9) - 10**8, "stage": "key", "record": {},
            "detected_at": int(self.ts * 1e9)}
        if self.cluster is not None:
            rec["cluster"] = self.cluster
            rec["broker"] = self.broker
        return rec


def simulated(base: float) -> list[Sim]:
    return [Sim(i, base + i * STEP, i % 3, ANOMALIES[i % 4], CLUSTERS[i % 3],
                None if i % 5 == 0 else i % 3 + 1) for i in range(N)]


def _topic(bootstrap: str, prefix: str, partitions: int) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # retention off: timestamps days old must not be deleted under the test
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=3,
                                  config={"retention.ms": "-1"})])[name].result(30)
    return name


def _producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                     "linger.ms": 20})


@pytest.fixture(scope="module")
def spread(kafka_bootstrap: str) -> tuple[str, list[Sim]]:
    topic = _topic(kafka_bootstrap, "anomalies", 3)
    sims = simulated(time.time() - 62 * HOUR)
    producer = _producer(kafka_bootstrap)
    for s in sims:
        producer.produce(topic, key=s.id.encode(), value=json.dumps(s.record()).encode(),
                         partition=s.partition, timestamp=int(s.ts * 1000))
    producer.produce(topic, value=b"not json", partition=0,
                     timestamp=int((sims[0].ts + 30 * HOUR) * 1000))
    assert producer.flush(60) == 0
    return topic, sims


def _run(capsys: pytest.CaptureFixture[str], bootstrap: str, topic: str,
         *args: str) -> tuple[int, list[str], int]:
    code = main(["evidence", "--bootstrap", bootstrap, "--anomalies-topic", topic, *args])
    out, err = capsys.readouterr()
    m = re.search(r"; (\d+) read from ", err)
    assert m, err
    return code, out.splitlines(), int(m[1])


def test_at_window_with_filters_returns_exactly_the_matching_records(
    kafka_bootstrap: str, spread: tuple[str, list[Sim]], capsys: pytest.CaptureFixture[str],
) -> None:
    topic, sims = spread
    at = sims[150].ts
    code, lines, read = _run(capsys, kafka_bootstrap, topic, "--at", str(at), "--window", "3h",
                             "--anomaly", "duplicate", "--cluster", "prod", "--json")
    expected = [s.id for s in sims if at - 3 * HOUR <= s.ts <= at + 3 * HOUR
                and s.anomaly == "duplicate" and s.cluster in ("prod", None)]
    got = [json.loads(line)["id"] for line in lines]
    assert code == 0 and sorted(got) == sorted(expected) and len(expected) >= 4
    in_window = sum(1 for s in sims if at - 3 * HOUR <= s.ts <= at + 3 * HOUR)
    assert in_window <= read < N // 4, (read, in_window)


def test_from_to_window_broker_and_partition_filters_in_a_table(
    kafka_bootstrap: str, spread: tuple[str, list[Sim]], capsys: pytest.CaptureFixture[str],
) -> None:
    topic, sims = spread
    start, end = sims[40].ts, sims[100].ts
    code, lines, read = _run(capsys, kafka_bootstrap, topic, "--from", str(start), "--to",
                             str(end), "--broker", "2", "--partition", "1")
    expected = [s.id for s in sims if start <= s.ts <= end and s.i % 4 == 1
                and s.written_broker in (2, None)]
    assert code == 0 and lines[0].split()[:3] == ["ID", "EMITTED", "ANOMALY"]
    assert sorted(line.split()[0] for line in lines[1:]) == sorted(expected)
    assert read < N // 2


def test_iso_times_since_limit_and_an_empty_window(
    kafka_bootstrap: str, spread: tuple[str, list[Sim]], capsys: pytest.CaptureFixture[str],
) -> None:
    topic, sims = spread
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(sims[200].ts))
    code, lines, _ = _run(capsys, kafka_bootstrap, topic, "--at", iso, "--window", "1m")
    assert code == 0 and [line.split()[0] for line in lines[1:]] == [sims[200].id]
    code, lines, read = _run(capsys, kafka_bootstrap, topic, "--at", iso, "--window", "10h",
                             "--limit", "3", "--json")
    assert code == 0 and len(lines) == 3 and read <= N // 4
    code, lines, read = _run(capsys, kafka_bootstrap, topic, "--since", "1h")
    assert code == 1 and lines == [lines[0]] and read == 0  # the newest is 2 hours old
    code, lines, _ = _run(capsys, kafka_bootstrap, topic, "--from", str(sims[0].ts - 60),
                          "--anomaly", "unseen", "--json")
    assert len(lines) == N // 4


def test_locate_reads_backwards_or_at_a_time_not_the_whole_topic(
    kafka_bootstrap: str, spread: tuple[str, list[Sim]],
) -> None:
    topic, sims = spread
    conf = {"bootstrap.servers": kafka_bootstrap}
    recent = locate_evidence(conf, topic, sims[-5].id, timeout=60)
    assert recent.record["id"] == sims[-5].id and recent.records_read < N // 4
    old = locate_evidence(conf, topic, sims[250].id, timeout=60)  # 20 hours before the end
    assert old.record["id"] == sims[250].id and old.records_read < N * 2 // 3
    at = locate_evidence(conf, topic, sims[250].id, timeout=60, at=sims[250].ts)
    assert at.timestamp_ms == int(sims[250].ts * 1000) and at.records_read <= 3


@pytest.fixture(scope="module")
def old_anomaly(kafka_bootstrap: str) -> dict[str, str]:
    """The lost write of test_investigate_kafka, two days ago, among garbage of other days."""
    events, anomalies = _topic(kafka_bootstrap, "events", 3), _topic(kafka_bootstrap,
                                                                        "anomalies", 1)
    t0 = time.time() - 48 * HOUR
    producer = _producer(kafka_bootstrap)
    ops = [dataclasses.replace(o, time=int(t0 * 1e9) + o.time) for o in lost_write_ops()]

    def garbage(at: float) -> None:  # op events nobody needs: undecodable, so a read shows
        for k in range(20):
            producer.produce(events, value=b"\x00garbage", headers=kafka_headers(),
                             timestamp=int((at + k) * 1000))

    garbage(t0 - 20 * HOUR)  # in time order, as probes write them
    for o in ops:
        producer.produce(events, key=str(o.process).encode(), value=encode_op(o),
                         headers=kafka_headers(), timestamp=o.time // 10**6)
    garbage(t0 + 20 * HOUR)
    writer = next(o for o in ops if o.index == WRITER)
    record = {"id": "an-old", "anomaly": "lost-write", "key": 0, "topic": "probe-0",
              "partition": 0, "probe": "probe-0", "offsets": [OFFSET], "values": [VALUE],
              "ops": [{"index": WRITER, "process": 2, "time": writer.time}],
              "decided_time": ops[-1].time}
    for k, ts in enumerate((t0 - 30 * HOUR, t0 + 60, t0 + 20 * HOUR, time.time() - 60)):
        rec = record if k == 1 else {**record, "id": f"other-{k}"}
        producer.produce(anomalies, value=json.dumps(rec).encode(), timestamp=int(ts * 1000))
    assert producer.flush(60) == 0
    return {"events": events, "anomalies": anomalies, "at": str(t0 + 60)}


@pytest.mark.parametrize("at", [False, True])
def test_investigate_reads_only_the_window_of_an_old_anomaly(
    kafka_bootstrap: str, old_anomaly: dict[str, str], capsys: pytest.CaptureFixture[str],
    at: bool,
) -> None:
    code = main(["investigate", "an-old", "--bootstrap", kafka_bootstrap,
                 "--events-topic", old_anomaly["events"],
                 "--anomalies-topic", old_anomaly["anomalies"], "--window", "2",
                 *(["--at", old_anomaly["at"]] if at else [])])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"({len(lost_write_ops())} ops read, " in out, out
    assert "could not be decoded" not in out  # the garbage of other days was never read
    assert "Verdict: lost-write confirmed" in out
