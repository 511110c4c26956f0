"""kmon investigate: the story of an anomaly, from its evidence record or a key and offset.

Given a key (a topic-partition) and the offsets, values or ops in question, read the ops from
the events topic (Avro op events) or a history file, and tell:

1. the ops around that key and offset (``story.around``: Jepsen's around-key-offset, each op's
   mops trimmed to that key and to offsets within ``n`` of the ones in question);
2. who wrote what at which offset, and who read it (``story.key_log``); for share groups
   (KIP-932), each delivery of the offsets in question to a share consumer, with its count,
   the leader its poll saw and its acknowledgement (``story.share_deliveries``);
3. the checker's verdict and why: ``kmon.checker`` re-run over all the key's ops, its records
   matched to the evidence, judged by ``kmon.checker.policy`` (``story.judge``).

``investigate`` does the work and returns an ``Investigation``; ``text`` prints it, ``page``
writes the self-contained HTML timeline of how each process saw the key's log.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from kmon.history.model import MOP_FS, SHARE_FS, Op
from kmon.investigate.evidence import Evidence, EvidenceError, OpRef, parse_evidence
from kmon.investigate.story import (
    ShareDelivery,
    Slot,
    Verdict,
    around,
    invoke_times,
    judge,
    key_history,
    key_log,
    same_key,
    share_deliveries,
    unplaced_writes,
    window,
)

__all__ = [
    "Evidence",
    "EvidenceError",
    "Investigation",
    "investigate",
    "parse_evidence",
]

DEFAULT_WINDOW = 5


@dataclass
class Investigation:
    evidence: Evidence
    source: str
    n: int
    window: tuple[int, int] | None
    total_ops: int
    key_ops: list[Op]  # every op of the key, trimmed to it (what the checker re-ran over)
    ops: list[Op]  # the ops around the offsets in question (completions)
    invoked: dict[int, int]  # completion index -> invoke time
    log: dict[int, Slot]
    unplaced: list[tuple[Any, Op]]
    verdict: Verdict
    skipped: list[str] = field(default_factory=list)
    origin: dict[int, tuple[str, int]] = field(default_factory=dict)  # renumbered -> (probe, i)
    # offset in question -> its deliveries to share consumers (share groups' ops only)
    deliveries: dict[int, list[ShareDelivery]] = field(default_factory=dict)

    @property
    def key(self) -> Any:
        return self.evidence.key

    @property
    def evidence_ops(self) -> set[int]:
        return self.evidence.op_indices

    @property
    def highlight(self) -> set[int]:
        """The ops to point at: the evidence's, and those of the matching re-checked records."""
        out = set(self.evidence_ops)
        for r in self.verdict.matched:
            for f in ("op", "writer", "reader"):
                if isinstance(r.get(f), int):
                    out.add(r[f])
            for f in ("ops", "cycle"):
                out.update(i for i in r.get(f) or () if isinstance(i, int))
        return out

    def label(self, index: int) -> str:
        """How an op is named to the reader: its index, or probe/index across probes."""
        if index in self.origin:
            probe, original = self.origin[index]
            return f"{probe}/{original}"
        return str(index)


def _relevant(pairs: Iterable[tuple[str, Op]], key: Any) -> Iterable[tuple[str, Op]]:
    """Stream filter: the ops of ``key`` with their invokes, and every crash (keeps memory at
    the key's share of a long events topic)."""
    pending: dict[tuple[str, Any], tuple[str, Op]] = {}
    for probe, op in pairs:
        if op.type == "invoke":
            pending[(probe, op.process)] = (probe, op)
            continue
        inv = pending.pop((probe, op.process), None)
        if op.f == "crash" or _mentions(op, key):
            if inv is not None:
                yield inv
            yield probe, op


def _mentions(op: Op, key: Any) -> bool:
    if any(same_key(k, key) for k in op.rebalanced_keys()):
        return True
    if op.f in MOP_FS:
        return any(
            (m[0] == "send" and same_key(m[1], key))
            or (m[0] == "poll" and m[1] and any(same_key(k, key) for k in m[1]))
            for m in op.value or ()
        )
    if op.f in SHARE_FS:  # share-read and ack mops name their key
        return any(same_key(m[1], key) for m in op.value or ())
    return op.f in ("assign", "subscribe") and any(same_key(k, key) for k in op.value or ())


