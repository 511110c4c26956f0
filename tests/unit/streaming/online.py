"""The monitor's two stages without Spark: what the processors do, batch by batch.

``run_online`` feeds a history through the same adapters the Spark processors call
(``KeyFold`` per key, ``TxnBucket`` per writer bucket), with every key's state through bytes
between micro-batches, facts handed from stage 1 to stage 2 as JSON, and the watermark moving
with event time. Ops are split into fragments as the monitor's event reader splits them
(``events.event_of``: invocations too, for offset commits and share groups' ops). It returns
the evidence records and the stats rows.
"""

from __future__ import annotations

import json
from typing import Any

from kmon.checker.state import CHUNK, INF
from kmon.history.events import event_of
from kmon.history.model import Op
from kmon.streaming import state_pages
from kmon.streaming.keyfold import ANOMALY, FACT, STATS, UNSEEN, FoldSettings, KeyFold
from kmon.streaming.metrics import E2E_BUCKETS
from kmon.streaming.txnfold import TxnBucket, parse_facts

SECOND = 1_000_000_000
END = INF // 2  # a watermark past every deadline


# Pages of one chunk: short histories still cut their keys' windows into several pages.
PAGE_SLOTS = CHUNK


def settings(grace: int = SECOND, unseen: int | None = None, **more: int) -> FoldSettings:
    """``more``: FoldSettings' share_lock_ns, share_delivery_limit, share_skew_ns, page_slots
    (default ``PAGE_SLOTS``)."""
    more.setdefault("page_slots", PAGE_SLOTS)
    return FoldSettings(grace_ns=grace, unseen_grace_ns=unseen,
                        e2e_buckets_ns=tuple(int(b * 1e9) for b in E2E_BUCKETS), **more)


class KeyStore:
    """Keys' state as the processor keeps it: a head value and a map of cold window pages per
    key, written only where ``KeyFold.to_parts`` says (what ``KeyFoldProcessor._store`` does),
    and read back from the store or, when its tokens match, from a worker's ``PageCache``."""

    def __init__(self, cache: state_pages.PageCache | None = None) -> None:
        self.heads: dict[Any, bytes] = {}
        self.pages: dict[Any, dict[int, bytes]] = {}
        self.written = 0  # bytes put, heads and pages
        self.page_puts = 0
        self.page_removes = 0
        self.cache = cache

    def load(self, probe: str, key: Any, s: FoldSettings) -> KeyFold:
        head = self.heads.get(key)
        if head is None:
            return KeyFold(probe, key, s)

        def read(tokens: dict[int, int]) -> dict[int, state_pages.Page]:
            got = self.cache.get(key, tokens) if self.cache else None
            if got is None:
                got = {p: state_pages.Page(tokens[p], b) for p, b in self.pages[key].items()}
            return got

        return KeyFold.from_parts(probe, head, read, s)

    def save(self, key: Any, kf: KeyFold) -> None:
        saved = kf.to_parts(kf.settings.page_slots)
        stored = self.pages.setdefault(key, {})
        stored.update({p: page.data for p, page in saved.writes.put.items()})
        self.page_puts += len(saved.writes.put)
        self.page_removes += len(saved.writes.removed)
        for p in saved.writes.removed:
            del stored[p]
        # what was loaded, with the changes, is the new state
        assert stored == {p: page.data for p, page in saved.pages.items()}
        self.heads[key] = saved.head
        kf.pages = saved.pages
        if self.cache:
            self.cache.put(key, saved.pages)
        self.written += saved.written

    def size(self, key: Any) -> int:
        return len(self.heads[key]) + sum(map(len, self.pages.get(key, {}).values()))


def run_online(ops: list[Op], probe: str = "p", batch: int = 5, grace: int = SECOND,
               unseen: int | None = None, delay: int = 0, end: int = END,
               s: FoldSettings | None = None,
               cache: state_pages.PageCache | None = None) -> dict[str, list]:
    """Evidence (parsed) and stats rows of ``ops`` checked online in batches of ``batch`` ops,
    and ``state_bytes``: after each batch, the largest key's serialized state (what the monitor
    keeps in its state store).

    The watermark after each batch is the latest event time seen minus ``delay``; at the end it
    jumps to ``end``: by default past every deadline. (Share groups' lost writes need the end of
    the history plus the grace to agree with ``kmon check``: past it, a lock that the history's
    end leaves running has expired.) ``s``: the settings (else ``settings(grace, unseen)``); stage
    2 has ``s.txn_buckets`` buckets, as stage 1 groups its facts.
    """
    s = settings(grace, unseen) if s is None else s
    keys = KeyStore(cache)
    txns: dict[int, tuple[bytes, dict[int, bytes]]] = {}  # bucket -> (head, generations)
    out: dict[str, list] = {"evidence": [], "stats": [], "facts": [], "state_bytes": []}
    max_time = 0
    watermark = 0
    for start in range(0, len(ops), batch):
        chunk = ops[start:start + batch]
        frags: dict[Any, list] = {}
        for op in chunk:
            max_time = max(max_time, op.time)
            if op.f == "crash":
                continue
            for fr in event_of(op).frags:
                frags.setdefault(fr.key, []).append(fr)
        _stage1(frags, keys, s, probe, watermark, out)
        out["state_bytes"].append(max(map(keys.size, keys.heads), default=0))
        _stage2(out, txns, probe, grace, s.txn_buckets)
        watermark = max(watermark, max_time - delay)
    for key in list(keys.heads):  # timers firing at the end
        kf = keys.load(probe, key, s)
        _collect(kf.wake(end), out)
        keys.save(key, kf)
    _stage2(out, txns, probe, grace, s.txn_buckets)
    out["written"] = [keys.written]
    return out


def _stage1(frags: dict, keys: KeyStore, s: FoldSettings, probe: str, wm: int,
            out: dict) -> None:
    for key, frs in frags.items():
        kf = keys.load(probe, key, s)
        _collect(kf.batch(frs, None, wm), out)
        keys.save(key, kf)


def _stage2(out: dict, txns: dict, probe: str, grace: int, buckets: int) -> None:
    records, out["facts"] = out["facts"], []
    by_bucket: dict[int, list] = {}
    for b, body in records:  # as the facts topic keys them: by bucket
        by_bucket.setdefault(b, []).extend(parse_facts(body.encode(), probe, b, buckets))
    for b, bucket_facts in by_bucket.items():
        # As the processor keeps a bucket: a head, and its writers' generations apart.
        head, gens = txns.get(b, (None, {}))
        tb = (TxnBucket(probe, grace, paged=True) if head is None else
              TxnBucket.from_parts(probe, head, gens.get, grace))
        _collect(tb.batch(bucket_facts), out)
        saved = tb.to_parts()
        for g in saved.removed:
            del gens[g]
        gens.update(saved.puts)
        txns[b] = (saved.head, gens)


def _collect(rows: list[dict[str, Any]], out: dict) -> None:
    for r in rows:
        if r["kind"] in (ANOMALY, UNSEEN):
            out["evidence"].append(json.loads(r["body"]))
        elif r["kind"] == FACT:
            out["facts"].append((r["writer"], r["body"]))
        elif r["kind"] == STATS:
            out["stats"].append(r)


def verdicts(evidence: list[dict]) -> dict[str, list[dict]]:
    """Anomaly type -> checker records of new verdicts (updates left out)."""
    by_type: dict[str, list[dict]] = {}
    for e in evidence:
        if not e["update"] and e["anomaly"] != "unseen":
            by_type.setdefault(e["anomaly"], []).append(e["record"])
    return by_type
