"""The key's leader broker and the cluster through both stages: placements, state, evidence."""

from __future__ import annotations

import json
import pickle
from typing import Any

from pyspark.sql import Row

from kmon.history.fragment import Fragment, split
from kmon.history.model import Op
from kmon.streaming.config import TXN_BUCKETS
from kmon.streaming.keyfold import ANOMALY, FACT, STATS, UNSEEN, FoldSettings, KeyFold, Placement
from kmon.streaming.metrics import E2E_BUCKETS
from kmon.streaming.processors import key_fragments
from kmon.streaming.txnfold import FactsRecord, TxnBucket, parse_facts
from tests.checker.helpers import history, send
from tests.unit.streaming.cases import CASES
from tests.unit.streaming.online import END, SECOND, run_online


def _settings(cluster: str = "prod-eu") -> FoldSettings:
    return FoldSettings(grace_ns=SECOND, unseen_grace_ns=None,
                        e2e_buckets_ns=tuple(int(b * 1e9) for b in E2E_BUCKETS),
                        cluster=cluster)


def _frags(ops: list[Op]) -> dict[Any, list[Fragment]]:
    by_key: dict[Any, list[Fragment]] = {}
    for op in ops:
        if op.type != "invoke":
            for fr in split(op):
                by_key.setdefault(fr.key, []).append(fr)
    return by_key


def _run(ops: list[Op], leader_of: dict[Any, int], cluster: str = "prod-eu",
         grace: int = SECOND) -> list[dict[str, Any]]:
    """``ops`` in one batch per key, each key placed on partition ``key`` led by
    ``leader_of[key]``; then stage 2 over the facts. Evidence records, parsed, and stats."""
    s = _settings(cluster)
    out: list[dict[str, Any]] = []
    facts: list[FactsRecord] = []
    for key, frs in _frags(ops).items():
        kf = KeyFold("p", key, s)
        rows = kf.batch(frs, Placement("t", key, leader_of.get(key), frs[-1].op), 0)
        rows += kf.wake(END)
        for r in rows:
            if r["kind"] == FACT:
                facts.extend(parse_facts(r["body"].encode(), "p", r["writer"], TXN_BUCKETS))
            else:
                out.append(r)
    tb = TxnBucket("p", grace, cluster=cluster)
    out += tb.batch(facts)
    return out


def _evidence(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [json.loads(r["body"]) for r in rows if r["kind"] in (ANOMALY, UNSEEN)]


def test_evidence_names_the_cluster_and_the_keys_leader_and_keeps_its_id() -> None:
    _, ops = CASES["duplicate"]
    rows = _run(ops, {6: 2})
    (e,) = [x for x in _evidence(rows) if x["anomaly"] == "duplicate"]
    assert (e["cluster"], e["broker"], e["topic"], e["partition"]) == ("prod-eu", 2, "t", 6)
    (row,) = [r for r in rows if r["kind"] == ANOMALY]
    assert row["broker"] == 2
    # the id is the verdict's, whatever the leader, the cluster or the placement
    (plain,) = [x for x in run_online(ops)["evidence"] if x["anomaly"] == "duplicate"]
    assert e["id"] == plain["id"] and plain["broker"] is None and plain["cluster"] == "local"
    assert all(r["broker"] == 2 for r in rows if r["kind"] == STATS and "key" in r)  # stage 1


def test_unseen_evidence_names_the_leader_too() -> None:
    ops = history((0, "ok", "send", [send(1, "a", 0)]))
    s = FoldSettings(grace_ns=SECOND, unseen_grace_ns=SECOND,
                     e2e_buckets_ns=tuple(int(b * 1e9) for b in E2E_BUCKETS), cluster="c1")
    kf = KeyFold("p", 1, s)
    frs = _frags(ops)[1]
    rows = kf.batch(frs, Placement("t", 1, 4, frs[-1].op), 0) + kf.wake(END)
    (e,) = _evidence(rows)
    assert (e["anomaly"], e["cluster"], e["broker"]) == ("unseen", "c1", 4)


def test_stage2_names_the_leader_of_the_key_concerned() -> None:
    _, ops = CASES["torn-transaction"]
    keys = list(_frags(ops))
    leaders = {k: 10 + i for i, k in enumerate(keys)}
    rows = _run(ops, leaders)
    torn = [x for x in _evidence(rows) if x["anomaly"] == "torn-transaction"]
    assert torn
    for e in torn:
        assert e["stage"] == "transaction" and e["cluster"] == "prod-eu"
        assert e["broker"] == leaders[e["key"]]


def test_a_keys_placement_follows_its_latest_op_not_arrival_order() -> None:
    kf = KeyFold("p", 1, _settings())
    kf.batch([], Placement("t", 1, 1, 5), 0)
    assert (kf.topic, kf.partition, kf.leader) == ("t", 1, 1)
    kf.batch([], Placement("t", 1, 3, 9), 0)
    assert kf.leader == 3
    [stats] = kf.batch([], Placement("t", 1, 1, 7), 0)  # a late event's older placement
    assert kf.leader == 3 and stats["broker"] == 3
    kf.batch([], None, 0)
    assert kf.leader == 3
    back = KeyFold.from_bytes("p", kf.to_bytes(), _settings())
    assert (back.leader, back.placed) == (3, 9)


def test_key_rows_give_the_placement_of_their_highest_op_in_any_order() -> None:
    def row(leader: int | None, placed: int | None, topic: str | None = "t") -> Row:
        return Row(topic=topic, part=0, leader=leader, placed=placed, blob=pickle.dumps([]))

    _, pl = key_fragments(1, iter([row(2, 8), row(1, 3), row(None, None, None)]))
    assert pl == Placement("t", 0, 2, 8)
    _, pl = key_fragments(1, iter([row(None, None, None)]))
    assert pl is None


def _version1(kf: KeyFold) -> bytes:
    """``kf`` as a monitor before the leader saved it (key fold state version 1)."""
    extra = (1, kf.topic, kf.partition, kf.timer_ms, kf.verdicts.to_state(), kf.lags)
    return pickle.dumps((kf.st.to_bytes(), extra), protocol=5)


def test_a_version_1_key_state_still_loads() -> None:
    _, ops = CASES["lost-write"]
    s = _settings()
    frs = _frags(ops)[12]
    kf = KeyFold("p", 12, s)
    kf.batch(frs[:2], Placement("t", 12, 7, frs[1].op), 0)
    old = KeyFold.from_bytes("p", _version1(kf), s)
    assert (old.topic, old.partition, old.leader, old.placed) == ("t", 12, None, -1)
    assert old.st.to_bytes() == kf.st.to_bytes()
    # it goes on as before, and its next placement brings the leader
    rows = old.batch(frs[2:], Placement("t", 12, 5, frs[-1].op), 0) + old.wake(END)
    (e,) = [x for x in _evidence(rows) if x["anomaly"] == "lost-write"]
    assert e["broker"] == 5
    assert KeyFold.from_bytes("p", old.to_bytes(), s).leader == 5


def test_a_version_1_transaction_state_still_loads() -> None:
    tb = TxnBucket("p", SECOND)
    tb.places = {"1": ("t", 1, 4)}
    version, txns, _places, verdicts, clock = pickle.loads(tb.to_bytes())
    assert version == 2
    v1 = pickle.dumps((1, txns, {"1": ("t", 1)}, verdicts, clock), protocol=5)
    assert TxnBucket.from_bytes("p", v1, SECOND).places == {"1": ("t", 1, None)}
    assert TxnBucket.from_bytes("p", tb.to_bytes(), SECOND).places == {"1": ("t", 1, 4)}
