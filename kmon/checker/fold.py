"""The per-key fold: apply one fragment to a key's state, let time pass, finish.

``apply`` runs the detectors in a fixed order (the op's sends, then its reads) so an op that
reads its own write sees that write's writer. ``advance`` takes the event-time watermark: it
emits verdicts whose grace period is over and compacts what nothing can refer to any more.
``finish`` is the end of an offline history: every pending verdict is decided.

The fold is the same online and offline; only the grace period differs (offline: none, decide at
the end). Fragments of one process must arrive in that process's op order; fragments of
different processes may interleave arbitrarily.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from kmon.checker import (
    aborted_read,
    lost_write,
    offsets,
    poll_skip,
    realtime_lag,
    send_order,
    share,
    unseen,
)
from kmon.checker.flags import (
    MULTI,
    OCCUPIED,
    READ,
    READ_OK,
    SENT,
    UNSEEN_DONE,
    VER,
    W_ANY,
    W_FAIL,
    W_INFO,
    W_OK,
)
from kmon.checker.records import ProcPos
from kmon.checker.sink import Sink
from kmon.checker.state import CHUNK, CHUNK_BITS, INF, KeyState
from kmon.checker.values import EMPTY, is_direct
from kmon.checker.version_order import place_read, place_send
from kmon.history.fragment import Fragment


@dataclass(frozen=True, slots=True)
class FoldConfig:
    # How long to wait for late evidence before an absence verdict, and how long state must
    # outlive the events that touched it. None: offline, wait for the end of the history.
    grace_ns: int | None = None
    # After how long an acknowledged, unread value gets an ``unseen`` verdict (online only).
    unseen_grace_ns: int | None = None
    collect_lags: bool = True
    # False: every send and read through version_order's general path, not the common cases
    # inlined below (tests/checker/test_fold_inline.py proves both leave the same state).
    inline: bool = True
    share_settings: share.ShareSettings = share.DEFAULT_SETTINGS  # share groups: lock, limit


def apply(st: KeyState, fr: Fragment, cfg: FoldConfig, sink: Sink) -> None:
    ty = fr.type
    group = fr.group
    if fr.f == "share-poll" or fr.f == "ack":
        if group is not None:
            _apply_share(st, fr, group, cfg, sink)
        return
    if group is not None and fr.commits is not None:  # (an invoke too: in flight from now)
        offsets.committed(st.groups, group, fr.commits, fr.process, fr.op, ty, fr.invoke_time,
                          fr.time)
    if ty == "invoke":
        # Nothing to learn yet: a read that beats this op's completion waits for it
        # (KeyState.pending_reads), which the completion then settles.
        return
    p, t = fr.process, fr.time
    pp = st.procs.get(p)
    if pp is None:
        pp = st.procs[p] = ProcPos()
    pp.time = t
    if t > st.max_time:
        st.max_time = t
    if fr.assigned or fr.rebalanced:
        pp.poll_off = None  # the consumer restarts from a committed offset: no order to check
    deadline = INF if cfg.grace_ns is None else t + cfg.grace_ns
    if fr.sends:
        _apply_sends(st, pp, fr, deadline, cfg.grace_ns is None, cfg.inline, sink)
    if fr.reads is not None:
        _apply_reads(st, pp, fr, deadline, cfg.inline, sink)
        if fr.reads and st.groups:
            offsets.first_read(st.groups, p, fr.reads[0][0], t, cfg.grace_ns)
    start = fr.start
    if start is not None and group is not None:  # (after the reads, which may precede it)
        offsets.started(st.groups, group, start.offset, start.source, p, fr.op, fr.invoke_time,
                        t, cfg.grace_ns)
    if group is not None and cfg.grace_ns is None:  # offline: the history's time as watermark
        offsets.decide(st.groups, st.key, t, 0, sink)
    if cfg.collect_lags and ty == "ok" and (fr.f == "poll" or fr.f == "txn"):
        if pp.lag_pos >= st.last_revealed:  # caught up with everything known to exist
            sink.lags.append((fr.invoke_time, p, st.key, 0))
        else:
            realtime_lag.sample(st, pp.lag_pos, fr.invoke_time, p, sink)


def _apply_share(st: KeyState, fr: Fragment, group: str, cfg: FoldConfig, sink: Sink) -> None:
    """A share group's op (``share``); its deliveries are reads of the key's log too: they
    place values at offsets (``version_order``) and may read aborted writes (``G1a``), but
    share consumers skip by design (no order checks) and have their own loss rule."""
    ty = fr.type
    if fr.f == "ack":
        if fr.acks:
            share.acked(st.shares, group, fr.process, fr.op, ty, fr.invoke_time, fr.time,
                        fr.acks)
        return
    share.polled(st.shares, group, fr.process, fr.op, ty, fr.invoke_time, fr.time, fr.shares,
                 fr.leader)
    if ty == "invoke" or not fr.shares:
        return
    if fr.time > st.max_time:
        st.max_time = fr.time
    deadline = INF if cfg.grace_ns is None else fr.time + cfg.grace_ns
    for off, v, _ in fr.shares:
        c = st.code(v)
        place_read(st, off, c, fr, sink)
        aborted_read.judge_read(st, c, off, fr.op, fr.process, fr.time, deadline, ty == "ok",
                                sink)


# Ints in [_DIRECT_MIN, _DIRECT_MAX] are their own code (values.encode, inline). Both bounds
# fit mypyc's unboxed ints: a bound of 1 << 62 made every comparison a call on a boxed int.
_DIRECT_MIN: Final = -(1 << 62)
_DIRECT_MAX: Final = (1 << 62) - 1


def _apply_sends(
    st: KeyState, pp: ProcPos, fr: Fragment, deadline: int, offline: bool, inline: bool,
    sink: Sink,
) -> None:
    ty = fr.type
    # The writer's outcome flag (anything but ok or fail is info; the inverse is
    # state.FLAG_OUTCOME), by comparisons: a dict lookup costs more than the rest of a common
    # send's bookkeeping.
    outcome = W_OK if ty == "ok" else W_FAIL if ty == "fail" else W_INFO
    wflags = outcome | (MULTI if fr.n_writes > 1 else 0)
    fresh = wflags | SENT | VER  # an acknowledged value in an untouched slot
    ok = wflags & W_OK
    t, op = fr.time, fr.op
    u = 0  # t in atime units, computed when first needed (the first fixes a compact clock)
    placed = []
    for v, off in fr.sends or []:  # (a list either way: compiled, a loop without an iterator)
        c: int = v if type(v) is int and _DIRECT_MIN <= v <= _DIRECT_MAX else st.code(v)
        if off is not None and ok and inline:
            i = off - st.base
            if i >= len(st.flg) and st.base >= 0 and t > 0:
                st.slot(off)  # grow the window here, as place_send would, and stay on this path
            val, flg, ctime = st.val, st.flg, st.ctime  # vectors are replaced when they grow
            # (an emptiness test first: ``c in d`` boxes c, and both are usually empty)
            if (0 <= i < len(flg) and not flg[i] and (not st.loose or c not in st.loose)
                    and (not st.pending_reads or c not in st.pending_reads)
                    and (ticket := st.probe(c)) < 0):
                # The common case, inline: first news of this value, at an untouched offset.
                val[i] = c
                flg[i] = fresh
                st.set_writer(i, op)
                if t > 0:  # (time 0 reveals nothing: place_send's rule)
                    if not u:
                        u = st.units(t)
                    a = st.ack(i)
                    if not a or u < a:
                        st.reveal_units(i, u)
                st.index_at(ticket, off, c)
                ch = i >> CHUNK_BITS
                if t > ctime[ch]:
                    ctime[ch] = t
                placed.append((off, v))
                lost_write.sent_below_reads(st, i, deadline)
                continue
        i = place_send(st, off, c, wflags, fr, sink)
        aborted_read.writer_known(st, c, t, sink)
        if off is not None:
            placed.append((off, v))
            if i >= 0:
                lost_write.sent_below_reads(st, i, deadline)
            lost_write.loose_sent_below_reads(st, c, off, bool(ok), deadline)
        if ok and i >= 0 and st.flg[i] & READ:
            sink.e2e.append((st.key, 0))  # a poll saw it before the ack arrived
    if ty == "ok":
        if len(placed) > 1:
            send_order.within_op(st, placed, op, fr.process, sink)
        if placed:
            send_order.between_ops(st, pp, placed, op, fr.process, offline, sink)
            if fr.f == "txn" and placed[-1][0] > pp.lag_pos:
                pp.lag_pos = _highest(placed)  # a txn's own sends count (Jepsen)
    elif ty == "info":
        # The send may not have happened: the next send compares with it only once its value
        # is in the version order (send_order.between_ops).
        pp.send_off, pp.send_val = placed[-1] if placed else (None, None)
        pp.send_op = op


def _highest(placed: list[tuple[int, Any]]) -> int:
    """The highest offset in ``placed`` (``max`` over a generator: an interpreted-speed call)."""
    top = placed[0][0]
    for o, _ in placed:
        if o > top:
            top = o
    return top


# Reads of these writers' values may be G1a or atomicity facts.
_NEEDS_JUDGING: Final = W_FAIL | MULTI


def _apply_reads(
    st: KeyState, pp: ProcPos, fr: Fragment, deadline: int, inline: bool, sink: Sink
) -> None:
    reads = fr.reads
    if not reads:
        return
    ty = fr.type
    ok = ty == "ok"
    rb = READ if ty == "fail" else READ | READ_OK  # (version_order.read_bits)
    seen = VER | rb  # what a read marks on its slot
    # ok and info completions reveal the offsets they read (0: a failed op reveals nothing)
    u = st.units(fr.time) if ty != "fail" else 0
    own = {v for v, _ in fr.sends} if fr.sends else None  # raw values: no encoding needed
    own_read: list[Any] | None = None  # (made when needed: most polls have no sends)
    internal = not fr.rebalanced
    t, op, process = fr.time, fr.op, fr.process
    val, flg, ctime = st.val, st.flg, st.ctime
    e2e, key = sink.e2e, st.key
    # The previous read, once there is one (``started``): an int offset, not an optional one,
    # which compiled code would box per read.
    started = False
    prev_off = -1
    prev_v: Any = None
    hi = -1
    for off, v in reads:
        c: int = v if type(v) is int and _DIRECT_MIN <= v <= _DIRECT_MAX else st.code(v)
        i = off - st.base
        # int(...): a join of the vector's i16 and the literal's int would be a boxed object
        f = int(flg[i]) if inline and 0 <= i < len(flg) and val[i] == c else 0
        if (f & OCCUPIED and f & W_ANY and not f & _NEEDS_JUDGING
                and (not st.twins or st.find(c) == off)):
            # The common case: read where its send put it, by a known, unfailed writer. (A
            # value at two slots is judged by its home's writer: aborted_read.judge_read_at.)
            if not f & READ:
                a = st.ack(i)
                if a:
                    a = st.clock.ns(a)
                    e2e.append((key, t - a if t > a else 0))
            if f & seen != seen:  # (a conflicting read may have set rb without VER)
                flg[i] = f | seen
            a = st.ack(i)
            if u and (not a or u < a):
                st.reveal_units(i, u)
            ch = i >> CHUNK_BITS
            if t > ctime[ch]:
                ctime[ch] = t
        elif f & OCCUPIED and f & W_ANY and not f & W_FAIL:
            # Read where its send put it, by a known, unfailed multi-write op: an atomicity fact.
            _read_placed(st, i, f, t, u, rb, sink)
            aborted_read.judge_read_at(st, i, c, off, op, process, t, deadline, ok, sink)
        else:
            place_read(st, off, c, fr, sink)
            val, flg, ctime = st.val, st.flg, st.ctime  # vectors are replaced when they grow
            aborted_read.judge_read(st, c, off, op, process, t, deadline, ok, sink)
        if own is not None and v in own:
            if own_read is None:
                own_read = []
            own_read.append(v)
        if started and off != prev_off + 1 and internal:
            poll_skip.within_op(st, prev_off, prev_v, off, v, op, process, sink)
        started = True
        prev_off, prev_v = off, v
        if off > hi:
            hi = off
    if own_read:
        aborted_read.precommitted(st, op, own_read, sink)
    lost_write.reads_reached(st, hi, op, ok, deadline)
    # Every completion is compared with the last ok poll; only ok ones move the position (the
    # client rewinds after an abort, and an unknown outcome leaves the position unknown).
    first_off, first_v = reads[0]
    last = pp.poll_off
    if last is not None and first_off != last + 1 and not fr.rebalanced:
        poll_skip.between_ops(st, last, pp.poll_val, pp.poll_op, first_off, first_v,
                              op, process, sink)
    if ok:
        # After a rebalance of the key the consumer may restart anywhere (the rebalance may
        # have come after these reads): no position to compare the next poll with.
        pp.poll_off = None if fr.rebalanced else prev_off
        pp.poll_val, pp.poll_op = prev_v, op
        if hi > pp.lag_pos:
            pp.lag_pos = hi


def _read_placed(st: KeyState, i: int, f: int, t: int, u: int, rb: int, sink: Sink) -> None:
    """``place_read`` for a read that found its value in slot ``i`` (flags ``f``)."""
    ch = i >> CHUNK_BITS
    if t > st.ctime[ch]:
        st.ctime[ch] = t
    if not f & READ:
        revealed = st.revealed_ns(i)
        if revealed > 0:
            sink.e2e.append((st.key, t - revealed if t > revealed else 0))
    st.flg[i] = f | VER | rb
    a = st.ack(i)
    if u and (not a or u < a):
        st.reveal_units(i, u)


def advance(st: KeyState, watermark: int, cfg: FoldConfig, sink: Sink) -> None:
    """Event time has reached ``watermark``: emit due verdicts, then forget what is settled."""
    lost_write.decide(st, watermark, sink)
    if st.pending_reads:  # readers whose writer never showed up: nothing can be concluded
        for code in list(st.pending_reads):
            waiting = [w for w in st.pending_reads[code] if w.deadline > watermark]
            if waiting:
                st.pending_reads[code] = waiting
            else:
                del st.pending_reads[code]
    if cfg.unseen_grace_ns is not None:
        unseen.decide(st, watermark, cfg.unseen_grace_ns, sink)
    if st.groups and cfg.grace_ns is not None:
        offsets.decide(st.groups, st.key, watermark, cfg.grace_ns, sink)
    if st.shares and cfg.grace_ns is not None:
        share.decide(st.shares, st, watermark, cfg.grace_ns, cfg.share_settings, sink)
    if cfg.grace_ns is not None:
        horizon = watermark - cfg.grace_ns
        patience = cfg.unseen_grace_ns
        _compact(st, horizon, None if patience is None else horizon - UNREAD_KEPT * patience)


def finish(st: KeyState, sink: Sink, cfg: FoldConfig | None = None, end: int = INF) -> None:
    """End of an offline history: nothing more will arrive, decide every candidate. ``end``,
    the history's last time, is the share groups' watermark: a lock still running at the end
    may yet expire and redeliver (``share``)."""
    lost_write.decide(st, INF, sink)
    if st.groups:
        offsets.decide(st.groups, st.key, INF, 0, sink)
    if st.shares:
        share.decide(st.shares, st, end, 0, (cfg or FoldConfig()).share_settings, sink)


# (The two scans below compare typed ints: ``min`` of an int and a list item is a generic
# builtin call, with the int boxed, once per pending verdict.)
def _pinned_offset(st: KeyState) -> int:
    """Lowest offset a pending verdict still refers to."""
    low = INF
    for off in st.cand_offset:
        if off < low:
            low = off
    for waiting in st.pending_reads.values():
        for w in waiting:
            if w.offset < low:
                low = w.offset
    return low


def next_deadline(st: KeyState, cfg: FoldConfig | None = None) -> int:
    """When ``advance`` next has something to decide for this key (INF: nothing pending);
    share groups' verdicts only given ``cfg`` (an online one: their grace period)."""
    due = INF
    for t in st.cand_due:
        if t < due:
            due = t
    for waiting in st.pending_reads.values():
        for w in waiting:
            if w.deadline < due:
                due = w.deadline
    if st.groups:
        groups_due = offsets.next_due(st.groups)
        if groups_due < due:
            due = groups_due
    if st.shares and cfg is not None and cfg.grace_ns is not None:
        shares_due = share.next_due(st.shares, cfg.grace_ns, cfg.share_settings)
        if shares_due < due:
            due = shares_due
    return due


