"""The story of one key around some offsets: its ops, its log, and the checker's verdict.

1. ``key_history``: every op of the key, trimmed to the key (other keys' mops dropped), with the
   invokes of its completions and the crashes of its processes, in history order. Share groups'
   ``share-poll`` and ``ack`` ops (KIP-932) are ops of the keys they name.
2. ``around``: Jepsen's around-key-offset: those ops' mops trimmed further to offsets within
   ``n`` of the offsets in question (and to the values in question, for sends whose offset is
   unknown); ops left without mops are dropped unless the evidence names them.
3. ``key_log``: offset by offset, which values were written there by whom, and who read them
   (a share poll's deliveries are reads); ``share_deliveries``: each delivery of a record to a
   share consumer, with its count, the leader its poll saw and its acknowledgement.
4. ``judge``: the checker re-run over the key's history, its records of the evidence's anomaly
   that match the evidence, and why they are (or are not) allowed by Kafka's model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kmon.checker import CheckConfig, Checker, Report
from kmon.checker.policy import allowed_anomalies
from kmon.history.model import MOP_FS, SHARE_FS, Op
from kmon.investigate.evidence import Evidence


def same_key(a: Any, b: Any) -> bool:
    """Keys compare as typed values, or as text when one side came from the command line."""
    return a == b or str(a) == str(b)


def _trim_share(op: Op, key: Any, keep_mop: Any = None) -> Op | None:
    """A share poll or ack with its mops reduced to ``key`` (and to the records or acks
    ``keep_mop`` accepts, each as ``("read", key, (offset, value))``); None if nothing is left.
    A share poll's unknown records (as invoked, or ``info``/``fail``) are always kept: it may
    have acquired any record."""
    mops = []
    for m in op.value or ():
        if not same_key(m[1], key):
            continue
        if m[0] == "share-read":
            if m[2] is None:
                mops.append(m)
                continue
            recs = [r for r in m[2] if keep_mop is None or keep_mop(("read", m[1], r[:2]))]
            if recs or keep_mop is None:
                mops.append((m[0], m[1], recs))
        elif m[0] == "ack" and (keep_mop is None or keep_mop(("read", m[1], (m[2], None)))):
            mops.append(m)
    return dataclasses.replace(op, value=mops) if mops else None


def _trim(op: Op, key: Any, keep_mop: Any = None) -> Op | None:
    """``op`` with its mops reduced to ``key`` (and to what ``keep_mop`` accepts)."""
    if op.f in SHARE_FS:
        return _trim_share(op, key, keep_mop)
    if op.f not in MOP_FS:
        return op
    mops = []
    for m in op.value or ():
        if m[0] == "send":
            if same_key(m[1], key) and (keep_mop is None or keep_mop(m)):
                mops.append(m)
        elif m[0] == "commit":  # a transaction's offset commit: kept for its key's story
            if same_key(m[1], key) and keep_mop is None:
                mops.append(m)
        elif m[1] is None:
            mops.append(m)  # an invoked poll: keyless, kept with its op
        else:
            reads = {k: [r for r in pairs if keep_mop is None or keep_mop(("read", k, r))]
                     for k, pairs in m[1].items() if same_key(k, key)}
            if any(reads.values()) or (keep_mop is None and reads):
                mops.append(("poll", reads))
    if op.type == "invoke":
        # an invoke's sends name the key; its polls are keyless: keep it if it has either
        return dataclasses.replace(op, value=mops) if mops else None
    if not any(m[0] == "send" or (m[0] == "poll" and m[1]) for m in mops):
        return None
    return dataclasses.replace(op, value=mops)


def _touches(op: Op, key: Any) -> bool:
    if op.f in MOP_FS:
        for m in op.value or ():
            if m[0] == "send" and same_key(m[1], key):
                return True
            if m[0] == "poll" and m[1] and any(same_key(k, key) for k in m[1]):
                return True
        return False
    if op.f in ("assign", "subscribe"):
        return any(same_key(k, key) for k in op.value or ())
    if op.f == "commit" or op.f in SHARE_FS:
        return any(same_key(m[1], key) for m in op.value or ())
    return False


def key_history(ops: Iterable[Op], key: Any) -> list[Op]:
    """The ops of ``key`` (trimmed to it), with their invokes and their processes' crashes."""
    ops = list(ops)
    keep: set[int] = set()
    pending: dict[Any, int] = {}  # process -> position of its open invoke
    procs: set[Any] = set()
    for i, op in enumerate(ops):
        if op.type == "invoke":
            pending[op.process] = i
            continue
        inv = pending.pop(op.process, None)
        if _touches(op, key) or any(same_key(k, key) for k in op.rebalanced_keys()):
            keep.add(i)
            procs.add(op.process)
            if inv is not None:
                keep.add(inv)
    out = []
    for i, op in enumerate(ops):
        if op.f == "crash" and op.process in procs:
            out.append(op)
        elif i in keep:
            trimmed = _trim(op, key)
            if trimmed is not None:
                out.append(trimmed)
            elif op.type == "invoke" or op.f not in MOP_FS:
                out.append(op if op.f not in MOP_FS else dataclasses.replace(op, value=[]))
            else:
                # a poll of the key that returned nothing, or a rebalance of it: keep it empty
                out.append(dataclasses.replace(op, value=[("poll", {key: []})]))
    return out


