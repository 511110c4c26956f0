"""Committed offsets: a consumer group's committed offset of a partition is data, and is checked.

A group's committed offset of one key (topic-partition) is a register. Writes are offset
commits: a ``commit`` op's ``("commit", key, off)`` mops, and the offsets a ``txn`` op sent with
``send_offsets_to_transaction``, which take effect if the transaction commits. Reads are where
a consumer starts a partition it was assigned (``Start`` in the op's meta): the committed
offset the probe looked up (source ``committed``), none found (``reset``), or, when the client
library positioned the partition itself (``client``), the offset of the first record it read.

The rule is a register's: a read returns the value of a write that may be the latest one when
the read happens. A write ``w`` can no longer be read once another acknowledged write ``w2``
of a different offset began after ``w`` ended and ended before the read began: ``w2``
certainly replaced it (Jepsen's real-time order; commits of one group race freely, since assign
mode consumers share a group without generations, so nothing more is assumed). A commit whose
outcome is unknown (``info``, or invoked and never completed: its process was killed) may take
effect until ``INDOUBT_NS`` after its invocation (a coordinator applies a commit when the request
arrives; librdkafka's request timeouts are well under that). The group's state before the
history began is unknown: any offset may be read until an acknowledged commit certainly
replaced it. A failed commit changed nothing (the coordinator rejected it).

Anomalies (the probe's group and key, the offset read, the offsets the group may hold):

- ``offset-commit-lost``: the lookup found no committed offset, though an acknowledged commit
  certainly happened before it (the consumer restarts at ``auto.offset.reset``: it re-reads the
  partition or skips it all);
- ``offset-commit-reread``: the start is below every offset the group may hold (the consumer
  re-reads records it committed as consumed); for a ``client`` start, the first record read
  is below every such offset;
- ``offset-commit-skip``: a looked-up offset above every offset the group may hold (the consumer
  skips records nobody consumed). Not judged for ``client`` starts: their first read may lie
  past the committed offset legitimately (a transaction marker, aborted records).

Example: process 1 commits 120 (ok, ends at t=5); process 2's assign at t=9 looks up 80 (no
commit of 80 could follow the one of 120): ``offset-commit-reread`` with offset 80, expected
[120]. Had process 3 committed 80 between t=4 and t=10 (racing), 80 would be fine.

Reads wait for their verdict until every write they may have seen is known: ``SETTLE_NS``
after they ended (a transaction's offsets are known only from its completion), or the grace
period online if longer (events of other processes may still arrive). Offline the history's
own times play the watermark.
"""

from __future__ import annotations

import sys
from typing import Any, Final

from kmon.checker.anomaly import OFFSET_COMMIT_LOST, OFFSET_COMMIT_REREAD, OFFSET_COMMIT_SKIP
from kmon.checker.sink import Sink
from kmon.history.model import START_CLIENT, START_COMMITTED, START_RESET

INDOUBT_NS: Final = 120 * 1_000_000_000
NEVER: Final = 1 << 62  # (the state's INF; an end that is not known)
NONE: Final = -1  # a read of no committed offset (offsets are >= 0)
# How long after a start ended the writes it may have read are all known: a transaction's
# offsets appear only in its completion (its invoke cannot know them), and the transaction may
# have committed, visibly, up to its last call's timeout before that (the probe bounds each
# call by ``op_timeout``, 10 s by default).
SETTLE_NS: Final = 30 * 1_000_000_000
# How long a write stays after an acknowledged one replaced it: a start (an assign's lookup)
# may have begun that long before it ended (the probe bounds its ops by ``op_timeout``).
KEPT_NS: Final = 60 * 1_000_000_000
# At most this many writes per group and key whatever the times say (consumers commit after
# every poll: a few a second per key).
MAX_WRITES: Final = 1024

# Write statuses
OK: Final = 1
INDOUBT: Final = 2  # info, or invoked and not completed (yet)


class OffsetWrite:
    """One offset commit of a group to a key: the offset, who, when, and how it ended."""

    __slots__ = ("end", "offset", "op", "process", "start", "status")

    def __init__(self, offset: int, process: Any, op: int, start: int, end: int,
                 status: int) -> None:
        self.offset = offset
        self.process = process
        self.op = op
        self.start = start
        self.end = end  # NEVER while in flight; for an in-doubt commit, ``latest_effect``
        self.status = status

    def latest_effect(self) -> int:
        """The latest time this commit may have taken effect."""
        return self.end if self.status == OK else self.start + INDOUBT_NS

    def row(self) -> tuple:
        return (self.offset, self.process, self.op, self.start, self.end, self.status)


