"""Splitting an op into per-key fragments: what one op did to one key.

A function of the op model alone, so it lives beside it: the checker (``kmon.checker``) folds
fragments, and the monitor's op-event reader (``events``) makes them, without the history
codecs importing the checker. Compiled (``kmon/_build.py``: ``ALSO_COMPILED``).

The per-key fold only ever sees fragments, so the same code runs offline (one process feeding
every key) and online (Spark grouping fragments by key). A fragment carries just what the key's
checks need: the op's identity and outcome, its sends and reads of this key in op order, whether
an assign/subscribe or a rebalance touched the key, and how many values the whole op wrote (ops
writing two or more values are checked for atomicity by the transaction stage). Offset commits
and assignment starts come with the consumer group they belong to (``kmon.checker.offsets``),
share polls' deliveries and acknowledgements with their share group (``kmon.checker.share``).
"""

from __future__ import annotations

from typing import Any, Final

from kmon.history.model import Op, Start


class Fragment:
    __slots__ = (
        "acks",
        "assigned",
        "commits",
        "f",
        "group",
        "invoke_time",
        "key",
        "leader",
        "n_writes",
        "op",
        "process",
        "reads",
        "rebalanced",
        "sends",
        "shares",
        "start",
        "time",
        "type",
    )

    def __init__(
        self,
        key: Any,
        op: int,
        process: Any,
        type: str,
        f: str,
        time: int,
        invoke_time: int,
        sends: list[tuple[Any, int | None]] | None = None,
        reads: list[tuple[int, Any]] | None = None,
        assigned: bool = False,
        rebalanced: bool = False,
        n_writes: int = 0,
        group: str | None = None,
        commits: list[int] | None = None,
        start: Start | None = None,
        shares: list[tuple[int, Any, int]] | None = None,
        acks: list[tuple[int, str]] | None = None,
    ) -> None:
        self.key = key
        self.op = op
        self.process = process
        self.type = type
        self.f = f
        self.time = time
        self.invoke_time = invoke_time
        # [(value, offset | None), ...] sent to this key, in op order
        self.sends = sends
        # [(offset, value), ...] read from this key, in op order; [] when the op polled and the
        # key was tracked but nothing came back; None when the op did not poll this key.
        self.reads = reads
        self.assigned = assigned
        self.rebalanced = rebalanced
        self.n_writes = n_writes
        self.group = group  # the consumer group of ``commits`` and ``start``
        self.commits = commits  # offsets the op committed for this key (usually one)
        self.start = start  # where the op's assignment started this key
        # A share poll's records of this key: [(offset, value, delivery count), ...]; None when
        # not known (an invocation, or a completion that is not ok and returned nothing)
        self.shares = shares
        self.acks = acks  # an ack op's [(offset, outcome), ...] of this key
        # A share poll's: the broker leading this key as the op's placement names it (-1: not
        # known), so a share-partition leader change between two deliveries shows
        self.leader = -1

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return (
            f"Fragment(key={self.key!r}, op={self.op}, p={self.process!r}, {self.type} {self.f},"
            f" sends={self.sends}, reads={self.reads}, assigned={self.assigned},"
            f" rebalanced={self.rebalanced}, n_writes={self.n_writes}, group={self.group!r},"
            f" commits={self.commits}, start={self.start}, shares={self.shares},"
            f" acks={self.acks}, leader={self.leader})"
        )


# A fragment as a plain tuple, its key aside (``to_row``/``from_row``): how the monitor moves a
# key's fragments from the step that reads events to the key's fold, in one pickled value.
# The next three (group, commits, start) only when the fragment has a group; the last three
# (shares, acks, leader) only for a share group's ops (rows without the leader still load).
FragmentRow = tuple


def to_row(fr: Fragment) -> FragmentRow:
    if fr.group is None:
        return (fr.op, fr.process, fr.type, fr.f, fr.time, fr.invoke_time, fr.sends, fr.reads,
                fr.assigned, fr.rebalanced, fr.n_writes)
    start = None if fr.start is None else (fr.start.offset, fr.start.source)
    row = (fr.op, fr.process, fr.type, fr.f, fr.time, fr.invoke_time, fr.sends, fr.reads,
           fr.assigned, fr.rebalanced, fr.n_writes, fr.group, fr.commits, start)
    if fr.f == "share-poll" or fr.f == "ack":
        return (*row, fr.shares, fr.acks, fr.leader)
    return row


