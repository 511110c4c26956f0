"""kmon investigate against a real cluster: evidence from the anomalies topic, Avro op events.

The history is a synthetic run with one acknowledged write that no poll ever returns (the
monitor's fault tests will provide real ones); its ops are produced as Avro op events, with a
corrupt event among them (the monitor's dead-letter case), and an evidence record is produced to
the anomalies topic among others.
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kmon.cli import main
from kmon.history.avro import encode_op, kafka_headers
from kmon.history.model import Op, OpMeta
from kmon.synth import SynthConfig, healthy

KEY, VALUE, OFFSET, WRITER = 0, 8589934619, 59, 403


def lost_write_ops() -> list[Op]:
    ops = list(healthy(3000, SynthConfig(keys=4, processes=4, keys_per_process=2, seed=7)))
    out = []
    for o in ops:
        if o.type == "ok" and o.f in ("poll", "txn") and o.value:
            value = [("poll", {k: [(off, v) for off, v in pairs if not (k == KEY and v == VALUE)]
                               for k, pairs in m[1].items()}) if m[0] == "poll" and m[1] else m
                     for m in o.value]
            o = dataclasses.replace(o, value=value)
        # what a probe emits: its id on every op
        out.append(dataclasses.replace(o, meta=OpMeta(probe="probe-0")))
    return out


def _create(bootstrap: str, name: str, partitions: int) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=3)])[
        name].result(30)
    return name


@pytest.fixture(scope="module")
def topics(kafka_bootstrap: str) -> dict[str, str]:
    suffix = uuid.uuid4().hex[:8]
    events = _create(kafka_bootstrap, f"events-{suffix}", 3)
    anomalies = _create(kafka_bootstrap, f"anomalies-{suffix}", 1)
    producer = Producer({
        "bootstrap.servers": kafka_bootstrap,
        "acks": "all",  # the test reads everything back: nothing may be lost
        "enable.idempotence": True,  # retries must not duplicate op events
    })
    for op in lost_write_ops():
        # keyed by process, like a probe spreading processes over partitions
        producer.produce(events, key=str(op.process).encode(), value=encode_op(op),
                         headers=kafka_headers())
    producer.produce(events, value=b"\x00garbage", headers=kafka_headers())
    for record in (
        {"id": "an-0", "anomaly": "poll-skip", "key": KEY, "topic": "probe-0", "partition": 0,
         "ops": [357, 413]},
        {"id": "an-1", "anomaly": "lost-write", "key": KEY, "topic": "probe-0", "partition": 0,
         "value": VALUE, "offset": OFFSET, "ops": [{"index": WRITER, "process": 2}]},
    ):
        producer.produce(anomalies, key=record["id"].encode(), value=json.dumps(record).encode())
    producer.produce(anomalies, value=b"not json")
    assert producer.flush(60) == 0
    return {"events": events, "anomalies": anomalies}


def test_investigate_an_anomaly_id_from_the_topics(
    kafka_bootstrap: str, topics: dict[str, str], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    html = tmp_path / "an-1.html"
    code = main(["investigate", "an-1", "--bootstrap", kafka_bootstrap,
                 "--events-topic", topics["events"], "--anomalies-topic", topics["anomalies"],
                 "--window", "2", "--html", str(html)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "kmon investigate: lost-write an-1 on key 0 (topic probe-0, partition 0)" in out
    assert f"({len(lost_write_ops())} ops read, " in out, out
    assert "warning: 1 op events could not be decoded" in out
    assert re.search(rf"\*\s+{WRITER}\s+2 .* ok\s+send\s+wrote {VALUE} at {OFFSET}", out)
    assert re.search(rf"\*\s+{OFFSET}\s+{VALUE}\s+op {WRITER} \(p2, ok\)\s+never read", out)
    assert "Verdict: lost-write confirmed" in out
    assert html.is_file()


def test_investigate_a_key_and_offset_from_the_events_topic(
    kafka_bootstrap: str, topics: dict[str, str], capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["investigate", "--key", str(KEY), "--offset", str(OFFSET), "--window", "0",
                 "--bootstrap", kafka_bootstrap, "--events-topic", topics["events"], "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["log"] == [{"offset": OFFSET, "values": [
        {"value": VALUE, "writers": [WRITER], "readers": []}]}]
    [dead] = out["undecodable-events"]
    assert dead.startswith(topics["events"] + "[") and "not an op event" in dead


def test_unknown_id_and_unknown_topic_are_errors(
    kafka_bootstrap: str, topics: dict[str, str], capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["investigate", "an-404", "--bootstrap", kafka_bootstrap,
                 "--anomalies-topic", topics["anomalies"], "--timeout", "60"]) == 2
    assert "no evidence record with id 'an-404'" in capsys.readouterr().err
    assert main(["investigate", "an-1", "--bootstrap", kafka_bootstrap,
                 "--anomalies-topic", "no-such-topic-kmon", "--timeout", "60"]) == 2
    assert "not found" in capsys.readouterr().err