class StartRead:
    """Where an assigned consumer started a key: a read of the group's committed offset, judged
    once every write it may have seen is known (``due``)."""

    __slots__ = ("due", "end", "offset", "op", "process", "source", "start")

    def __init__(self, offset: int, source: str, process: Any, op: int, start: int, end: int,
                 due: int) -> None:
        self.offset = offset  # NONE: no committed offset found
        self.source = source
        self.process = process
        self.op = op
        self.start = start
        self.end = end
        self.due = due

    def row(self) -> tuple:
        return (self.offset, self.source, self.process, self.op, self.start, self.end, self.due)


class GroupOffsets:
    """One group's committed offset of one key: its writes, the reads awaiting a verdict, and
    the processes whose client-positioned start awaits its first read."""

    __slots__ = ("awaiting", "kept", "reads", "writes")

    def __init__(self) -> None:
        self.kept = 0  # writes left by the last ``_forget``: the next runs at half again as many
        self.writes: list[OffsetWrite] = []
        self.reads: list[StartRead] = []
        self.awaiting: dict[Any, StartRead] = {}  # process -> its assignment, offset unknown

    def nbytes(self) -> int:
        """Approximate retained bytes (``KeyState.nbytes``)."""
        records = [*self.writes, *self.reads, *self.awaiting.values()]
        return (sys.getsizeof(self) + sys.getsizeof(self.writes) + sys.getsizeof(self.reads)
                + sys.getsizeof(self.awaiting) + sum(sys.getsizeof(r) for r in records))

    def rows(self) -> tuple:
        return ([w.row() for w in self.writes], [r.row() for r in self.reads],
                {p: r.row() for p, r in self.awaiting.items()})


def group_of(rows: tuple) -> GroupOffsets:
    """The inverse of ``GroupOffsets.rows`` (the saved state)."""
    g = GroupOffsets()
    writes, reads, awaiting = rows
    g.writes = [OffsetWrite(*r) for r in writes]
    g.reads = [StartRead(*r) for r in reads]
    g.awaiting = {p: StartRead(*r) for p, r in awaiting.items()}
    return g


# -- folding fragments ------------------------------------------------------------------------


def committed(groups: dict[str, GroupOffsets], group: str, offsets: list[int], process: Any,
              op: int, ty: str, start: int, end: int) -> None:
    """A commit's ``offsets`` of one key: invoked (``ty`` "invoke") or completed."""
    g = _group(groups, group)
    for off in offsets:
        w = _in_flight(g, process, off)
        if w is None:
            if ty == "fail":
                continue
            w = OffsetWrite(off, process, op, start, NEVER, INDOUBT)
            g.writes.append(w)
        if ty == "ok":
            w.status, w.end, w.op = OK, end, op
        elif ty == "info":
            w.end, w.op = w.latest_effect(), op
        elif ty == "fail":
            g.writes.remove(w)
    if len(g.writes) > MAX_WRITES:
        _forget(g, _horizon(g, end - KEPT_NS))


def _in_flight(g: GroupOffsets, process: Any, offset: int) -> OffsetWrite | None:
    for w in reversed(g.writes):  # (the newest: a process has one op in flight)
        if w.process == process and w.end == NEVER and w.offset == offset:
            return w
    return None


def started(groups: dict[str, GroupOffsets], group: str, offset: int | None, source: str,
            process: Any, op: int, start: int, end: int, grace: int | None) -> None:
    """An assignment started the key at ``offset`` for ``source`` reasons (``model.Start``)."""
    g = _group(groups, group)
    g.awaiting.pop(process, None)
    if source in (START_COMMITTED, START_RESET):
        read = NONE if source == START_RESET or offset is None else offset
        _add_read(g, StartRead(read, source, process, op, start, end, NEVER), grace)
    elif source == START_CLIENT:
        g.awaiting[process] = StartRead(NONE, source, process, op, start, end, NEVER)


def first_read(groups: dict[str, GroupOffsets], process: Any, offset: int, end: int,
               grace: int | None) -> None:
    """``process`` read ``offset`` first since a client-positioned start: where it started."""
    for g in groups.values():
        r = g.awaiting.pop(process, None)
        if r is not None:
            r.offset, r.end = offset, end
            _add_read(g, r, grace)


def _add_read(g: GroupOffsets, r: StartRead, grace: int | None) -> None:
    """A read, judged once the writes it may have seen are known: a transaction's offsets are
    known only from its completion, which may come ``SETTLE_NS`` after a read saw them
    (and online, events come up to the grace period late)."""
    r.due = r.end + max(SETTLE_NS, grace or 0)
    g.reads.append(r)


def crashed(groups: dict[str, GroupOffsets], process: Any) -> None:
    for g in groups.values():
        g.awaiting.pop(process, None)


# -- verdicts ---------------------------------------------------------------------------------


