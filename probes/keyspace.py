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
``min.insync.replicas`` from the config). A probe run never reuses a topic: numbering starts
after the highest existing ``<prefix>.<n>``, so every run starts on fresh logs.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from kmon.probes import values as V
from kmon.probes.config import ProbeConfig

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

    # -- start ----------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> None:
        """Find existing probe topics, then make sure enough keys are live."""
        md = self.admin.list_topics(timeout=min(timeout, 30.0))
        existing = {}
        for name, t in md.topics.items():
            n = V.topic_number(self.prefix, name)
            if n is not None and t.error is None:
                existing[n] = (name, len(t.partitions))
        if existing:
            self.next_n = max(existing) + 1
        if not self.cfg.create_topics:
            if not existing:
                raise RuntimeError(f"create_topics is off and no '{self.prefix}.<n>' topics exist")
            for n, (name, parts) in sorted(existing.items()):
                self._add(Topic(name, n, min(parts, V.MAX_PARTITIONS)))
            return
        deadline = time.monotonic() + timeout
        while self.writable_count() < self.cfg.live_keys:
            if time.monotonic() > deadline:
                raise RuntimeError(f"could not create probe topics '{self.prefix}.<n>' "
                                   f"within {timeout:.0f}s")
            if not self._create_topic(min(30.0, max(1.0, deadline - time.monotonic()))):
                time.sleep(1.0)

    def _add(self, topic: Topic) -> None:
        topic.sent = [0] * topic.partitions
        with self.lock:
            self.topics[topic.name] = topic
            self.version += 1

    def _create_topic(self, timeout: float) -> bool:
        n = self.next_n
        name = V.topic_name(self.prefix, n)
        new = NewTopic(
            name, num_partitions=self.cfg.partitions,
            replication_factor=self.cfg.replication_factor,
            config={"min.insync.replicas": str(self.cfg.min_insync_replicas)},
        )
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
        if not self._wait_leaders(name, timeout):
            log.warning("probe topic %s has no leaders yet; will use it once it has", name)
            return False
        self.next_n = n + 1
        self._add(Topic(name, n, self.cfg.partitions))
        log.info("probe topic %s created (%d partitions)", name, self.cfg.partitions)
        return True

    def _wait_leaders(self, name: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                t = self.admin.list_topics(name, timeout=5).topics.get(name)
            except KafkaException:
                t = None
            if (t is not None and t.error is None and len(t.partitions) == self.cfg.partitions
                    and all(p.leader >= 0 for p in t.partitions.values())):
                return True
            time.sleep(0.2)
        return False

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
                self.admin.delete_topics([name], request_timeout=10)[name].result(15)
            except Exception as e:
                log.warning("deleting drained probe topic %s failed: %s", name, e)
                continue
            with self.lock:
                self.topics.pop(name, None)
            log.info("probe topic %s deleted", name)
