"""The rows of the detection matrix (phase 2): a probe preset, a fault, and what the monitor
must report.

Each scenario runs the probe with ``preset`` (see ``kmon.nemesis.presets``), lets it warm up,
starts the fault, holds it ``duration`` seconds, stops it, lets the probe run on to a final
read, and compares the monitor's anomalies with the expectation:

- ``must``: every one of these types must be reported;
- ``any_of``: at least one of these (the real fault decides which it produces);
- ``allowed``: may be reported without failing the row (Kafka's model allows them, or the
  fault may produce them as a side effect);
- everything else in ``kmon.checker.ANOMALY_TYPES`` must not be reported.

``evidence``: the row's ``must`` holds only if the broker's log shows the fault really did
it (``duplicate`` only when a value is on disk at two offsets); the runner checks with
``kmon.nemesis.segments`` and reports the row as "not provoked" otherwise.

``origin`` tells real faults on real Kafka from injected ones (a fault-injecting layer between
probe and broker, or a replay into the events topic) for anomalies Kafka cannot be made to
produce on demand; injected rows have no ``make_fault`` yet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kmon.nemesis.base import Fault
from kmon.nemesis.network import NetworkFault
from kmon.nemesis.process import Crash, Pause
from kmon.nemesis.records import DeleteRecords
from kmon.nemesis.targets import Target, busiest_partition
from kmon.nemesis.unclean import UncleanElection

if TYPE_CHECKING:
    from kmon.local.cluster import LocalCluster
    from kmon.local.toxiproxy import LocalToxiproxy

# Reported in healthy Kafka too; the policy does not count them (kmon.checker.policy).
KAFKA_NORMAL = ("G0", "int-send-skip")

MakeFault = Callable[["LocalCluster", "LocalToxiproxy", str], Fault]


@dataclass(frozen=True)
class Scenario:
    name: str
    preset: str
    make_fault: MakeFault | None  # (cluster, proxy, probe topic prefix) -> Fault; None: no fault
    duration: float = 20.0
    must: tuple[str, ...] = ()
    any_of: tuple[str, ...] = ()
    allowed: tuple[str, ...] = KAFKA_NORMAL
    origin: str = "real"  # "real" or "injected"
    evidence: str | None = None
    note: str = ""


def _leader(cluster: LocalCluster, prefix: str) -> Target:
    """The leader of the busiest probe partition, resolved when the fault starts."""
    topic, partition = busiest_partition(cluster, prefix)
    return Target(topic=topic, partition=partition)


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("healthy", "safe", None, note="no fault: the all-zeros row"),
    Scenario("pause-leader", "safe",
             lambda c, p, prefix: Pause(c, _leader(c, prefix)),
             note="SIGSTOP the leader of the busiest probe partition"),
    Scenario("crash-leader", "safe",
             lambda c, p, prefix: Crash(c, _leader(c, prefix)),
             note="SIGKILL the leader of the busiest probe partition, restart on its data"),
    Scenario("net-latency", "proxied",
             lambda c, p, prefix: NetworkFault(p, "latency", latency_ms=300, jitter_ms=100),
             note="300 +/- 100 ms on every client connection"),
    Scenario("net-timeout", "proxied",
             lambda c, p, prefix: NetworkFault(p, "timeout", [_leader(c, prefix)], cluster=c),
             duration=5.0, note="answers from one leader stall (safe settings: no duplicate)"),
    Scenario("net-reset", "proxied",
             lambda c, p, prefix: NetworkFault(p, "reset", timeout_ms=200),
             duration=10.0, note="every client connection reset after 200 ms"),
    Scenario("net-down", "proxied",
             lambda c, p, prefix: NetworkFault(p, "down", [_leader(c, prefix)], cluster=c),
             duration=10.0, note="clients cut off from one leader; brokers unaffected"),
    # Readers lag on purpose: with the probe's default settings consumers keep up at its
    # rate, and a deletion up to the high watermark then removes only records already read.
    Scenario("delete-records", "lagging-readers",
             lambda c, p, prefix: DeleteRecords(c, topic_prefix=prefix, count=4, interval=1.0),
             duration=15.0, must=("lost-write",),
             # What deletion also does: the deleted values are never read (unseen), a consumer
             # reset to the new log start skips them (poll-skip; int-poll-skip when the reset
             # falls inside one poll op, as CI saw once: 31 then 37 in op 655), and a
             # committed transaction whose write to one partition was deleted unread is torn.
             allowed=(*KAFKA_NORMAL, "unseen", "poll-skip", "int-poll-skip", "torn-transaction"),
             note="KAFKA-17062-like: acknowledged records deleted before they were read"),
    Scenario("unclean-election", "unclean",
             # 6 s of writes on the leader alone (default 3): more acks=1 records to lose.
             lambda c, p, prefix: UncleanElection(c, topic_prefix=prefix, lag=6.0),
             duration=10.0, any_of=("lost-write", "inconsistent-offsets"),
             allowed=(*KAFKA_NORMAL, "lost-write", "inconsistent-offsets", "poll-skip",
                      "nonmonotonic-poll", "nonmonotonic-send", "unseen"),
             note="acks=1 records on the leader alone vanish; their offsets are reused"),
    Scenario("idempotence-off", "idempotence-off",
             lambda c, p, prefix: NetworkFault(
                 p, "timeout", [_leader(c, prefix)], cluster=c),
             duration=3.0, must=("duplicate",), evidence="duplicate-on-disk",
             allowed=(*KAFKA_NORMAL, "nonmonotonic-send", "nonmonotonic-poll", "poll-skip"),
             note="retried produces appended twice; the row counts only if the log shows it"),
    Scenario("read-uncommitted", "read-uncommitted", None, must=("G1a",),
             # read_uncommitted also lets a transaction poll its own not yet committed writes.
             allowed=(*KAFKA_NORMAL, "G1c", "precommitted-read"),
             note="consumers at read_uncommitted read aborted transactions' records"),
    # Injected: the healthy row's own history replayed with the finding written in
    # (kmon.nemesis.inject). Records no poller ever returns are also unseen, and pollers that
    # read on either side of them skipped them; a sender told "offset 0" after a higher offset
    # saw its sends go backwards: consequences of the finding, not other anomalies.
    Scenario("torn-transaction", "safe", None, must=("torn-transaction",), origin="injected",
             allowed=(*KAFKA_NORMAL, "lost-write", "poll-skip", "int-poll-skip", "unseen"),
             note="KAFKA-17754: one partition of a committed transaction never visible"),
    Scenario("spurious-zero-offset", "safe", None, must=("duplicate", "inconsistent-offsets"),
             origin="injected", allowed=(*KAFKA_NORMAL, "nonmonotonic-send"),
             note="Bufstream #3: sends acknowledged at offset 0, read at their real offset"),
    Scenario("server-side-filtering", "safe", None, must=("lost-write",), origin="injected",
             # Transactional records among those hidden tear their transactions.
             allowed=(*KAFKA_NORMAL, "poll-skip", "int-poll-skip", "unseen",
                      "torn-transaction"),
             note="Bufstream #5: a run of records left out of every fetch answer"),
)
BY_NAME = {s.name: s for s in SCENARIOS}