def decide(groups: dict[str, GroupOffsets], key: Any, watermark: int, grace: int,
           sink: Sink) -> None:
    """Judge the reads due by ``watermark``; forget writes no read still to come can return
    (reads end at most ``grace`` behind the watermark and last at most ``KEPT_NS``)."""
    for name, g in groups.items():
        if g.reads:
            due = [r for r in g.reads if r.due <= watermark]
            if due:
                g.reads = [r for r in g.reads if r.due > watermark]
                for r in due:
                    _judge(g, name, key, r, sink)
        horizon = watermark - grace - KEPT_NS
        if g.awaiting:  # a start with no read for that long is not judged (a crashed process's)
            g.awaiting = {p: r for p, r in g.awaiting.items() if r.start >= horizon}
        if len(g.writes) >= g.kept + g.kept // 2 + 16:  # (amortized: a scan per half again)
            _forget(g, _horizon(g, horizon))


def next_due(groups: dict[str, GroupOffsets]) -> int:
    due = NEVER
    for g in groups.values():
        for r in g.reads:
            if r.due < due:
                due = r.due
    return due


class Replacers:
    """The two latest-starting acknowledged writes of distinct offsets among some writes: enough
    to tell whether any of them began after a given write could last take effect."""

    __slots__ = ("offset", "other_start", "start")

    def __init__(self, writes: list[OffsetWrite]) -> None:
        self.start, self.offset, self.other_start = -NEVER, NONE, -NEVER
        for w in writes:
            if w.start > self.start:
                if w.offset != self.offset:
                    self.other_start = self.start
                self.start, self.offset = w.start, w.offset
            elif w.offset != self.offset and w.start > self.other_start:
                self.other_start = w.start

    def replace(self, w: OffsetWrite) -> bool:
        effect = w.latest_effect()
        return (self.offset != w.offset and self.start > effect) or self.other_start > effect


def may_hold(g: GroupOffsets, r: StartRead) -> tuple[list[int], OffsetWrite | None]:
    """What ``r`` may read: the offsets of the writes that may be current when it happens, and
    the latest acknowledged write that certainly ended before it (None: none did, so the
    group's state before the history may still be current and anything goes)."""
    before = _acked_before(g, r.start)
    if not before:
        return [], None
    latest = before[0]
    for w in before:
        if w.end > latest.end:
            latest = w
    replacers = Replacers(before)
    offsets = sorted({w.offset for w in g.writes if w.start < r.end and not replacers.replace(w)})
    return offsets, latest


def _judge(g: GroupOffsets, group: str, key: Any, r: StartRead, sink: Sink) -> None:
    offsets, latest = may_hold(g, r)
    if latest is None or r.offset in offsets:
        return
    if r.source == START_CLIENT:
        if not offsets or r.offset >= offsets[0]:
            return  # started at or past an offset the group may hold: not judged (see above)
        kind = OFFSET_COMMIT_REREAD
    elif r.offset == NONE:
        kind = OFFSET_COMMIT_LOST
    elif offsets and r.offset > offsets[-1]:
        kind = OFFSET_COMMIT_SKIP
    elif offsets and r.offset < offsets[0]:
        kind = OFFSET_COMMIT_REREAD
    else:
        kind = OFFSET_COMMIT_REREAD if r.offset < latest.offset else OFFSET_COMMIT_SKIP
    sink.anomaly(kind, {"key": key, "group": group,
                        "offset": None if r.offset == NONE else r.offset,
                        "expected": offsets, "writer": latest.op, "reader": r.op,
                        "process": r.process, "source": r.source})


def _forget(g: GroupOffsets, horizon: int) -> None:
    """Drop the writes no read starting at ``horizon`` or later can return: replaced by an
    acknowledged write that ended before it. Past ``MAX_WRITES`` even so, the oldest go (a read
    that old would be judged against fewer writes)."""
    done = _acked_before(g, horizon)
    if len(done) > 1:
        replacers = Replacers(done)
        g.writes = [w for w in g.writes if not replacers.replace(w)]
    if len(g.writes) > MAX_WRITES:
        g.writes.sort(key=_start_of)
        del g.writes[:len(g.writes) - MAX_WRITES]
    g.kept = len(g.writes)


def _acked_before(g: GroupOffsets, t: int) -> list[OffsetWrite]:
    """The acknowledged writes that ended before ``t``: those that may replace others for a
    read beginning at ``t``."""
    return [w for w in g.writes if w.status == OK and w.end < t]


def _horizon(g: GroupOffsets, t: int) -> int:
    """``t``, or the start of a read still awaiting its verdict if earlier."""
    for r in g.reads:
        if r.start < t:
            t = r.start
    return t


def _start_of(w: OffsetWrite) -> int:
    return w.start


def _group(groups: dict[str, GroupOffsets], group: str) -> GroupOffsets:
    g = groups.get(group)
    if g is None:
        g = groups[group] = GroupOffsets()
    return g