def from_row(key: Any, r: FragmentRow) -> Fragment:
    fr = Fragment(key, r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10])
    if len(r) > 11:
        fr.group, fr.commits = r[11], r[12]
        fr.start = None if r[13] is None else Start(r[13][0], r[13][1])
    if len(r) > 14:
        fr.shares, fr.acks = r[14], r[15]
    if len(r) > 16:
        fr.leader = r[16]
    return fr


_MOP_FS: Final = frozenset(("send", "poll", "txn"))
_SHARE_FS: Final = frozenset(("share-poll", "ack"))


def split(op: Op, invoke_time: int | None = None) -> list[Fragment]:
    """Fragments of ``op``, one per key it touched.

    Read lists are shared with the op, not copied: fragments are read-only.
    """
    it = op.time if invoke_time is None else invoke_time
    meta = op.meta
    if meta is not None and meta.group is not None:
        frags = split_fields(op.index, op.process, op.type, op.f, op.time, op.value,
                             op.rebalance_log, it, meta.group, meta.starts)
        if op.f == "share-poll" and meta.placements:
            note_leaders(frags, {k: pl.leader for k, pl in meta.placements.items()})
        return frags
    return split_fields(op.index, op.process, op.type, op.f, op.time, op.value, op.rebalance_log,
                        it)


def note_leaders(frags: list[Fragment], leaders: dict[Any, int | None]) -> None:
    """A share poll's fragments: each key's leader, as the op's placements name it (None: the
    probe's metadata had none). ``kmon.checker.share`` takes a change of leader between two
    deliveries of a record as a share-partition leader change."""
    for fr in frags:
        leader = leaders.get(fr.key)
        if leader is not None:
            fr.leader = leader


def split_invoke(idx: int, proc: Any, f: str, t: int, value: Any,
                 group: str | None) -> list[Fragment]:
    """An invocation's fragments: none (a read that beats its writer waits for it), but for an
    offset commit's, which may take effect from its invocation on (``kmon.checker.offsets``),
    and a share group's ops: a share poll may acquire records, an acknowledgement release them,
    from their invocation on (``kmon.checker.share``)."""
    if (f != "commit" and f not in _SHARE_FS) or group is None or not value:
        return []
    return split_fields(idx, proc, "invoke", f, t, value, (), t, group)


def split_fields(
    idx: int, proc: Any, ty: str, f: str, t: int, value: Any, rebalance_log: Any, it: int,
    group: str | None = None, starts: dict[Any, Start] | None = None,
) -> list[Fragment]:
    """``split`` for a caller that has already read the op's fields (each read of an
    interpreted object's attribute costs more than the rest of the common case). ``group``
    and ``starts``: the op's meta (an invoke is split only when it commits offsets)."""
    # (f in _MOP_FS as string comparisons: cheaper than a set lookup on the common path)
    if ((f == "send" or f == "poll" or f == "txn") and type(value) is list and len(value) == 1
            and not (rebalance_log and ty != "invoke") and not starts):
        frags = _one_mop(value[0], idx, proc, ty, f, t, it)
        if frags is not None:
            return frags
    by_key: dict[Any, Fragment] = {}
    if f == "commit":
        if value and group is not None:
            _add_commits(by_key, value, idx, proc, ty, f, t, it, group)
    elif f in _SHARE_FS:
        if value and group is not None:
            _add_share_mops(by_key, value, idx, proc, ty, f, t, it, group)
    elif f in _MOP_FS and value:
        n_writes = 0
        # Typed as a list of tuples (copies only for other sequences, which index alike), so
        # compiled code walks and indexes them directly.
        for m in value if type(value) is list else list(value):
            n_writes += _add_mop(by_key, m if type(m) is tuple else tuple(m), idx, proc, ty, f,
                                 t, it)
        if n_writes:
            for written in by_key.values():
                written.n_writes = n_writes
    elif f in ("assign", "subscribe") and (ty == "ok" or ty == "info") and value:
        # (a failed assign changed nothing: positions stay, as in Jepsen)
        for k in value:
            fr = by_key.get(k)
            if fr is None:
                fr = by_key[k] = Fragment(k, idx, proc, ty, f, t, it)
            fr.assigned = True
    if rebalance_log and ty != "invoke":
        for r in rebalance_log:
            for k in r.keys:
                fr = by_key.get(k)
                if fr is None:
                    fr = by_key[k] = Fragment(k, idx, proc, ty, f, t, it)
                fr.rebalanced = True
    if starts and group is not None and ty != "invoke":
        for k, start in starts.items():
            fr = by_key.get(k)
            if fr is None:
                fr = by_key[k] = Fragment(k, idx, proc, ty, f, t, it)
            fr.group, fr.start = group, start
    if f == "txn" and group is not None and value and ty != "invoke":
        _add_commits(by_key, value, idx, proc, ty, f, t, it, group)
    return list(by_key.values())


