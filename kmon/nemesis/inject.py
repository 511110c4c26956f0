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
from collections.abc import Callable, Iterator
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


# -- share groups (KIP-932) ---------------------------------------------------------------------
#
# A healthy share group's history (the share-healthy row's) with one broken promise written
# in. Kafka 4.4 keeps these promises under every fault kmon has, so a replay is the only row
# for them (docs/share-groups.md defines each rule and what it allows). Each injection keeps
# clear of the neighbouring rules: a record delivered again carries a higher delivery count,
# and an invented delivery's poll overlaps or follows the acks it must not be excused by.

SKEW_NS = 1_000_000_000  # CheckConfig's default share_skew_ns: the margins below exceed it
MS = 1_000_000


@dataclasses.dataclass(frozen=True)
class _Delivery:
    """One record of an ok share poll: where the poll is in the history, and its times."""

    pos: int
    poll: Op
    key: Any
    offset: int
    value: Any
    count: int

    @property
    def start(self) -> int:
        meta = self.poll.meta
        return meta.invoke_time if meta is not None and meta.invoke_time else self.poll.time


def _deliveries(ops: list[Op]) -> list[_Delivery]:
    return [_Delivery(i, op, k, o, v, c) for i, op in enumerate(ops)
            if op.type == "ok" and op.f == "share-poll"
            for k, recs in op.share_reads().items() for o, v, c in recs]


def _acked(ops: list[Op]) -> dict[tuple[Any, int, Any], tuple[str, Op]]:
    """(process, key, offset) -> the outcome and op of its ok acknowledgement (the last)."""
    out: dict[tuple[Any, int, Any], tuple[str, Op]] = {}
    for op in ops:
        if op.type == "ok" and op.f == "ack":
            for k, o, outcome in op.acks():
                out[(op.process, k, o)] = (outcome, op)
    return out


def _invoked_at(op: Op) -> int:
    return op.meta.invoke_time if op.meta is not None and op.meta.invoke_time else op.time


def _with_ops(ops: list[Op], added: list[Op]) -> list[Op]:
    """``ops`` with ``added`` placed by time, every op renumbered in the new order (the
    checker and the monitor take op indices as the history's order)."""
    merged = sorted([*ops, *added], key=lambda o: o.time)
    return [dataclasses.replace(o, index=i) for i, o in enumerate(merged)]


def _new_process(ops: list[Op]) -> int:
    return max((o.process for o in ops if isinstance(o.process, int)), default=0) + 1000


def _share_pair(d: _Delivery, process: int, start: int, end: int, count: int) -> list[Op]:
    """A share poll by ``process`` over [start, end] delivering ``d``'s record with ``count``,
    its meta (group, probe, the key's placement) the original poll's."""
    meta = d.poll.meta
    assert meta is not None
    place = {d.key: meta.placements[d.key]} if d.key in meta.placements else {}
    done_meta = dataclasses.replace(meta, placements=place, invoke_time=start)
    return [Op(0, start, process, "invoke", "share-poll", [("share-read", d.key, None)],
               meta=dataclasses.replace(done_meta, invoke_time=None)),
            Op(0, end, process, "ok", "share-poll",
               [("share-read", d.key, [(d.offset, d.value, count)])], meta=done_meta)]


def _ack_pair(d: _Delivery, process: int, start: int, end: int, outcome: str) -> list[Op]:
    meta = d.poll.meta
    assert meta is not None
    place = {d.key: meta.placements[d.key]} if d.key in meta.placements else {}
    mops = [("ack", d.key, d.offset, outcome)]
    return [Op(0, start, process, "invoke", "ack", mops,
               meta=dataclasses.replace(meta, placements=place, invoke_time=None)),
            Op(0, end, process, "ok", "ack", mops,
               meta=dataclasses.replace(meta, placements=place, invoke_time=start))]