def window(evidence: Evidence, n: int) -> tuple[int, int] | None:
    if not evidence.offsets:
        return None
    return min(evidence.offsets) - n, max(evidence.offsets) + n


def around(ops: Iterable[Op], key: Any, lo_hi: tuple[int, int] | None, values: Iterable[Any],
           op_indices: Iterable[int] = ()) -> list[Op]:
    """Jepsen's around-key-offset over a key history: mops within the window (or of the values
    in question); ops without any dropped, except those the evidence names. Completions only:
    ``invoke_times`` gives when each was invoked."""
    values = {str(v) for v in values}
    named = set(op_indices)
    if lo_hi is None and not values:
        return [op for op in ops if op.type != "invoke"]
    lo, hi = lo_hi if lo_hi is not None else (1, 0)

    def keep(m: tuple) -> bool:
        if m[0] == "send":
            off, value = m[3], m[2]
        else:
            off, value = m[2]
        if off is not None and lo <= off <= hi:
            return True
        return str(value) in values

    out = []
    for op in ops:
        if op.type == "invoke":
            continue  # shown with their completions (see invoke_times)
        if op.f not in MOP_FS and op.f not in SHARE_FS:
            out.append(op)
            continue
        trimmed = _trim(op, key, keep)
        if trimmed is not None:
            out.append(trimmed)
        elif op.index in named:
            out.append(dataclasses.replace(op, value=[]))
    return out


def invoke_times(ops: Iterable[Op]) -> dict[int, int]:
    """Completion op index -> its invocation's time (the event's invoke_time, else the invoke)."""
    pending: dict[Any, int] = {}
    out: dict[int, int] = {}
    for op in ops:
        if op.type == "invoke":
            pending[op.process] = op.time
            continue
        started = pending.pop(op.process, op.time)
        if op.meta is not None and op.meta.invoke_time is not None:
            started = op.meta.invoke_time
        out[op.index] = started
    return out


@dataclass
class Slot:
    """One offset of the key's log: the values seen there, each with its writers and readers."""

    offset: int
    writers: dict[Any, list[Op]] = field(default_factory=dict)
    readers: dict[Any, list[Op]] = field(default_factory=dict)

    @property
    def values(self) -> list[Any]:
        return list(dict.fromkeys([*self.writers, *self.readers]))


def key_log(ops: Iterable[Op], key: Any) -> dict[int, Slot]:
    """Offset -> Slot, from completions: sends with offsets, and polls' and share polls'
    records."""
    log: dict[int, Slot] = {}
    for op in ops:
        if op.type == "invoke" or (op.f not in MOP_FS and op.f != "share-poll"):
            continue
        for m in op.value or ():
            if m[0] == "send" and m[3] is not None and same_key(m[1], key):
                log.setdefault(m[3], Slot(m[3])).writers.setdefault(m[2], []).append(op)
            elif m[0] == "share-read" and m[2] and same_key(m[1], key):
                for off, value, _ in m[2]:
                    log.setdefault(off, Slot(off)).readers.setdefault(value, []).append(op)
            elif m[0] == "poll" and m[1]:
                for k, pairs in m[1].items():
                    if same_key(k, key):
                        for off, value in pairs:
                            slot = log.setdefault(off, Slot(off))
                            slot.readers.setdefault(value, []).append(op)
    return dict(sorted(log.items()))


@dataclass
class ShareDelivery:
    """One delivery of a record to a share consumer: the share poll that returned it (when it
    was invoked: ``start``), its delivery count, the key's leader the poll's placement named,
    and the ack of it by the same process that followed (None: never acknowledged)."""

    offset: int
    value: Any
    group: str | None
    poll: Op
    start: int
    count: int
    leader: int | None
    ack: Op | None = None
    outcome: str | None = None


def leader_of(op: Op, key: Any) -> int | None:
    """The key's leader as the op's placement names it."""
    for k, p in (op.meta.placements if op.meta is not None else {}).items():
        if same_key(k, key):
            return p.leader
    return None


