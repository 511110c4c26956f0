"""Injected faults: a real probe history with one finding of Jepsen's Bufstream analysis
(``/work/shared/reference/004``) written into it, for the anomalies real Kafka 4.4 cannot be
made to produce on demand. The matrix replays the result into the events topic, so the
monitor's whole path (decode, per-key fold, transaction stage, outputs) judges it.

Each injector takes the ops of a healthy probe run (its history file) and the topic prefix
the replay's keys are to be placed under, and returns (ops, what was changed). They change as
little as the finding does:

- ``spurious-zero-offset`` (Bufstream #3): a few plain sends' acknowledgements say offset 0;
  the records are really at their own offset, where pollers read them ("only the sender
  observed offset zero").
- ``server-side-filtering`` (Bufstream #5): a run of consecutive records of one partition is
  left out of every fetch answer, so every poller passes over them ("pollers simply skipped
  over the records as if they had never existed").
- ``torn-transaction`` (KAFKA-17754): a committed transaction's write to one partition is
  never visible (its marker there was an abort, so read_committed readers skip it) while its
  other writes are read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from kmon.history.model import KeyPlacement, Op

Injected = tuple[list[Op], str]


def renamed(ops: list[Op], prefix: str) -> list[Op]:
    """``ops`` with every placement's topic ``<old prefix>.<n>`` moved to ``<prefix>.<n>``."""
    out = []
    for op in ops:
        if op.meta is not None and op.meta.placements:
            places = {k: KeyPlacement(f"{prefix}.{p.topic.rsplit('.', 1)[-1]}", p.partition,
                                      p.leader, p.leader_epoch)
                      for k, p in op.meta.placements.items()}
            op = dataclasses.replace(op, meta=dataclasses.replace(op.meta, placements=places))
        out.append(op)
    return out


def _reads(ops: list[Op]) -> dict[tuple[Any, Any], int]:
    """(key, value) -> how many completed polls returned it."""
    n: dict[tuple[Any, Any], int] = {}
    for op in ops:
        if op.type == "invoke" or op.f not in ("poll", "txn"):
            continue
        for m in op.value or ():
            if m[0] == "poll":
                for k, pairs in (m[1] or {}).items():
                    for _, v in pairs:
                        n[(k, v)] = n.get((k, v), 0) + 1
    return n


def _hide(ops: list[Op], hidden: set[tuple[Any, Any]]) -> list[Op]:
    """``ops`` with every read of a hidden (key, value) taken out of the poll answers."""
    out = []
    for op in ops:
        if op.type != "invoke" and op.f in ("poll", "txn") and op.value:
            mops = []
            for m in op.value:
                if m[0] == "poll" and m[1]:
                    m = ("poll", {k: [(o, v) for o, v in pairs if (k, v) not in hidden]
                                  for k, pairs in m[1].items()})
                mops.append(m)
            op = dataclasses.replace(op, value=mops)
        out.append(op)
    return out


def _ok_sends(ops: list[Op], fs: tuple[str, ...] = ("send",)) -> list[tuple[int, Any, Any, int]]:
    """(op position, key, value, offset) of every acknowledged write of ops of kinds ``fs``."""
    return [(i, m[1], m[2], m[3]) for i, op in enumerate(ops)
            if op.type == "ok" and op.f in fs
            for m in op.value or () if m[0] == "send" and m[3] is not None]


def spurious_zero_offsets(ops: list[Op], prefix: str, count: int = 5) -> Injected:
    reads = _reads(ops)
    # Sends far from offset 0 whose record pollers did read: the ack says 0, the log says not.
    picks = [s for s in _ok_sends(ops) if s[3] > 10 and reads.get((s[1], s[2]))]
    step = max(1, len(picks) // count)
    chosen = picks[::step][:count]
    if not chosen:
        raise ValueError("no acknowledged send read back at an offset above 10 to rewrite")
    out = list(ops)
    for i, _, _, _ in chosen:
        (f, k, v, _), *rest = out[i].value
        out[i] = dataclasses.replace(out[i], value=[(f, k, v, 0), *rest])
    what = ", ".join(f"key {k} value {v} acked at 0 (really {o})" for _, k, v, o in chosen)
    return renamed(out, prefix), f"{len(chosen)} send acks rewritten to offset 0: {what}"


def server_side_filtering(ops: list[Op], prefix: str, run: int = 6) -> Injected:
    reads = _reads(ops)
    by_key: dict[Any, list[tuple[int, Any]]] = {}
    for _, k, v, o in _ok_sends(ops, ("send", "txn")):
        by_key.setdefault(k, []).append((o, v))
    # The busiest key; a run of its records from the middle of its log, all of them read.
    key = max(by_key, key=lambda k: len(by_key[k]))
    log = sorted(by_key[key])
    mid = len(log) // 2
    window = [(o, v) for o, v in log[mid:mid + run] if reads.get((key, v))]
    if len(window) < 2:
        raise ValueError("no run of read records to filter out")
    hidden = {(key, v) for _, v in window}
    what = (f"key {key}: offsets {window[0][0]}..{window[-1][0]} ({len(window)} acknowledged "
            "records) left out of every fetch answer")
    return renamed(_hide(ops, hidden), prefix), what


def torn_transaction(ops: list[Op], prefix: str) -> Injected:
    reads = _reads(ops)
    for op in ops:
        if op.type != "ok" or op.f != "txn":
            continue
        sends = [(m[1], m[2]) for m in op.value if m[0] == "send"]
        if len(sends) >= 2 and all(reads.get(s) for s in sends):
            key, value = sends[-1]
            what = (f"committed txn op {op.index} ({len(sends)} writes): its write of {value} "
                    f"to key {key} never visible, the others read")
            return renamed(_hide(ops, {(key, value)}), prefix), what
    raise ValueError("no committed transaction with two writes, all read, to tear")


INJECTORS: dict[str, Callable[[list[Op], str], Injected]] = {
    "spurious-zero-offset": spurious_zero_offsets,
    "server-side-filtering": server_side_filtering,
    "torn-transaction": torn_transaction,
}
