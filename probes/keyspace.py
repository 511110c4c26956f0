"""The probe's keys: which topic-partitions exist, which are written, which are still read.

A *key* is one partition of a probe topic ``<prefix>.<n>`` (``kmon.probes.values`` maps keys to
topic-partitions and back). Topics go through four stages:

1. **live**: some of its keys are still written; a key *retires* (is no longer written) after
   ``values_per_key`` values, so per-key state stays bounded;
2. **draining**: every key retired; still read (catch-up reads) for ``drain_time`` seconds so the
   last values are seen;
3. **dropped**: no longer read; processes re-assign or re-subscribe away from it;
4. **deleted** (``delete_retired_topics``): removed from the cluster a grace period later.

Whenever fewer than ``live_keys`` keys are written, a fresh topic is created (RF and
``min.insync.replicas`` from the config), numbered after the highest ``<prefix>.<n>``.

**Reuse.** A probe's name is stable (the chart gives each replica one), so at start it adopts
the ``<prefix>.<n>`` topics its predecessors left: each key continues its value budget from its
end offset (one record per value; transaction markers only make it retire a little early), so
exhausted topics drain and are deleted as in a long run, and a restart creates nothing.

**Coverage** (``kmon.probes.coverage``): every ``metadata_refresh`` seconds, each broker present
must lead a writable key; topics are created with explicit replica assignments that put
uncovered brokers first.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from confluent_kafka import ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from kmon import kafka_admin
from kmon.probes import coverage as COV
from kmon.probes import values as V
from kmon.probes.config import ProbeConfig
from kmon.probes.coverage import Coverage, PartitionMeta

log = logging.getLogger("kmon.probes")

LIVE, DRAINING, DROPPED = "live", "draining", "dropped"


@dataclass
class Topic:
    name: str
    n: int
    partitions: int
    stage: str = LIVE
    retired_at: float = 0.0  # monotonic time every key retired
    sent: list[int] = field(default_factory=list)  # values handed out, per partition

    def writable(self, limit: int) -> list[int]:
        return [p for p, s in enumerate(self.sent) if s < limit]


@dataclass(frozen=True)
class Snapshot:
    """Brokers present and the writable keys' placement, from one metadata refresh."""

    brokers: tuple[int, ...]
    writable: tuple[PartitionMeta, ...]