def _add_commits(by_key: dict[Any, Fragment], value: Any, idx: int, proc: Any, ty: str, f: str,
                 t: int, it: int, group: str) -> None:
    """The offsets committed per key by a commit op, or sent by a transaction."""
    for m in value:
        if m[0] != "commit":
            continue
        k = m[1]
        fr = by_key.get(k)
        if fr is None:
            fr = by_key[k] = Fragment(k, idx, proc, ty, f, t, it)
        fr.group = group
        if fr.commits is None:
            fr.commits = [m[2]]
        else:
            fr.commits.append(m[2])


def _add_share_mops(by_key: dict[Any, Fragment], value: Any, idx: int, proc: Any, ty: str,
                    f: str, t: int, it: int, group: str) -> None:
    """A share poll's records per key (a key listed with None: it may have acquired some), or
    an ack op's acknowledgements per key."""
    for m in value:
        k = m[1]
        fr = by_key.get(k)
        if fr is None:
            fr = by_key[k] = Fragment(k, idx, proc, ty, f, t, it)
            fr.group = group
        if m[0] == "share-read" and m[2] is not None:
            fr.shares = list(m[2]) if fr.shares is None else [*fr.shares, *m[2]]
        elif m[0] == "ack":
            if fr.acks is None:
                fr.acks = [(m[2], m[3])]
            else:
                fr.acks.append((m[2], m[3]))


def _add_mop(by_key: dict[Any, Fragment], m: tuple, idx: int, proc: Any, ty: str, f: str,
             t: int, it: int) -> int:
    """Add mop ``m`` of a multi-mop op to its keys' fragments; 1 if it was a send, else 0."""
    kind = m[0]
    if kind == "send":
        k = m[1]
        fr = by_key.get(k)
        if fr is None:
            fr = by_key[k] = Fragment(k, idx, proc, ty, f, t, it)
        if fr.sends is None:
            fr.sends = [(m[2], m[3])]
        else:
            fr.sends.append((m[2], m[3]))
        return 1
    if kind == "poll":
        reads = m[1]
        if type(reads) is dict:  # (walked directly by compiled code)
            for k, pairs in reads.items():
                _add_reads(by_key, k, pairs, idx, proc, ty, f, t, it)
        else:
            for k, pairs in (reads or {}).items():
                _add_reads(by_key, k, pairs, idx, proc, ty, f, t, it)
    return 0


def _add_reads(by_key: dict[Any, Fragment], k: Any, pairs: Any, idx: int, proc: Any, ty: str,
               f: str, t: int, it: int) -> None:
    fr = by_key.get(k)
    if fr is None:
        fr = by_key[k] = Fragment(k, idx, proc, ty, f, t, it)
    fr.reads = pairs if fr.reads is None else [*fr.reads, *pairs]


def _one_mop(m: Any, idx: int, proc: Any, ty: str, f: str, t: int, it: int
             ) -> list[Fragment] | None:
    """The common shapes, without the per-key dict: one send, or one poll (None: another
    shape, for ``split_fields``' general loop, which gives the same fragments). The type tests
    let compiled code index the tuple, compare the string and walk the dict directly."""
    if type(m) is not tuple:
        return None
    kind = m[0]
    if type(kind) is not str:
        return None
    if kind == "send":
        return [Fragment(m[1], idx, proc, ty, f, t, it, [(m[2], m[3])], None, False, False, 1)]
    if kind == "poll":
        reads = m[1]
        if type(reads) is dict:
            return [Fragment(k, idx, proc, ty, f, t, it, None, pairs)
                    for k, pairs in reads.items()]
        if not reads:
            return []
    return None
