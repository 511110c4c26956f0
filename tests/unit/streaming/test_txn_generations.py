"""Stage 2's writers kept in generations: a batch reads and writes only the generations its
facts' writers fall in, forgets old ones unread, and judges exactly as the whole layout does."""

from __future__ import annotations

import random
from typing import Any

from kmon.checker.sink import TxnFact
from kmon.streaming import evidence as ev
from kmon.streaming import txnfold
from kmon.streaming.config import TXN_BUCKETS
from kmon.streaming.keyfold import ANOMALY, facts_record
from kmon.streaming.txnfold import GEN_SPAN, FactsRecord, TxnBucket, gen_of, parse_facts

SECOND = 1_000_000_000
GRACE = SECOND
FOREVER = 10**15  # a retention nothing outlives in these tests


def fact(kind: str, writer: int, key: int, t: int, outcome: str = "ok") -> FactsRecord:
    """A fact as stage 1 writes it (a record of its own), its clock (``wm``) at its time."""
    f = TxnFact(kind, writer, key, f"v{writer}-{key}", writer % 1000 + key, outcome, t)
    body = ev.to_json(facts_record("p", key, "t", key, 1, t, [f]))
    return parse_facts(body.encode(), "p", writer % TXN_BUCKETS, TXN_BUCKETS)[0]


class Store:
    """One bucket's state as ``TxnFoldProcessor`` keeps it: a head and generations."""

    def __init__(self, **settings: Any) -> None:
        self.settings = settings
        self.head: bytes | None = None
        self.gens: dict[int, bytes] = {}
        self.reads: list[int] = []
        self.puts: set[int] = set()

    def _read(self, g: int) -> bytes | None:
        self.reads.append(g)
        return self.gens.get(g)

    def run(self, facts: list[FactsRecord]) -> list[dict[str, Any]]:
        self.reads = []
        b = (TxnBucket("p", GRACE, paged=True, **self.settings) if self.head is None else
             TxnBucket.from_parts("p", self.head, self._read, GRACE, **self.settings))
        out = b.batch(facts)
        saved = b.to_parts()
        for g in saved.removed:
            del self.gens[g]
        self.gens.update(saved.puts)
        self.puts = set(saved.puts)
        self.head = saved.head
        return out


def _whole(data: bytes | None, facts: list[FactsRecord],
           **settings: Any) -> tuple[bytes, list[dict[str, Any]]]:
    b = (TxnBucket("p", GRACE, **settings) if data is None else
         TxnBucket.from_bytes("p", data, GRACE, **settings))
    out = b.batch(facts)
    return b.to_bytes(), out


def _anomalies(rows: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(r["atype"], r["id"], r["body"]) for r in rows if r["kind"] == ANOMALY]


