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

from kmon.checker.state import INF
from kmon.history.events import event_of
from kmon.history.model import Op
from kmon.streaming.keyfold import ANOMALY, FACT, STATS, UNSEEN, FoldSettings, KeyFold
from kmon.streaming.metrics import E2E_BUCKETS
from kmon.streaming.txnfold import TxnBucket

SECOND = 1_000_000_000
END = INF // 2  # a watermark past every deadline


def settings(grace: int = SECOND, unseen: int | None = None, **share: int) -> FoldSettings:
    """``share``: FoldSettings' share_lock_ns, share_delivery_limit, share_skew_ns."""
    return FoldSettings(grace_ns=grace, unseen_grace_ns=unseen,
                        e2e_buckets_ns=tuple(int(b * 1e9) for b in E2E_BUCKETS), **share)


def run_online(ops: list[Op], probe: str = "p", batch: int = 5, grace: int = SECOND,
               unseen: int | None = None, delay: int = 0, buckets: int = 4, end: int = END,
               s: FoldSettings | None = None) -> dict[str, list]:
    """Evidence (parsed) and stats rows of ``ops`` checked online in batches of ``batch`` ops,
    and ``state_bytes``: after each batch, the largest key's serialized state (what the monitor
    keeps in its state store).

    The watermark after each batch is the latest event time seen minus ``delay``; at the end it
    jumps to ``end``: by default past every deadline. (Share groups' lost writes need the end of
    the history plus the grace to agree with ``kmon check``: past it, a lock that the history's
    end leaves running has expired.) ``s``: the settings (else ``settings(grace, unseen)``).
    """
    s = settings(grace, unseen) if s is None else s
    keys: dict[Any, bytes] = {}
    txns: dict[int, bytes] = {}
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
        out["state_bytes"].append(max(map(len, keys.values()), default=0))
        _stage2(out, txns, probe, grace, buckets)
        watermark = max(watermark, max_time - delay)
    for key in list(keys):  # timers firing at the end
        kf = KeyFold.from_bytes(probe, keys[key], s)
        _collect(kf.wake(end), out)
        keys[key] = kf.to_bytes()
    _stage2(out, txns, probe, grace, buckets)
    return out


def _stage1(frags: dict, keys: dict, s: FoldSettings, probe: str, wm: int, out: dict) -> None:
    for key, frs in frags.items():
        data = keys.get(key)
        kf = KeyFold(probe, key, s) if data is None else KeyFold.from_bytes(probe, data, s)
        _collect(kf.batch(frs, None, wm), out)
        keys[key] = kf.to_bytes()


def _stage2(out: dict, txns: dict, probe: str, grace: int, buckets: int) -> None:
    facts, out["facts"] = out["facts"], []
    by_bucket: dict[int, list] = {}
    for f in facts:
        by_bucket.setdefault(f["writer"] % buckets, []).append(f)
    for b, bucket_facts in by_bucket.items():
        data = txns.get(b)
        tb = TxnBucket(probe, grace) if data is None else TxnBucket.from_bytes(probe, data, grace)
        _collect(tb.batch(bucket_facts), out)
        txns[b] = tb.to_bytes()


def _collect(rows: list[dict[str, Any]], out: dict) -> None:
    for r in rows:
        if r["kind"] in (ANOMALY, UNSEEN):
            out["evidence"].append(json.loads(r["body"]))
        elif r["kind"] == FACT:
            out["facts"].extend(json.loads(r["body"]))
        elif r["kind"] == STATS:
            out["stats"].append(r)


def verdicts(evidence: list[dict]) -> dict[str, list[dict]]:
    """Anomaly type -> checker records of new verdicts (updates left out)."""
    by_type: dict[str, list[dict]] = {}
    for e in evidence:
        if not e["update"] and e["anomaly"] != "unseen":
            by_type.setdefault(e["anomaly"], []).append(e["record"])
    return by_type