class KeySpace:
    def __init__(self, cfg: ProbeConfig, admin: AdminClient) -> None:
        self.cfg = cfg
        self.admin = admin
        self.prefix = cfg.topic_prefix
        self.lock = threading.Lock()
        self.topics: dict[str, Topic] = {}
        self.next_n = 0
        self.version = 0  # bumped whenever the set of readable topics changes
        self._deleted: set[str] = set()
        self.coverage: Coverage | None = None  # as of the latest refresh
        self.coverage_at = -float("inf")
        self.created = 0  # topics this probe created (bounded: see kmon.probes.coverage)

    # -- start ----------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> None:
        """Adopt this probe's existing topics, make enough keys live, cover every broker."""
        md = self.admin.list_topics(timeout=min(timeout, 30.0))
        existing = {}
        for name, t in md.topics.items():
            n = V.topic_number(self.prefix, name)
            if n is not None and t.error is None:
                existing[n] = (name, min(len(t.partitions), V.MAX_PARTITIONS))
        if existing:
            self.next_n = max(existing) + 1
        if not self.cfg.create_topics:
            if not existing:
                raise RuntimeError(f"create_topics is off and no '{self.prefix}.<n>' topics exist")
            for n, (name, parts) in sorted(existing.items()):
                self._add(Topic(name, n, parts))  # fixed topics: every start a full budget
            self.refresh_coverage(force=True)  # measured only: nothing may be created
            return
        self._adopt(existing)
        deadline = time.monotonic() + timeout
        while self.writable_count() < self.cfg.live_keys:
            if time.monotonic() > deadline:
                raise RuntimeError(f"could not create probe topics '{self.prefix}.<n>' "
                                   f"within {timeout:.0f}s")
            if not self._create_topic(min(30.0, max(1.0, deadline - time.monotonic()))):
                time.sleep(1.0)
        self.refresh_coverage(force=True)

    def _adopt(self, existing: dict[int, tuple[str, int]]) -> None:
        """Take over the topics a previous run of this probe left, budgets continued."""
        ends = self._end_offsets(existing.values())
        limit = self.cfg.values_per_key
        for n, (name, parts) in sorted(existing.items()):
            t = Topic(name, n, parts, sent=[ends.get((name, p), 0) for p in range(parts)])
            if not t.writable(limit):
                t.stage, t.retired_at = DRAINING, time.monotonic()
            self._add(t)
            log.info("probe topic %s adopted (%s)", name, t.stage)

    def _end_offsets(self, topics: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """End offset of every partition; a key whose lookup fails counts as unused."""
        query = {TopicPartition(name, p): OffsetSpec.latest()
                 for name, parts in topics for p in range(parts)}
        if not query:
            return {}
        out = {}
        for tp, fut in self.admin.list_offsets(query, request_timeout=15).items():
            try:
                out[(tp.topic, tp.partition)] = max(0, fut.result(20).offset)
            except Exception as e:
                log.warning("end offset of %s/%d unknown (%s): its budget restarts",
                            tp.topic, tp.partition, e)
        return out

    def _add(self, topic: Topic) -> None:
        if len(topic.sent) != topic.partitions:
            topic.sent = [0] * topic.partitions
        with self.lock:
            self.topics[topic.name] = topic
            self.version += 1

    def _create_topic(self, timeout: float, first: tuple[int, ...] = ()) -> bool:
        """A fresh topic; preferred leaders ``first``, then uncovered brokers, then the rest."""
        n = self.next_n
        name = V.topic_name(self.prefix, n)
        new = self._new_topic(name, first)
        try:
            self.admin.create_topics([new], request_timeout=timeout)[name].result(timeout + 5)
        except KafkaException as e:
            err = e.args[0]
            if err.name() != "TOPIC_ALREADY_EXISTS":
                log.warning("creating probe topic %s failed: %s", name, err)
                return False
        except Exception as e:  # a future that never resolved
            log.warning("creating probe topic %s failed: %s", name, e)
            return False
        parts = new.num_partitions
        if not self._wait_leaders(name, parts, timeout):
            log.warning("probe topic %s has no leaders yet; will use it once it has", name)
            return False
        self.next_n = n + 1
        self.created += 1
        self._add(Topic(name, n, parts))
        log.info("probe topic %s created (%d partitions)", name, parts)
        return True

    def _new_topic(self, name: str, first: tuple[int, ...]) -> NewTopic:
        config = {"min.insync.replicas": str(self.cfg.min_insync_replicas)}
        rf = self.cfg.replication_factor
        snap = self._snapshot() if self.cfg.coverage else None
        if snap is None or rf > len(snap.brokers):  # Kafka places it (and says what is wrong)
            return NewTopic(name, num_partitions=self.cfg.partitions, replication_factor=rf,
                            config=config)
        cov = COV.measure(snap.brokers, snap.writable)
        head = tuple(dict.fromkeys(first + cov.uncovered))
        parts = min(V.MAX_PARTITIONS, max(self.cfg.partitions, len(head)))
        plan = COV.assignment(snap.brokers, head, parts, rf, COV.leader_load(snap.writable))
        return NewTopic(name, num_partitions=len(plan), replica_assignment=plan, config=config)

    def _wait_leaders(self, name: str, partitions: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                t = self.admin.list_topics(name, timeout=5).topics.get(name)
            except KafkaException:
                t = None
            if (t is not None and t.error is None and len(t.partitions) == partitions
                    and all(p.leader >= 0 for p in t.partitions.values())):
                return True
            time.sleep(0.2)
        return False

    # -- coverage -------------------------------------------------------------------------

    def refresh_coverage(self, force: bool = False) -> Coverage | None:
        """Measure coverage (every ``metadata_refresh`` s) and remedy what is uncovered."""
        now = time.monotonic()
        if not force and now - self.coverage_at < self.cfg.metadata_refresh:
            return self.coverage
        self.coverage_at = now
        snap = self._snapshot()
        if snap is None:
            return self.coverage
        self.coverage = COV.measure(snap.brokers, snap.writable)
        if self.cfg.coverage and self.coverage.uncovered and self.cfg.create_topics:
            self._cover(snap)
        return self.coverage

    def _cover(self, snap: Snapshot) -> None:
        plan = COV.remedy(self.coverage, list(snap.writable))
        if plan.elect:
            self._elect(plan.elect)
        if plan.create_for and self._create_topic(min(30.0, self.cfg.op_timeout * 3),
                                                  plan.create_for):
            after = self._snapshot()  # the new topic's leaders are its preferred replicas
            if after is not None:
                self.coverage = COV.measure(after.brokers, after.writable)

    def _elect(self, keys: tuple[PartitionMeta, ...]) -> None:
        tps = [TopicPartition(m.topic, m.partition) for m in keys]
        try:
            # No timeout keywords: confluent-kafka 2.16.1's elect_leaders rejects them ("takes
            # at most 4 arguments"), so every election failed; the result's wait bounds it.
            self.admin.elect_leaders(ElectionType.PREFERRED, tps).result(15)
            log.info("preferred leader election of %s", [f"{m.topic}/{m.partition}" for m in keys])
        except Exception as e:  # the next refresh tries again
            log.warning("preferred leader election of %d probe keys failed: %s", len(tps), e)

    def _snapshot(self) -> Snapshot | None:
        """Brokers and writable keys' placement from metadata; None when it is unavailable."""
        limit = self.cfg.values_per_key
        with self.lock:
            live = {t.name: set(t.writable(limit)) for t in self.topics.values()
                    if t.stage == LIVE}
        try:
            if not live:
                return Snapshot(tuple(sorted(self.admin.list_topics(timeout=10).brokers)), ())
            brokers: set[int] = set()
            writable = []
            for name, parts in sorted(live.items()):
                md = self.admin.list_topics(name, timeout=10)
                brokers.update(md.brokers)
                t = md.topics.get(name)
                if t is None or t.error is not None:
                    continue
                writable += [PartitionMeta(name, p.id, p.leader, tuple(p.replicas),
                                           tuple(p.isrs))
                             for p in t.partitions.values() if p.id in parts]
        except KafkaException as e:
            log.warning("metadata refresh for broker coverage failed: %s", e)
            return None
        return Snapshot(tuple(sorted(brokers)), tuple(writable))

    # -- the workload's view ----------------------------------------------------------------

    def pick(self, rng: random.Random, exclude: set[int] | frozenset[int] = frozenset(),
             ) -> int | None:
        """A writable key (not in ``exclude``), counted as one more value sent to it."""
        limit = self.cfg.values_per_key
        with self.lock:
            choices = [
                (t, p) for t in self.topics.values() if t.stage == LIVE
                for p in t.writable(limit)
                if V.key_of(self.prefix, t.n, p) not in exclude
            ]
            if not choices:
                return None
            t, p = rng.choice(choices)
            t.sent[p] += 1
            if not t.writable(limit):
                t.stage = DRAINING
                t.retired_at = time.monotonic()
                log.info("probe topic %s retired (every key has %d values)", t.name, limit)
            return V.key_of(self.prefix, t.n, p)

    def writable_count(self) -> int:
        limit = self.cfg.values_per_key
        with self.lock:
            return sum(len(t.writable(limit)) for t in self.topics.values() if t.stage == LIVE)

    def readable_topics(self) -> list[str]:
        with self.lock:
            return sorted(t.name for t in self.topics.values() if t.stage in (LIVE, DRAINING))

    def readable_keys(self) -> list[int]:
        with self.lock:
            return [
                V.key_of(self.prefix, t.n, p)
                for t in sorted(self.topics.values(), key=lambda t: t.n)
                if t.stage in (LIVE, DRAINING)
                for p in range(t.partitions)
            ]

    def keys_of(self, topics: list[str]) -> list[int]:
        with self.lock:
            return [
                V.key_of(self.prefix, self.topics[name].n, p)
                for name in topics if name in self.topics
                for p in range(self.topics[name].partitions)
            ]

    def topic_partition(self, key: int) -> tuple[str, int]:
        return V.topic_partition_of(self.prefix, key)

    def key(self, topic: str, partition: int) -> int | None:
        n = V.topic_number(self.prefix, topic)
        return None if n is None else V.key_of(self.prefix, n, partition)

    # -- maintenance (one background thread) --------------------------------------------------

    def maintain(self, grace: float) -> None:
        """Create topics while too few keys are written; drop and delete drained topics."""
        if self.cfg.create_topics and self.writable_count() < self.cfg.live_keys:
            self._create_topic(min(30.0, self.cfg.op_timeout * 3))
        self.refresh_coverage()
        now = time.monotonic()
        doomed = []
        with self.lock:
            for t in list(self.topics.values()):
                if t.stage == DRAINING and now - t.retired_at >= self.cfg.drain_time:
                    t.stage = DROPPED
                    self.version += 1
                    log.info("probe topic %s drained; no longer read", t.name)
                elif (t.stage == DROPPED and self.cfg.delete_retired_topics
                      and now - t.retired_at >= self.cfg.drain_time + grace):
                    doomed.append(t.name)
        for name in doomed:
            try:
                kafka_admin.delete_topics(self.admin, [name], timeout=10)
            except Exception as e:
                log.warning("deleting drained probe topic %s failed: %s", name, e)
                continue
            with self.lock:
                self.topics.pop(name, None)
            log.info("probe topic %s deleted", name)
