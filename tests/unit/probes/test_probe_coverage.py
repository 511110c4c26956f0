"""Broker coverage and topic reuse of the probe's key space, against an in-memory cluster.

The fake admin answers the calls ``KeySpace`` makes (metadata, create with a replica
assignment, end offsets, preferred leader election) and counts what it is asked to create, so
the bounds on topic creation are checked by counting.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kmon.probes import coverage as COV
from kmon.probes.config import load
from kmon.probes.keyspace import DRAINING, DROPPED, LIVE, KeySpace


def _done(value: Any = None) -> Future:
    f: Future = Future()
    f.set_result(value)
    return f


def _gone() -> Future:
    f: Future = Future()
    f.set_exception(KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))
    return f


@dataclass
class FakePartition:
    id: int
    replicas: list[int]
    leader: int
    isrs: list[int] = field(default_factory=list)
    end: int = 0  # end offset


class FakeAdmin:
    """A cluster of ``brokers``: topics with replica lists; leaders start preferred."""

    def __init__(self, brokers: range | list[int]) -> None:
        self.brokers = set(brokers)
        self.topics: dict[str, dict[int, FakePartition]] = {}
        self.creates: list[str] = []  # every create_topics call, by name
        self.elections: list[tuple[str, int]] = []
        self.deletes: list[str] = []  # every topic a delete_topics call named
        # Deleted by an attempt whose answer was lost (the controller lost its leadership
        # meanwhile): the client's retry is answered UNKNOWN_TOPIC_OR_PART.
        self.answer_gone: set[str] = set()

    def add(self, name: str, assignment: list[list[int]]) -> None:
        self.topics[name] = {i: FakePartition(i, list(r), r[0], list(r))
                             for i, r in enumerate(assignment)}

    def list_topics(self, topic: str | None = None, timeout: float = 0) -> SimpleNamespace:
        names = [topic] if topic is not None else list(self.topics)
        topics = {n: SimpleNamespace(error=None, partitions=dict(self.topics[n]))
                  for n in names if n in self.topics}
        return SimpleNamespace(brokers={b: None for b in self.brokers}, topics=topics)

    def create_topics(self, new: list[Any], request_timeout: float = 0) -> dict[str, Future]:
        t = new[0]
        if t.replica_assignment and t.num_partitions != len(t.replica_assignment):
            raise ValueError("librdkafka: a default partition count and a replica assignment "
                             "are mutually exclusive")  # -1 counts as the default
        self.creates.append(t.topic)
        plan = t.replica_assignment or [
            [sorted(self.brokers)[(i + j) % len(self.brokers)]
             for j in range(t.replication_factor)] for i in range(t.num_partitions)]
        self.add(t.topic, plan)
        return {t.topic: _done()}

    def delete_topics(self, names: list[str], request_timeout: float = 0) -> dict[str, Future]:
        self.deletes += names
        for n in names:
            self.topics.pop(n, None)
        return {n: _gone() if n in self.answer_gone else _done() for n in names}

    def list_offsets(self, query: dict, request_timeout: float = 0) -> dict:
        return {tp: _done(SimpleNamespace(offset=self.topics[tp.topic][tp.partition].end))
                for tp in query}

    def elect_leaders(self, _kind: Any, tps: list[TopicPartition]) -> Future:
        # As confluent-kafka 2.16.1's: no timeout keywords (they fail with a TypeError).
        for tp in tps:
            p = self.topics[tp.topic][tp.partition]
            self.elections.append((tp.topic, tp.partition))
            if p.replicas[0] in p.isrs:
                p.leader = p.replicas[0]
        return _done({})

    def leaders(self) -> set[int]:
        return {p.leader for parts in self.topics.values() for p in parts.values()}


def _cfg(**over: Any) -> Any:
    return load(env={}, overrides={"kafka.bootstrap.servers": "127.0.0.1:1", "name": "t",
                                   "metadata_refresh": 0.1, **over})


def _refresh(ks: KeySpace, times: int = 1) -> None:
    for _ in range(times):
        ks.refresh_coverage(force=True)


def test_every_broker_of_twelve_leads_a_live_key_with_one_topic() -> None:
    admin = FakeAdmin(range(1, 13))
    ks = KeySpace(_cfg(), admin)
    ks.start()
    assert ks.coverage == COV.Coverage(frozenset(range(1, 13)), frozenset(range(1, 13)))
    _refresh(ks, 50)
    assert admin.creates == ["kmon-probe-t.0"]  # 12 partitions, one led by each broker
    assert len(admin.topics["kmon-probe-t.0"]) == 12


def test_joining_brokers_get_one_topic_then_nothing_more() -> None:
    admin = FakeAdmin(range(1, 4))
    ks = KeySpace(_cfg(), admin)
    ks.start()
    assert len(admin.creates) == 2  # 8 live keys of 4 partitions on 3 brokers
    admin.brokers |= {4, 5}
    _refresh(ks)
    assert ks.coverage is not None and ks.coverage.uncovered == ()
    _refresh(ks, 50)
    assert len(admin.creates) == 3
    assert {p.replicas[0] for p in admin.topics["kmon-probe-t.2"].values()} >= {4, 5}


def test_leadership_moved_away_is_elected_back_not_recreated() -> None:
    admin = FakeAdmin(range(1, 4))
    ks = KeySpace(_cfg(), admin)
    ks.start()
    for parts in admin.topics.values():  # broker 2 restarted: it leads nothing
        for p in parts.values():
            if p.leader == 2:
                p.leader = next(b for b in p.replicas if b != 2)
    _refresh(ks)  # measures 2 uncovered, elects
    _refresh(ks)
    assert admin.elections and ks.coverage is not None and ks.coverage.uncovered == ()
    assert len(admin.creates) == 2


def test_a_broker_out_of_sync_is_waited_for() -> None:
    admin = FakeAdmin(range(1, 4))
    ks = KeySpace(_cfg(), admin)
    ks.start()
    for parts in admin.topics.values():
        for p in parts.values():
            p.isrs = [b for b in p.replicas if b != 3]
            if p.leader == 3:
                p.leader = p.isrs[0]
    _refresh(ks, 20)
    assert ks.coverage is not None and ks.coverage.uncovered == (3,)
    assert len(admin.creates) == 2 and admin.elections == []


def test_coverage_off_only_measures() -> None:
    admin = FakeAdmin(range(1, 4))
    ks = KeySpace(_cfg(coverage=False, partitions=1, live_keys=1), admin)
    ks.start()
    assert ks.coverage is not None and len(ks.coverage.covered) == 1
    _refresh(ks, 10)
    assert len(admin.creates) == 1 and len(ks.coverage.present) == 3


@pytest.mark.parametrize("restarts", [5])
def test_restarts_adopt_the_topics_and_create_none(restarts: int) -> None:
    admin = FakeAdmin(range(1, 4))
    KeySpace(_cfg(), admin).start()
    before = list(admin.creates)
    for _ in range(restarts):
        ks = KeySpace(_cfg(), admin)
        ks.start()
        _refresh(ks, 3)
        assert {t.stage for t in ks.topics.values()} == {LIVE}
    assert admin.creates == before


def test_an_exhausted_topic_is_adopted_draining_and_replaced() -> None:
    admin = FakeAdmin(range(1, 4))
    KeySpace(_cfg(values_per_key=100), admin).start()
    for p in admin.topics["kmon-probe-t.0"].values():
        p.end = 100
    ks = KeySpace(_cfg(values_per_key=100), admin)
    ks.start()
    assert ks.topics["kmon-probe-t.0"].stage == DRAINING
    assert ks.topics["kmon-probe-t.1"].stage == LIVE
    assert admin.creates[-1] == "kmon-probe-t.2" and ks.writable_count() >= 8


def test_assignment_puts_uncovered_first_and_spreads_followers() -> None:
    plan = COV.assignment([1, 2, 3, 4], [4], 4, 3)
    assert [r[0] for r in plan] == [4, 1, 2, 3]
    assert plan[0] == [4, 1, 2]
    with pytest.raises(ValueError):
        COV.assignment([1, 2], [], 4, 3)


def test_fixed_topics_are_measured_not_remedied() -> None:
    admin = FakeAdmin(range(1, 4))
    admin.add("kmon-probe-t.0", [[1, 2, 3]])
    ks = KeySpace(_cfg(create_topics=False), admin)
    ks.start()
    _refresh(ks, 5)
    assert ks.coverage == COV.Coverage(frozenset({1, 2, 3}), frozenset({1}))
    assert admin.creates == [] and admin.elections == []


def test_a_drained_topic_whose_deletion_answers_unknown_topic_is_deleted() -> None:
    """A DeleteTopics retried after a controller election is answered UNKNOWN_TOPIC_OR_PART for
    the topic its first attempt removed: the probe counts the topic deleted, and neither keeps
    it nor asks again at every maintenance."""
    admin = FakeAdmin(range(1, 4))
    ks = KeySpace(_cfg(), admin)
    ks.start()
    doomed = sorted(ks.topics)[0]
    ks.topics[doomed].stage, ks.topics[doomed].retired_at = DROPPED, -1e9
    admin.answer_gone.add(doomed)
    ks.maintain(grace=0)
    ks.maintain(grace=0)
    assert doomed not in ks.topics
    assert admin.deletes == [doomed]