def _last_acked(ops: list[Op], outcome: str) -> Iterator[tuple[_Delivery, Op]]:
    """Each record's last delivery, with its ok ack op, where that ack's outcome is
    ``outcome`` (the record delivered no more after it)."""
    ds = _deliveries(ops)
    acked = _acked(ops)
    last = {(d.key, d.offset): d for d in ds}
    for d in ds:
        got, ack = acked.get((d.poll.process, d.key, d.offset), ("", None))
        if got == outcome and ack is not None and last[(d.key, d.offset)] is d:
            yield d, ack


def share_delivery_count(ops: list[Op], prefix: str) -> Injected:
    """A redelivery after an ok RELEASE reports the released delivery's count again (the
    rule's own example), as a partition leader that lost its count would."""
    ds = _deliveries(ops)
    acked = _acked(ops)
    for i, a in enumerate(ds):
        outcome, ack = acked.get((a.poll.process, a.key, a.offset), ("", None))
        if outcome != "release" or ack is None:
            continue
        later = [b for b in ds[i + 1:] if (b.key, b.offset) == (a.key, a.offset)
                 and b.start > a.poll.time]
        if not later or later[0].count <= a.count:
            continue
        b = later[0]
        recs = [(o, v, a.count if o == b.offset else c) for o, v, c in b.poll.share_reads()[b.key]]
        value = [("share-read", k, recs if k == b.key else m[2]) for m in b.poll.value
                 for k in (m[1],)]
        out = list(ops)
        out[b.pos] = dataclasses.replace(b.poll, value=value)
        what = (f"key {b.key} offset {b.offset}: released (ok) after its delivery with count "
                f"{a.count}, then redelivered with count {a.count} (really {b.count})")
        return renamed(out, prefix), what
    return _repeat_released_count(ops, prefix)


def _repeat_released_count(ops: list[Op], prefix: str) -> Injected:
    """The delivery-count finding where the history redelivered no released record (the
    consumer that released it may hold it, prefetched, past the run's end): an invented
    consumer is delivered it after the release with the released delivery's count, and
    accepts it. A history that released nothing (a short healthy run may not) has an accepted
    record's ACCEPT made a RELEASE first."""
    end = max(o.time for o in ops)
    for outcome in ("release", "accept"):
        for d, ack in _last_acked(ops, outcome):
            # (the poll begins beyond the skew after the release: else it may overlap the
            # delivery's lock, a concurrent delivery)
            at = ack.time + 2 * SKEW_NS
            if d.count >= 5 or at + SKEW_NS > end:
                continue
            base = ops if outcome == "release" else _released_instead(ops, ack, d)
            p = _new_process(base)
            added = (_share_pair(d, p, at, at + MS, d.count)
                     + _ack_pair(d, p, at + 2 * MS, at + 3 * MS, "accept"))
            how = "released (ok)" if outcome == "release" else "accepted (ok, made a release)"
            what = (f"key {d.key} offset {d.offset}: {how} by process {d.poll.process} after "
                    f"its delivery with count {d.count}; process {p} (invented) delivered it "
                    f"again with count {d.count} and accepted it")
            return renamed(_with_ops(base, added), prefix), what
    raise ValueError("no released or accepted record (ok) to redeliver with the same count")


def _released_instead(ops: list[Op], ack: Op, d: _Delivery) -> list[Op]:
    """``ops`` with ``ack`` (an ok ack by ``d``'s consumer) and its invoke acknowledging
    ``d``'s record with RELEASE instead of what they said."""
    done = next(i for i, op in enumerate(ops) if op is ack)
    begun = next(i for i in range(done - 1, -1, -1) if ops[i].process == ack.process
                 and ops[i].type == "invoke" and ops[i].f == "ack")
    out = list(ops)
    for i in (begun, done):
        out[i] = dataclasses.replace(ops[i], value=[
            (m[0], m[1], m[2], "release") if (m[1], m[2]) == (d.key, d.offset) else m
            for m in ops[i].value])
    return out


