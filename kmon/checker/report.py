"""Turning detected anomalies into a report: merged, ordered, judged, printable.

The online fold emits evidence as it learns it (a third value at an inconsistent offset, a
skipped value arriving late), so the same anomaly may come in pieces; merging here gives one
record per anomaly, as an offline checker would.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kmon.checker.anomaly import (
    ANOMALY_TYPES,
    DUPLICATE,
    G1A,
    INCONSISTENT_OFFSETS,
    INT_POLL_SKIP,
    INT_SEND_SKIP,
    LOST_WRITE,
    POLL_SKIP,
    PRECOMMITTED_READ,
    TORN_TRANSACTION,
    Anomaly,
)
from kmon.checker.policy import allowed_anomalies, invalidating
from kmon.checker.sink import LagSample


def _sort_token(x: Any) -> tuple[int, Any]:
    """Order mixed ints and strings deterministically (ints first)."""
    return (0, x) if isinstance(x, int) else (1, str(x))


def _union(a: list[Any], b: list[Any]) -> list[Any]:
    out = list(a)
    for x in b:
        if x not in out:
            out.append(x)
    return out


def _merge_key(a: Anomaly) -> tuple | None:
    r = a.record
    if a.type == INCONSISTENT_OFFSETS:
        return (r["key"], r["offset"])
    if a.type in (DUPLICATE, LOST_WRITE):
        return (r["key"], r["value"])
    if a.type == G1A:  # one per value and reading op (a txn may read it in several polls)
        return (r["key"], r["value"], r["reader"])
    if a.type == PRECOMMITTED_READ:
        return (r["key"], r["op"])
    if a.type == POLL_SKIP:
        return (r["key"], tuple(r["ops"]))
    if a.type in (INT_POLL_SKIP, INT_SEND_SKIP):
        return (r["key"], r["op"], r["offsets"][0])
    if a.type == TORN_TRANSACTION:
        return (r["writer"],)
    return None


def merge_key(a: Anomaly) -> tuple | None:
    """What makes two records pieces of one anomaly, as ``merge_anomalies`` merges them:
    ``(type, ...)``, or None when every record of the type is an anomaly of its own.

    The online monitor counts an anomaly once, on its first piece, and sends later pieces as
    updates of that verdict.
    """
    mk = _merge_key(a)
    return None if mk is None else (a.type, *mk)


def _merge(old: dict[str, Any], new: dict[str, Any], type: str) -> None:
    if type == INCONSISTENT_OFFSETS:
        old["values"] = sorted(_union(old["values"], new["values"]), key=_sort_token)
    elif type == DUPLICATE:
        old["offsets"] = sorted(_union(old["offsets"], new["offsets"]))
        old["count"] = len(old["offsets"])
    elif type in (POLL_SKIP, INT_POLL_SKIP, INT_SEND_SKIP):
        for f in ("offsets", "values", "process"):
            had = old.get(f)
            incomplete = had is None or (isinstance(had, list) and None in had)
            if incomplete and new.get(f) is not None:
                old[f] = new[f]
        old["skipped"] = _union(old["skipped"], new["skipped"])
        old["delta"] = len(old["skipped"]) + 1
    elif type == TORN_TRANSACTION and len(new["invisible"]) >= len(old["invisible"]):
        old.update(new)
    elif type == LOST_WRITE:
        for f, v in new.items():
            old.setdefault(f, v)
    elif type == PRECOMMITTED_READ:
        old["values"] = _union(old["values"], new["values"])


def _order(r: dict[str, Any]) -> tuple:
    first_op = r.get("op", r.get("writer", (r.get("ops") or r.get("cycle") or [0])[0]))
    return (_sort_token(r.get("key")), r.get("offset", -1) if r.get("offset") is not None
            else -1, first_op if isinstance(first_op, int) else -1)


def merge_anomalies(anomalies: Iterable[Anomaly]) -> dict[str, list[dict[str, Any]]]:
    """Type -> records, one per anomaly, in a stable order."""
    by_type: dict[str, list[dict[str, Any]]] = {}
    index: dict[tuple, dict[str, Any]] = {}
    for a in anomalies:
        mk = _merge_key(a)
        if mk is not None:
            full = (a.type, *mk)
            if full in index:
                _merge(index[full], a.record, a.type)
                continue
            rec = dict(a.record)
            index[full] = rec
        else:
            rec = dict(a.record)
        by_type.setdefault(a.type, []).append(rec)
    rank = {t: n for n, t in enumerate(ANOMALY_TYPES)}
    return {
        t: sorted(recs, key=_order)
        for t, recs in sorted(by_type.items(), key=lambda kv: rank.get(kv[0], len(rank)))
    }


@dataclass
class Report:
    valid: bool
    errors: dict[str, list[dict[str, Any]]]
    unseen_counts: dict[Any, int]
    unseen_messages: dict[Any, list[Any]]
    lags: list[LagSample]
    isolation: str = "read_committed"
    reason: str | None = None  # why a history is invalid without any anomaly
    stats: dict[str, Any] = field(default_factory=dict)
    ww_deps: bool = False

    def worst_lag(self) -> LagSample | None:
        return max(self.lags, key=lambda s: s[3], default=None)

    def to_json(self) -> dict[str, Any]:
        worst = self.worst_lag()
        out: dict[str, Any] = {
            "valid": self.valid,
            "errors": self.errors,
            "unseen": {
                "counts": {_json_key(k): n for k, n in self.unseen_counts.items()},
                "messages": {_json_key(k): vs for k, vs in self.unseen_messages.items()},
            },
            "realtime-lag": [_lag_json(s) for s in self.lags],
            # like Jepsen: a zero lag at time zero when nothing was sampled
            "worst-realtime-lag": _lag_json(worst) if worst else {"time": 0, "lag": 0},
            "allowed": sorted(t for t in self.errors
                              if t in allowed_anomalies(self.isolation, self.ww_deps)),
        }
        if self.reason:
            out["reason"] = self.reason
        if self.stats:
            out["stats"] = self.stats
        return out

    def summary(self) -> str:
        lines = [f"valid: {str(self.valid).lower()}"]
        if self.reason:
            lines.append(f"reason: {self.reason}")
        bad = set(invalidating(list(self.errors), self.isolation, self.ww_deps))
        for t, recs in self.errors.items():
            note = "" if t in bad else "  (allowed in Kafka's model)"
            lines.append(f"{t}: {len(recs)}{note}")
            for r in recs[:5]:
                lines.append("  " + _describe(r))
            if len(recs) > 5:
                lines.append(f"  ... and {len(recs) - 5} more")
        total = sum(self.unseen_counts.values())
        if total:
            keys = ", ".join(f"{k}: {n}" for k, n in self.unseen_counts.items() if n)
            lines.append(f"unseen (acknowledged, never polled): {total} ({keys})")
        worst = self.worst_lag()
        if worst is not None:
            lines.append(f"worst realtime lag: {worst[3] / 1e9:.3f} s "
                         f"(process {worst[1]}, key {worst[2]})")
        for k, v in self.stats.items():
            lines.append(f"{k}: {v}")
        return "\n".join(lines)


def _json_key(k: Any) -> str:
    return k if isinstance(k, str) else str(k)


def _lag_json(s: LagSample) -> dict[str, Any]:
    return {"time": s[0], "process": s[1], "key": s[2], "lag": s[3]}


def _describe(r: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in r.items())
