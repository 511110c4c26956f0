"""Evidence found in seconds: `kmon evidence --at` and `kmon investigate ID` against full scans.

Fills, on the local cluster, an anomalies topic with ``--records`` (1M) evidence-sized JSON
records and an events topic with ``--events`` (1M) op events, both spread over ``--days`` (7)
simulated days ending now (record timestamps set when producing; retention off). One evidence
record in the middle is a real lost write whose 3000 op events sit at its time among the others.
Then prints, in one run, the time to the first answer and to the complete answer of:

1. `kmon evidence --at MIDDLE` (+-15 min): the windowed read (in-process, and the CLI as a
   subprocess, interpreter start included), next to a full scan of the topic for the same rows;
2. `kmon investigate ID`: found backwards from the end, and with `--at` (its emitted time);
   op events read over the record's window; next to what investigate did before (both topics
   read whole). First answer: the evidence record found; complete: the story told.

Nothing is asserted; the load average is printed. Kafka: ``KMON_BOOTSTRAP``, or the suite's
local cluster at ``KMON_PORT_BASE``+50 (started if needed and stopped after, as the tests do).

    python bench/bench_evidence.py [--records N] [--events N] [--days D]
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_monitor import bootstrap

DAY = 86400.0
ANOMALIES = ("lost-write", "duplicate", "poll-skip", "unseen", "G1a", "inconsistent-offsets")
BENCH_ID = "bench-lost-write-0000000000000000"


def say(*a: Any) -> None:
    print(*a, flush=True)


def load() -> str:
    return "load {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


@dataclass
class Timing:
    """One measured answer: seconds to the first and to the complete answer, records read."""

    first: float | None
    complete: float
    read: int | None  # None: not known (the CLI's investigate does not say)
    found: int

    def line(self, label: str) -> str:
        first = f"{self.first:7.2f} s" if self.first is not None else "      - "
        read = f"{self.read:>9,}" if self.read is not None else f"{'-':>9}"
        return (f"  {label:<34} first {first}  complete {self.complete:7.2f} s  "
                f"read {read}  rows {self.found:,}")


# -- Kafka -------------------------------------------------------------------------------------

def create_topic(boot: str, name: str, partitions: int) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                  config={"retention.ms": "-1"})])[name].result(30)
    return name


def producer(boot: str) -> Any:
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": boot, "linger.ms": 100, "batch.size": 1_000_000,
                     "batch.num.messages": 10_000, "queue.buffering.max.messages": 500_000,
                     "queue.buffering.max.kbytes": 1_048_576})


def produce(p: Any, topic: str, items: Iterable[tuple[bytes, bytes | str, int, Any]]) -> int:
    n = 0
    for key, value, ts_ms, headers in items:
        while True:
            try:
                p.produce(topic, key=key, value=value, timestamp=ts_ms, headers=headers)
                break
            except BufferError:
                p.poll(0.1)
        n += 1
        if n % 50_000 == 0:
            p.poll(0)
    assert p.flush(300) == 0
    return n


# -- the data ----------------------------------------------------------------------------------

TEMPLATE = json.dumps({
    "id": "@ID@", "verdict": "@ID@", "update": False, "anomaly": "@A@", "probe": "probe-0",
    "key": 7, "topic": "kmon-probe", "partition": 7, "offsets": [123456, 123457],
    "values": [30064771073, 30064771074], "ops": [
        {"index": 1234567, "process": 3, "time": 1764140400000000000},
        {"index": 1234570, "process": 5, "time": 1764140400100000000}],
    "decided_time": 1764140400200000000, "stage": "key",
    "record": {"key": 7, "value": 30064771073, "offsets": [123456, 123457],
               "writer": 1234567, "reader": 1234570},
    "cluster": "@C@", "broker": 1, "detected_at": 0})
TEMPLATE = TEMPLATE.replace('"detected_at": 0', '"detected_at": @T@')


def filler(n: int, start: float, span: float) -> Iterable[tuple[bytes, str, int, Any]]:
    for i in range(n):
        ts = start + span * i / n
        rid = f"{i:032x}"
        value = (TEMPLATE.replace("@ID@", rid).replace("@A@", ANOMALIES[i % len(ANOMALIES)])
                 .replace("@C@", "prod" if i % 2 else "staging")
                 .replace("@T@", str(int(ts * 1e9))))
        yield rid.encode(), value, int(ts * 1000), None


def lost_write(t0: float) -> tuple[list[Any], dict[str, Any]]:
    """The lost write of the investigate tests at wall-clock time ``t0``, and its record."""
    from tests.integration.test_investigate_kafka import OFFSET, VALUE, WRITER, lost_write_ops

    ops = [dataclasses.replace(o, time=int(t0 * 1e9) + o.time) for o in lost_write_ops()]
    writer = next(o for o in ops if o.index == WRITER)
    record = {"id": BENCH_ID, "verdict": BENCH_ID, "update": False, "anomaly": "lost-write",
              "probe": "probe-0", "key": 0, "topic": "probe-0", "partition": 0,
              "offsets": [OFFSET], "values": [VALUE], "cluster": "prod", "broker": 1,
              "ops": [{"index": WRITER, "process": 2, "time": writer.time}],
              "decided_time": ops[-1].time, "detected_at": ops[-1].time + 2 * 10**9}
    return ops, record


def noise_events(n: int, start: float, span: float) -> Iterable[tuple[bytes, bytes, int, Any]]:
    """Op events of another probe and other keys (sends), ``n`` over ``span`` seconds."""
    from kmon.history.avro import encode_op, kafka_headers
    from kmon.history.model import Op, OpMeta

    headers, meta = kafka_headers(), OpMeta(probe="noise")
    for i in range(0, n, 2):
        ts = start + span * i / n
        k, v = 1000 + i % 64, i
        for j, (type_, off) in enumerate((("invoke", None), ("ok", i // 2))):
            op = Op(index=i + j, time=int(ts * 1e9) + j, process=i % 16, type=type_, f="send",
                    value=[("send", k, v, off)], meta=meta)
            yield str(i % 16).encode(), encode_op(op), int(ts * 1000), headers


def fill(boot: str, args: argparse.Namespace, now: float) -> dict[str, Any]:
    from kmon.history.avro import encode_op, kafka_headers

    span, start = args.days * DAY, now - args.days * DAY - 60
    middle = start + span / 2
    anomalies = create_topic(boot, f"bench-anomalies-{uuid.uuid4().hex[:6]}", 3)
    events = create_topic(boot, f"bench-events-{uuid.uuid4().hex[:6]}", 3)
    ops, record = lost_write(middle)
    # in timestamp order, as the monitor and the probes write them (CreateTime = now)
    special = [(BENCH_ID.encode(), json.dumps(record), record["detected_at"] // 10**6, None)]
    t = time.monotonic()
    n = produce(producer(boot), anomalies, heapq.merge(
        filler(args.records, start, span), special, key=lambda item: item[2]))
    say(f"  {n:,} evidence records produced in {time.monotonic() - t:.0f} s")
    headers = kafka_headers()
    story = [(str(o.process).encode(), encode_op(o), o.time // 10**6, headers) for o in ops]
    t = time.monotonic()
    m = produce(producer(boot), events, heapq.merge(
        noise_events(args.events, start, span), story, key=lambda item: item[2]))
    say(f"  {m:,} op events produced in {time.monotonic() - t:.0f} s; {load()}")
    return {"anomalies": anomalies, "events": events, "middle": middle,
            "emitted": record["detected_at"] / 1e9, "records": n, "events_n": m}


# -- the measurements --------------------------------------------------------------------------

def timed_rows(t: float, rows: Iterable[Any], read: Callable[[], int]) -> Timing:
    """Consume ``rows``, timing from ``t`` (monotonic) the first and the last."""
    first, found = None, 0
    for _ in rows:
        found += 1
        if first is None:
            first = time.monotonic() - t
    return Timing(first, time.monotonic() - t, read(), found)


def evidence_windowed(conf: dict[str, Any], topic: str, at: float) -> Timing:
    from kmon.investigate.listing import Filters, Listing
    from kmon.investigate.sources import TopicReader
    from kmon.investigate.timewindow import TimeWindow

    t = time.monotonic()
    with TopicReader(conf, topic, 600) as reader:
        listing = Listing(reader, TimeWindow(at - 900, at + 900), Filters())
        return timed_rows(t, listing.rows(), lambda: listing.read)


def evidence_full_scan(conf: dict[str, Any], topic: str, at: float) -> Timing:
    from kmon.investigate.sources import TopicReader

    def rows(reader: Any) -> Iterable[dict[str, Any]]:
        for msg in reader.read(reader.whole()):
            record = json.loads(msg.value())
            if at - 900 <= msg.timestamp()[1] / 1000 <= at + 900:
                yield record

    t = time.monotonic()
    with TopicReader(conf, topic, 600) as reader:
        return timed_rows(t, rows(reader), lambda: reader.records_read)


def cli(argv: list[str]) -> Timing:
    """The CLI as a subprocess (interpreter start included): its first stdout line after the
    table header (evidence: the first row; investigate prints its story at the end) and exit;
    rows = lines printed."""
    t = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "kmon.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    first, lines = None, 0
    assert proc.stdout is not None
    for line in proc.stdout:
        lines += 1
        if first is None and not line.startswith("ID "):
            first = time.monotonic() - t
    err = proc.stderr.read() if proc.stderr is not None else ""
    proc.wait()
    read = None
    if "read from" in err:
        read = int(err.rsplit(" read from", 1)[0].rsplit(" ", 1)[-1].replace(",", ""))
    if proc.returncode not in (0, 1):
        say(f"  ! {' '.join(argv[:2])} exited {proc.returncode}: {err[-500:]}")
    return Timing(first, time.monotonic() - t, read, lines)


def investigate_windowed(conf: dict[str, Any], topics: dict[str, Any],
                         at: float | None) -> Timing:
    from kmon.investigate import investigate, parse_evidence
    from kmon.investigate.evidence import wall_times
    from kmon.investigate.sources import locate_evidence, ops_from_events
    from kmon.investigate.timewindow import around_times

    t = time.monotonic()
    found = locate_evidence(conf, topics["anomalies"], BENCH_ID, 600, at=at)
    first = time.monotonic() - t
    ev = parse_evidence(found.record)
    window = around_times(wall_times(ev), 300)
    inv = investigate(ops_from_events(conf, topics["events"], 600, [], window), ev,
                      source="bench")
    if not inv.verdict.confirmed:
        say("  ! the lost write was not confirmed from the op events read")
    return Timing(first, time.monotonic() - t, found.records_read + inv.total_ops, 1)


def investigate_full_scan(conf: dict[str, Any], topics: dict[str, Any]) -> Timing:
    """What `kmon investigate ID` did before: both topics read whole."""
    from kmon.investigate import investigate, parse_evidence
    from kmon.investigate.sources import TopicReader, ops_from_events

    t, first, record = time.monotonic(), None, None
    with TopicReader(conf, topics["anomalies"], 600) as reader:
        for msg in reader.read(reader.whole()):
            if json.loads(msg.value()).get("id") == BENCH_ID:
                record = json.loads(msg.value())
        read = reader.records_read
    first = time.monotonic() - t  # the old code read to the end before answering
    inv = investigate(ops_from_events(conf, topics["events"], 600, []), parse_evidence(record),
                      source="bench")
    if not inv.verdict.confirmed:
        say("  ! the lost write was not confirmed from the op events read")
    return Timing(first, time.monotonic() - t, read + inv.total_ops, 1)


def run(boot: str, args: argparse.Namespace) -> None:
    now = time.time()
    say(f"kmon evidence benchmark: {os.cpu_count()} cores, {load()}")
    topics = fill(boot, args, now)
    conf = {"bootstrap.servers": boot}
    at, emitted = topics["middle"], topics["emitted"]
    conn = ["--bootstrap", boot, "--anomalies-topic", topics["anomalies"],
            "--events-topic", topics["events"]]
    results = {
        "evidence --at (in-process)": evidence_windowed(conf, topics["anomalies"], at),
        "evidence --at (CLI)": cli(["evidence", "--at", str(at), *conn]),
        "evidence: full scan": evidence_full_scan(conf, topics["anomalies"], at),
        "investigate ID (in-process)": investigate_windowed(conf, topics, None),
        "investigate ID --at (in-process)": investigate_windowed(conf, topics, emitted),
        "investigate ID (CLI)": cli(["investigate", BENCH_ID, *conn]),
        "investigate ID --at (CLI)": cli(["investigate", BENCH_ID, "--at", str(emitted),
                                          *conn]),
        "investigate: full scan (as before)": investigate_full_scan(conf, topics),
    }
    report(results, topics, args)


def report(results: dict[str, Timing], topics: dict[str, Any], args: argparse.Namespace) -> None:
    say("")
    say(f"== kmon evidence benchmark: {topics['records']:,} evidence records and "
        f"{topics['events_n']:,} op events over {args.days:g} simulated days; {load()} ==")
    for label, timing in results.items():
        say(timing.line(label))
    ev_full = results["evidence: full scan"].complete
    inv_full = results["investigate: full scan (as before)"].complete
    for label, full in (("evidence --at (in-process)", ev_full),
                        ("evidence --at (CLI)", ev_full),
                        ("investigate ID (in-process)", inv_full),
                        ("investigate ID --at (in-process)", inv_full),
                        ("investigate ID (CLI)", inv_full),
                        ("investigate ID --at (CLI)", inv_full)):
        say(f"  full scan / {label:<34} {full / results[label].complete:6.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--days", type=float, default=7.0)
    args = ap.parse_args()
    boot, cluster = bootstrap()
    try:
        run(boot, args)
    finally:
        if cluster is not None and os.environ.get("KMON_KEEP_CLUSTER") != "1":
            cluster.down()


if __name__ == "__main__":
    main()