def _transactions(seed: int, batches: int = 40) -> list[list[FactsRecord]]:
    """Batches of facts: each batch's new writers (op indices climbing across generations)
    write two or three keys, visible at once; some have writes found invisible a few batches
    later (torn; ``info`` ones also lost)."""
    rng = random.Random(seed)
    out: list[list[FactsRecord]] = [[] for _ in range(batches + 5)]
    writer = 0
    for i in range(batches):
        t = (i + 1) * SECOND
        for _ in range(rng.randint(5, 30)):
            writer += rng.randint(1, GEN_SPAN // 8)
            keys = rng.sample(range(8), rng.randint(2, 3))
            torn = rng.random() < 0.2
            for k in keys[:-1] if torn else keys:
                out[i].append(fact("visible", writer, k, t))
            if torn:
                late = i + rng.randint(1, 5)
                out[late].append(fact("invisible", writer, keys[-1], (late + 1) * SECOND,
                                      rng.choice(["ok", "info"])))
    return out


def test_generations_judge_as_the_whole_bucket_does() -> None:
    for seed in range(5):
        store, whole = Store(retain_ns=FOREVER), None
        paged_found, whole_found = [], []
        for facts in _transactions(seed):
            paged_found += _anomalies(store.run(facts))
            whole, out = _whole(whole, facts, retain_ns=FOREVER)
            whole_found += _anomalies(out)
        assert paged_found == whole_found
        types = {a[0] for a in paged_found}
        assert types == {"torn-transaction", "lost-write"}, types
        assert len(store.gens) > 5  # the writers did spread over generations


def test_a_batch_reads_and_writes_only_the_generations_its_writers_fall_in() -> None:
    store = Store(retain_ns=FOREVER)
    for g in range(8):
        store.run([fact("visible", g * GEN_SPAN + w, w % 4, (g + 1) * SECOND)
                   for w in range(1, 50)])
    assert sorted(store.gens) == list(range(8))
    store.run([fact("invisible", 3 * GEN_SPAN + 7, 5, 9 * SECOND)])
    assert store.reads == [3]
    assert store.puts == {3}
    store.run([fact("visible", 9 * GEN_SPAN, 1, 10 * SECOND)])
    assert store.reads == []  # a new generation: nothing to read
    assert store.puts == {9}
    assert sorted(store.gens) == [0, 1, 2, 3, 4, 5, 6, 7, 9]


def test_generations_past_retention_are_dropped_unread() -> None:
    store = Store(retain_ns=10 * SECOND)
    for g in range(4):
        store.run([fact("visible", g * GEN_SPAN + 1, 1, g * 2 * SECOND + SECOND)])
    assert sorted(store.gens) == [0, 1, 2, 3]
    # the clock reaches 30 s: generations whose latest fact is 20 s old or more go unread
    store.run([fact("visible", 4 * GEN_SPAN + 1, 2, 30 * SECOND)])
    assert store.reads == []
    assert sorted(store.gens) == [4]


def test_the_writer_bound_drops_the_oldest_generations_first() -> None:
    store = Store(retain_ns=FOREVER, max_writers=100)
    for g in range(5):
        store.run([fact("visible", g * GEN_SPAN + w, 1, (g + 1) * SECOND)
                   for w in range(1, 61)])
        kept = TxnBucket.from_parts("p", store.head, store._read, GRACE).gens
        assert kept is not None
        assert sum(i.writers for i in kept.values()) <= 100 + 60
    assert sorted(store.gens) == [4]  # 60 writers: within the bound once the rest went
    assert not store.reads or set(store.reads) <= {4}


def test_a_whole_bucket_from_an_older_checkpoint_goes_on_in_generations() -> None:
    writer = 2 * GEN_SPAN + 5
    data, out = _whole(None, [fact("visible", writer, 1, SECOND)])
    assert not _anomalies(out)
    store = Store()
    store.head = data
    found = _anomalies(store.run([fact("invisible", writer, 2, 2 * SECOND, "info")]))
    assert {a[0] for a in found} == {"torn-transaction", "lost-write"}
    assert store.reads == []  # everything came in the old value
    assert set(store.gens) == {gen_of(writer)}
    reloaded = TxnBucket.from_parts("p", store.head, store._read, GRACE)
    assert reloaded.gens is not None and reloaded.gens[gen_of(writer)].writers == 1


def test_a_batch_makes_only_the_writers_its_facts_name_into_the_checkers_states(
        monkeypatch: Any) -> None:
    store = Store(retain_ns=FOREVER)
    store.run([fact("visible", 3 * GEN_SPAN + w, w % 4, SECOND) for w in range(1, 200)])
    made: list[tuple] = []
    real = txnfold._txn_of
    monkeypatch.setattr(txnfold, "_txn_of", lambda row: made.append(row) or real(row))
    found = _anomalies(store.run([fact("invisible", 3 * GEN_SPAN + 7, 5, 2 * SECOND, "info")]))
    assert {a[0] for a in found} == {"torn-transaction", "lost-write"}
    assert store.reads == [3] and len(made) == 1  # one of the generation's 199 writers
    reloaded = TxnBucket.from_parts("p", store.head, store._read, GRACE).gens
    assert reloaded is not None and reloaded[3].writers == 199  # the others kept as they were
    made.clear()
    again = _anomalies(store.run([fact("invisible", 3 * GEN_SPAN + 8, 6, 3 * SECOND, "info")]))
    assert {a[0] for a in again} == {"torn-transaction", "lost-write"} and len(made) == 1