# How long an acknowledged value nobody read is kept after its ``unseen`` verdict, in unseen
# grace periods: readers that pass it later (a lagging consumer, records deleted under it)
# make it a ``lost-write``, which needs it still known (a lossy chaos run's monitor reported
# 565 of `kmon check`'s 761 lost writes: the rest were compacted after their unseen
# verdicts). Past this, a dead reader costs nothing more.
UNREAD_KEPT: Final = 10


def _chunk_settled(st: KeyState, c: int, unread_horizon: int | None) -> bool:
    old = unread_horizon is not None and st.ctime[c] <= unread_horizon
    for i in range(c << CHUNK_BITS, (c + 1) << CHUNK_BITS):
        if st.acked_unread(i) and not (old and st.marked(i, UNSEEN_DONE)):
            return False  # an acknowledged value nobody consumed: keep it until it is judged
    return True


def _compact(st: KeyState, horizon: int, unread_horizon: int | None) -> None:
    """Drop the window's settled chunks older than ``horizon``; values acknowledged and never
    read only once judged unseen and older than ``unread_horizon`` (None: never)."""
    full = len(st.val) >> CHUNK_BITS
    pinned = _pinned_offset(st)
    drop = 0
    while (
        drop < full
        and st.ctime[drop] <= horizon
        and st.base + ((drop + 1) << CHUNK_BITS) <= pinned
        and _chunk_settled(st, drop, unread_horizon)
    ):
        drop += 1
    _forget_idle(st, horizon, unread_horizon)
    if not drop:
        return
    n = drop * CHUNK
    st.unseen_decided += sum(1 for i in range(n) if st.acked_unread(i))
    st.drop_front(n)
    st.compacted = True
    # Rebuilt now, the index sheds the dropped values and fits the window as it is: left to
    # fill with tombstones, it kept the size of the window's peak (2-4 cells per value, where
    # a fresh one has 2). One pass over the window per dropped chunk of 256 offsets.
    st.rebuild_index()
    if st.vals:
        live = {c for c in st.val if c != EMPTY and not is_direct(c)} | set(st.loose)
        st.vals = {c: v for c, v in st.vals.items() if c in live}


def _forget_idle(st: KeyState, horizon: int, unread_horizon: int | None) -> None:
    """Drop positions of processes idle on this key, and loose records, past the horizon."""
    for p in [p for p, pp in st.procs.items() if pp.time <= horizon]:
        del st.procs[p]
    for c in [c for c, rec in st.loose.items() if rec.time <= horizon]:
        rec = st.loose[c]
        if rec.acked() and not rec.consumed():
            if (not rec.marked(UNSEEN_DONE) or unread_horizon is None
                    or rec.time > unread_horizon):
                continue  # acknowledged, unread, not yet judged unseen or not long ago: keep
            st.unseen_decided += 1
        del st.loose[c]