def share_deliveries(ops: Iterable[Op], key: Any, offsets: Iterable[int] | None = None,
                     invoked: dict[int, int] | None = None) -> dict[int, list[ShareDelivery]]:
    """Offset -> its deliveries to share consumers, in history order, from completions: each
    ``ack`` names the latest delivery of the record to its process (what a consumer
    acknowledges is what it holds, as ``kmon.checker.share`` reads it)."""
    wanted = None if offsets is None else set(offsets)
    invoked = invoked or {}
    out: dict[int, list[ShareDelivery]] = {}
    for op in ops:
        if op.type == "invoke" or op.f not in SHARE_FS:
            continue
        group = op.meta.group if op.meta is not None else None
        for m in op.value or ():
            if not same_key(m[1], key):
                continue
            if m[0] == "share-read" and m[2]:
                for off, value, count in m[2]:
                    if wanted is None or off in wanted:
                        out.setdefault(off, []).append(ShareDelivery(
                            off, value, group, op, invoked.get(op.index, op.time), count,
                            leader_of(op, key)))
            elif m[0] == "ack" and (wanted is None or m[2] in wanted):
                held = [d for d in out.get(m[2], ()) if d.poll.process == op.process
                        and d.group == group]
                if held:
                    held[-1].ack, held[-1].outcome = op, m[3]
    return out


def unplaced_writes(ops: Iterable[Op], key: Any) -> list[tuple[Any, Op]]:
    """(value, op) of completed sends to the key whose offset is unknown (failed, info)."""
    return [(m[2], op) for op in ops if op.type != "invoke" and op.f in MOP_FS
            for m in op.value or () if m[0] == "send" and m[3] is None and same_key(m[1], key)]


@dataclass
class Verdict:
    anomaly: str | None
    isolation: str
    report: Report
    matched: list[dict[str, Any]]  # the re-checked records that match the evidence
    others: dict[str, list[dict[str, Any]]]  # other anomalies found on the key
    allowed_reason: str | None  # why Kafka's model allows it, when it does

    @property
    def confirmed(self) -> bool:
        return bool(self.matched)


def _record_ops(r: dict[str, Any]) -> set[int]:
    out: set[int] = set()
    for f in ("op", "writer", "reader"):
        if isinstance(r.get(f), int):
            out.add(r[f])
    for f in ("ops", "cycle"):
        out.update(x for x in r.get(f) or () if isinstance(x, int))
    return out


def _record_offsets(r: dict[str, Any]) -> set[int]:
    out = {r["offset"]} if isinstance(r.get("offset"), int) else set()
    out.update(x for x in r.get("offsets") or () if isinstance(x, int))
    for kvo in (r.get("visible") or []) + (r.get("invisible") or []):
        if len(kvo) >= 3 and isinstance(kvo[2], int):
            out.add(kvo[2])
    return out


def _record_values(r: dict[str, Any]) -> set[str]:
    vals = [r.get("value"), *(r.get("values") or ()), *(r.get("skipped") or ())]
    return {str(v) for v in vals if v is not None}


def matches(r: dict[str, Any], ev: Evidence) -> bool:
    """Does the re-checked record ``r`` describe the same anomaly as the evidence?

    The most specific thing both name decides: ops, then values, then offsets (several
    processes' poll-skips can cross the same offsets; only their ops tell them apart).
    """
    if not (ev.offsets or ev.values or ev.ops):
        return True
    if ev.ops and _record_ops(r):
        return bool(_record_ops(r) & ev.op_indices)
    if ev.values and _record_values(r):
        return bool(_record_values(r) & {str(v) for v in ev.values})
    return bool(_record_offsets(r) & set(ev.offsets))


def judge(key_ops: list[Op], ev: Evidence, isolation: str = "read_committed",
          share: dict[str, int] | None = None) -> Verdict:
    """Re-run the checker over the key's history and match its findings to the evidence;
    ``share``: ``CheckConfig``'s share groups' settings (lock, limit, skew) when not Kafka's
    defaults."""
    report = Checker(CheckConfig(isolation=isolation, **(share or {}))).run(key_ops)
    matched: list[dict[str, Any]] = []
    others: dict[str, list[dict[str, Any]]] = {}
    for kind, records in report.errors.items():
        for r in records:
            if kind == ev.anomaly and matches(r, ev):
                matched.append(r)
            elif ev.anomaly is None and matches(r, ev):
                matched.append({"anomaly": kind, **r})
            else:
                others.setdefault(kind, []).append(r)
    allowed = allowed_anomalies(isolation)
    reason = allowed.get(ev.anomaly) if ev.anomaly else None
    return Verdict(ev.anomaly, isolation, report, matched, others, reason)