def _in_history_order(pairs: list[tuple[str, Op]]) -> tuple[list[Op], dict[int, tuple[str, int]]]:
    """One history: each probe's ops in index order, probes merged by time. With several
    probes, processes become ``probe/process`` and ops are renumbered (``origin`` maps back)."""
    by_probe: dict[str, list[Op]] = {}
    for probe, op in pairs:
        by_probe.setdefault(probe, []).append(op)
    for ops in by_probe.values():
        ops.sort(key=lambda o: o.index)
    if len(by_probe) <= 1:
        return next(iter(by_probe.values()), []), {}
    merged = heapq.merge(*([(o.time, p, o) for o in ops] for p, ops in sorted(by_probe.items())),
                         key=lambda t: (t[0], t[1]))
    out, origin = [], {}
    for i, (_, probe, op) in enumerate(merged):
        origin[i] = (probe, op.index)
        out.append(replace(op, index=i, process=f"{probe}/{op.process}"))
    return out, origin


def _remap_evidence(ev: Evidence, origin: dict[int, tuple[str, int]]) -> Evidence:
    if not origin:
        return ev
    probe = ev.record.get("probe")
    back: dict[int, list[int]] = {}
    for new, (p, old) in origin.items():
        if probe is None or p == probe:
            back.setdefault(old, []).append(new)
    ops = [OpRef(n, r.process, r.time) for r in ev.ops for n in back.get(r.index, [])]
    return replace(ev, ops=ops)


def _offsets_of(ops: list[Op], key: Any, values: set[str], indices: set[int]) -> list[int]:
    """Where the values (or the named ops' records) of the key sit, when the evidence has no
    offsets itself."""
    out = set()
    for off, slot in key_log(ops, key).items():
        if {str(v) for v in slot.values} & values:
            out.add(off)
        if any(o.index in indices for ws in (*slot.writers.values(), *slot.readers.values())
               for o in ws):
            out.add(off)
    return sorted(out)


def investigate(pairs: Iterable[tuple[str, Op]], evidence: Evidence, *, source: str,
                n: int = DEFAULT_WINDOW, isolation: str = "read_committed",
                skipped: list[str] | None = None,
                share: dict[str, int] | None = None) -> Investigation:
    """The story of ``evidence``'s key from ``pairs`` of (probe id, op) in any order;
    ``share``: the share groups' settings the checker re-runs with (``CheckConfig``'s
    ``share_lock_ns``, ``share_delivery_limit``, ``share_skew_ns``; Kafka's defaults if None)."""
    counter = _Counter(pairs)
    ops, origin = _in_history_order(list(_relevant(counter, evidence.key)))
    ev = _remap_evidence(evidence, origin)
    key_ops = key_history(ops, ev.key)
    if not ev.offsets and (ev.values or ev.ops):
        found = _offsets_of(key_ops, ev.key, {str(v) for v in ev.values}, ev.op_indices)
        ev = replace(ev, offsets=found) if found else ev
    win = window(ev, n)
    near = around(key_ops, ev.key, win, ev.values, ev.op_indices)
    invoked = invoke_times(key_ops)
    return Investigation(
        evidence=ev, source=source, n=n, window=win, total_ops=counter.count, key_ops=key_ops,
        ops=near, invoked=invoked, log=key_log(near, ev.key),
        unplaced=unplaced_writes(near, ev.key), verdict=judge(key_ops, ev, isolation, share),
        skipped=list(skipped or ()), origin=origin,
        deliveries=share_deliveries(key_ops, ev.key, ev.offsets, invoked),
    )


class _Counter:
    """Counts the ops streamed through it (how much of the history was read)."""

    def __init__(self, pairs: Iterable[tuple[str, Op]]) -> None:
        self.pairs = pairs
        self.count = 0

    def __iter__(self) -> Iterator[tuple[str, Op]]:
        for pair in self.pairs:
            self.count += 1
            yield pair