def share_redelivered(ops: list[Op], prefix: str) -> Injected:
    """A record rejected (ok) is delivered again, to a poll invoked seconds after the ack."""
    for d, ack in _last_acked(ops, "reject"):
        polls = [(i, op) for i, op in enumerate(ops) if op.type == "ok" and op.f == "share-poll"
                 and _invoked_at(op) > ack.time + 3 * SKEW_NS
                 and any(m[1] == d.key for m in op.value)]
        if not polls or d.count >= 5:
            continue
        i, poll = polls[0]
        rec = (d.offset, d.value, d.count + 1)
        value = [("share-read", m[1], sorted([*(m[2] or ()), rec]) if m[1] == d.key else m[2])
                 for m in poll.value]
        out = list(ops)
        out[i] = dataclasses.replace(poll, value=value)
        what = (f"key {d.key} offset {d.offset}: rejected (ok) by process {d.poll.process}, "
                f"delivered again to process {poll.process} "
                f"{(_invoked_at(poll) - ack.time) / 1e9:.1f} s later")
        return renamed(out, prefix), what
    raise ValueError("no rejected record followed by a poll of its key to deliver it to")


def share_double_accept(ops: list[Op], prefix: str) -> Injected:
    """A record accepted (ok) is delivered to a second consumer while the first consumer's
    ACCEPT is in flight, and accepted again (ok): two ACCEPTs of one record both succeed."""
    for d, ack in _last_acked(ops, "accept"):
        start = _invoked_at(ack)
        if d.count >= 5 or ack.time - start < 2 * MS:
            continue
        p = _new_process(ops)
        added = (_share_pair(d, p, start + MS, ack.time + MS, d.count + 1)
                 + _ack_pair(d, p, ack.time + 2 * MS, ack.time + 3 * MS, "accept"))
        what = (f"key {d.key} offset {d.offset}: accepted (ok) by process {d.poll.process}; "
                f"process {p} (invented) delivered it with count {d.count + 1} during that "
                "ack and accepted it too (ok)")
        return renamed(_with_ops(ops, added), prefix), what
    raise ValueError("no accepted record whose ack took long enough to slip a delivery into")


def share_concurrent_delivery(ops: list[Op], prefix: str, lock_ns: int = 3_000_000_000,
                              ) -> Injected:
    """A record is delivered to a second consumer during the first one's poll, under the same
    lock, before either acknowledged it (``lock_ns``: the group's lock, the matrix's 3 s)."""
    ds = _deliveries(ops)
    acked = _acked(ops)
    starts: dict[tuple[Any, int], list[int]] = {}
    for d in ds:
        starts.setdefault((d.key, d.offset), []).append(d.start)
    for d in ds:
        end = d.poll.time
        if d.count >= 5 or end - d.start < 3 * MS or end - d.start + 2 * SKEW_NS > lock_ns:
            continue
        _, ack = acked.get((d.poll.process, d.key, d.offset), ("", None))
        if ack is not None and _invoked_at(ack) <= end:  # acknowledged within the poll's time
            continue
        # The invented delivery is never acknowledged: another delivery of the record within
        # its lock would be a second concurrent pair (CI's run once had the record released
        # and delivered again a second later).
        if any(t != d.start and abs(t - d.start) < lock_ns + 2 * SKEW_NS
               for t in starts[(d.key, d.offset)]):
            continue
        p = _new_process(ops)
        added = _share_pair(d, p, d.start + MS, end - MS, d.count)
        what = (f"key {d.key} offset {d.offset}: delivered to process {d.poll.process} and, "
                f"within the same poll's time and lock, to process {p} (invented), count "
                f"{d.count} both")
        return renamed(_with_ops(ops, added), prefix), what
    raise ValueError("no share poll short enough to put a second delivery within its lock")


INJECTORS.update({
    "share-delivery-count": share_delivery_count,
    "share-redelivered": share_redelivered,
    "share-double-accept": share_double_accept,
    "share-concurrent-delivery": share_concurrent_delivery,
})
