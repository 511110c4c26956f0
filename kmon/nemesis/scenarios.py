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

``origin`` tells real faults on real Kafka (``real``) from a real broker made to misbehave by
the Kafka protocol proxy between the probe's clients and the brokers (``proxy``:
``kmon.nemesis.protocol``), for the anomalies of Kafka-compatible brokers that Kafka cannot
be made to produce on demand, and from replays (``injected``): the history of the quiet row
``base`` with the finding written in (``kmon.nemesis.inject``), replayed into the monitor.
Only share groups' broken promises are replays: Kafka 4.4 keeps them under every fault kmon
has, and no proxy filter imitates a share-partition leader yet. (The Bufstream and
KAFKA-17754 findings were replays before the proxy; their injectors remain as offline tests.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kmon.nemesis.base import Fault
from kmon.nemesis.network import NetworkFault
from kmon.nemesis.offsets_unclean import OffsetsUncleanElection
from kmon.nemesis.process import Crash, Pause
from kmon.nemesis.protocol import ProtocolFault, kafka_proxy_of
from kmon.nemesis.records import DeleteRecords
from kmon.nemesis.targets import Target, busiest_partition
from kmon.nemesis.unclean import UncleanElection

if TYPE_CHECKING:
    from kmon.local.cluster import LocalCluster
    from kmon.local.toxiproxy import LocalToxiproxy

# The findings the proxy rows reproduce (Jepsen's report is reference 004 in shared/reference).
BUFSTREAM = "https://jepsen.io/analyses/bufstream-0.1.0"
KAFKA_17754 = "https://issues.apache.org/jira/browse/KAFKA-17754"
OFFSET_TRACKING = "https://kafka.apache.org/documentation/#impl_offsettracking"
AUTOMQ_163 = "https://github.com/AutoMQ/automq/issues/163"
KIP_952 = ("https://cwiki.apache.org/confluence/display/KAFKA/KIP-952%3A+Regenerate+"
           "segment-aligned+producer+snapshots+when+upgrading+to+a+Kafka+version+supporting+"
           "Tiered+Storage")

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
    origin: str = "real"  # "real", "proxy" or "injected" (a replay of ``base``'s history)
    evidence: str | None = None
    note: str = ""
    reproduces: str = ""  # Markdown: the bug the row reproduces and how (proxy rows)
    base: str = "healthy"  # injected rows: the quiet row whose history they replay


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
    # Share groups (KIP-932): share consumers beside the usual workload.
    Scenario("share-healthy", "share", None,
             note="no fault, with share consumers: releases, rejects and stalls past the lock "
                  "are redeliveries the group allows"),
    # Every partition: the fault picks the partitions the consumer groups lag on most, and the
    # share group reads others (its polls favour a few partitions, redelivering their stalled
    # records); deleting only those it never read gave no share-lost (CI, stop 41).
    Scenario("share-delete-records", "share-lagging",
             lambda c, p, prefix: DeleteRecords(c, topic_prefix=prefix, count=None,
                                                interval=1.0),
             duration=15.0, must=("share-lost",),
             # The delete-records row's consequences for the consumer groups, besides.
             allowed=(*KAFKA_NORMAL, "lost-write", "unseen", "poll-skip", "int-poll-skip",
                      "torn-transaction"),
             note="acknowledged records deleted before the share group was delivered them"),
    # What Kafka 4.4 does not do under any fault here: replays of the share-healthy row's
    # history, each with one broken promise written in (kmon.nemesis.inject says how).
    Scenario("share-double-accept", "share", None, must=("share-double-accept",),
             origin="injected", base="share-healthy",
             note="a record delivered to a second consumer during the first one's ACCEPT, "
                  "and accepted by both (ok)"),
    Scenario("share-redelivered", "share", None, must=("share-redelivered",),
             origin="injected", base="share-healthy",
             note="a record rejected (ok) delivered again seconds later"),
    Scenario("share-concurrent-delivery", "share", None, must=("share-concurrent-delivery",),
             origin="injected", base="share-healthy",
             note="a record delivered to two consumers under one lock, neither acknowledging"),
    Scenario("share-delivery-count", "share", None, must=("share-delivery-count",),
             origin="injected", base="share-healthy",
             note="a record released (ok) redelivered with the same delivery count"),
    Scenario("unclean-election", "unclean",
             # 6 s of writes on the leader alone (default 3): more acks=1 records to lose.
             lambda c, p, prefix: UncleanElection(c, topic_prefix=prefix, lag=6.0),
             duration=10.0, any_of=("lost-write", "inconsistent-offsets"),
             allowed=(*KAFKA_NORMAL, "lost-write", "inconsistent-offsets", "poll-skip",
                      "nonmonotonic-poll", "nonmonotonic-send", "unseen"),
             note="acks=1 records on the leader alone vanish; their offsets are reused"),
    Scenario("offsets-unclean", "safe",
             # The assign-mode group: assign ops and the final read look its offsets up. The
             # paused follower also stalls the probe's own partitions until it is fenced, so
             # the lag is long: consumers must read on (and commit new offsets) during it, or
             # the lost commits only repeat offsets the survivor already has.
             lambda c, p, prefix: OffsetsUncleanElection(c, group=f"{prefix}-assign", lag=15.0),
             duration=10.0, any_of=("offset-commit-reread", "offset-commit-lost"),
             allowed=(*KAFKA_NORMAL, "offset-commit-reread", "offset-commit-lost"),
             note="the group's __consumer_offsets partition elected uncleanly: 15 s of "
                  "acknowledged offset commits vanish; consumers re-read"),
    Scenario("idempotence-off", "idempotence-off",
             lambda c, p, prefix: NetworkFault(
                 p, "timeout", [_leader(c, prefix)], cluster=c),
             duration=3.0, must=("duplicate",), evidence="duplicate-on-disk",
             allowed=(*KAFKA_NORMAL, "nonmonotonic-send", "nonmonotonic-poll", "poll-skip"),
             note="retried produces appended twice; the row counts only if the log shows it"),
    Scenario("read-uncommitted", "read-uncommitted", None, must=("G1a",),
             # read_uncommitted also lets a transaction poll its own not yet committed writes;
             # and librdkafka asks for stable offsets only under read_committed, so a lookup
             # just after a transaction may find the offset before it, or none for a group's
             # first (its markers not yet written): the offset check assumes stable lookups
             # (docs/checker.md).
             allowed=(*KAFKA_NORMAL, "G1c", "precommitted-read", "offset-commit-reread",
                      "offset-commit-lost"),
             note="consumers at read_uncommitted read aborted transactions' records"),
    # Through the Kafka protocol proxy: real clients, real brokers, the proxy playing a broker
    # that misbehaves as the finding says. Records no poller ever returns are also unseen, and
    # pollers that read on either side of them skipped them; a sender told an offset below
    # one it had been told before saw its sends go backwards: consequences of the finding,
    # not other anomalies.
    Scenario("kproxy-healthy", "kafka-proxied", None, origin="proxy",
             note="no fault through the Kafka protocol proxy: the proxy itself is not a fault"),
    Scenario("spurious-zero-offset", "kafka-proxied",
             lambda c, p, prefix: _proxy_fault(c, "spurious-offset", prefix, 0.2, 5),
             duration=10.0, must=("duplicate", "inconsistent-offsets"), origin="proxy",
             allowed=(*KAFKA_NORMAL, "nonmonotonic-send"),
             note="Bufstream #3: a few produce answers say offset 0; the records are stored at "
                  "their real offset, where pollers read them",
             reproduces=f"[Bufstream #3, spurious zero offsets]({BUFSTREAM}) (reference 004, "
                        "section 4.3): the official client took an answer without an offset as "
                        "offset 0. The proxy rewrites the base offset of 20% of produce answers "
                        "(at most 5, offsets above 10) to 0; the broker stored them where they "
                        "are read"),
    Scenario("server-side-filtering", "kafka-proxied",
             lambda c, p, prefix: _proxy_fault(c, "server-side-filtering", prefix, 0.1, 4),
             duration=10.0, must=("lost-write",), origin="proxy",
             allowed=(*KAFKA_NORMAL, "poll-skip", "int-poll-skip", "unseen",
                      "torn-transaction"),
             note="Bufstream #5: a few record batches left out of every fetch answer",
             reproduces=f"[Bufstream #5, server-side filtering]({BUFSTREAM}) "
                        "(reference 004, section 4.5): a fetch size filter hid records from "
                        "consumers. The proxy picks 10% of plain record batches (at most 4) when "
                        "first fetched and drops them from every fetch answer, so readers pass "
                        "over them and no reader ever had them"),
    Scenario("torn-transaction", "kafka-proxied",
             lambda c, p, prefix: _proxy_fault(c, "torn-transaction", prefix, 0.3, 4),
             duration=15.0, must=("torn-transaction",), origin="proxy",
             allowed=(*KAFKA_NORMAL, "lost-write", "poll-skip", "int-poll-skip", "unseen",
                      "nonmonotonic-send"),
             note="KAFKA-17754-like: one partition's write in a transaction acknowledged, never "
                  "stored; the transaction commits",
             reproduces=f"[KAFKA-17754]({KAFKA_17754}) (reference 004, section 5.4: a produce "
                        "delayed past its transaction's end): some of a committed transaction's "
                        "writes visible, one never. The proxy acknowledges one partition's "
                        "produce in 30% of transactional requests (at most 4 in transactions "
                        "that commit: one that wrote one value tears nothing, and a tear in one "
                        "that aborts is handed back) at the "
                        "offset of that partition's last transaction marker (passed by "
                        "readers, no value there; each marker once) and never forwards it; the "
                        "client commits. Later sequence numbers are moved back so the broker "
                        "does not refuse the gap"),
    Scenario("aborted-read", "kafka-proxied-aborts",
             lambda c, p, prefix: _proxy_fault(c, "aborted-read", prefix, 1.0, 0),
             duration=10.0, must=("G1a",), origin="proxy",
             # Uncommitted reads also let a transaction poll its own not yet committed writes.
             # Consumers also skipped a few committed records (6 poll-skip, 2 int-poll-skip in
             # the first run, the same in `kmon check`): librdkafka, set to read_committed, is
             # handed read_uncommitted answers (open transactions past the last stable offset,
             # no aborted list) and passes over some records; which of its rules does that is
             # not established. A committed transaction whose record every reader passed over
             # is then torn (2 in the second run): KAFKA-17754 reports the two together.
             # Consequences of the fault, not a second one.
             allowed=(*KAFKA_NORMAL, "G1c", "precommitted-read", "poll-skip", "int-poll-skip",
                      "torn-transaction"),
             note="read_committed fetches served as read_uncommitted: aborted records read",
             reproduces=f"aborted reads ([KAFKA-17754]({KAFKA_17754}), reference 004, section 5.4: "
                        "records of aborted transactions read by read_committed consumers). The "
                        "proxy sends every read_committed fetch as read_uncommitted while many "
                        "transactions abort"),
    Scenario("lost-offset-commit", "kafka-proxied-restarts",
             lambda c, p, prefix: _proxy_fault(c, "lost-offset-commit", prefix, 1.0, 0),
             # A group whose first commits were all dropped has none: `lost`, not `reread`.
             duration=10.0, any_of=("offset-commit-reread", "offset-commit-lost"),
             allowed=(*KAFKA_NORMAL, "offset-commit-reread", "offset-commit-lost"),
             origin="proxy",
             note="offset commits acknowledged and never stored: the next consumer re-reads",
             reproduces=f"[AutoMQ #163, consuming offset reset to 0 after a broker restart]"
                        f"({AUTOMQ_163}): a Kafka-compatible broker acknowledged offset commits "
                        "it did not keep, so restarted consumers started over (committed "
                        f"offsets are records of `__consumer_offsets`: [offset tracking]"
                        f"({OFFSET_TRACKING})). The proxy answers every offset commit of the "
                        "probe's groups for 6-10 s with success and forwards none: the "
                        "coordinator keeps the older offsets, and consumers assigned the "
                        "partitions start there (the probe's consumers switch between "
                        "assign and subscribe about twice a second, so some start while "
                        "the commits are lost)"),
    Scenario("duplicated-produce", "kafka-proxied",
             lambda c, p, prefix: _proxy_fault(c, "duplicate", prefix, 0.3, 5),
             duration=10.0, must=("duplicate",), origin="proxy",
             allowed=(*KAFKA_NORMAL, "nonmonotonic-send", "nonmonotonic-poll", "poll-skip"),
             note="a produce forwarded twice with its idempotence stripped: stored twice",
             reproduces="duplicates from a broker that lost an idempotent producer's state "
                        f"([KIP-952]({KIP_952}), reference 002: an empty producer snapshot "
                        "expires every producer id, so retries are no longer deduplicated). "
                        "The proxy strips the producer id and sequence from 30% of plain "
                        "produce requests (at most 5) and forwards each twice; the client's "
                        "later sequences are moved back to match"),
)


# The rates are high enough for the short rows of `make test` (6 s of fault, about 30 eligible
# plain produce requests): at 10% the duplicated-produce row injected nothing in one run of
# 2026-11-26 (0.9^30, one run in 25); the caps, not the rates, bound each row's damage.
def _proxy_fault(cluster: LocalCluster, fault: str, prefix: str, rate: float,
                 max_count: int) -> ProtocolFault:
    return ProtocolFault(kafka_proxy_of(cluster), fault, prefix=prefix + ".", rate=rate,
                         max_count=max_count)


BY_NAME = {s.name: s for s in SCENARIOS}
