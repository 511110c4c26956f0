"""Share groups (KIP-932, "Queues for Kafka"): what a share group promises about each record.

A share group's consumers poll records of a key (topic-partition) together: the broker hands
each record to one consumer at a time under an acquisition lock (``lock``, the group's
``share.record.lock.duration.ms``, 30 s by default), with a delivery count (1 on the first
acquisition, one more on each later one). The consumer acknowledges it ACCEPT (done), RELEASE
(deliver again) or REJECT (unprocessable); an unacknowledged record's lock expires and it is
available again. A record released or expired at the delivery limit (``share.delivery.count
.limit``, 5 by default) is archived, as are accepted and rejected ones: never delivered again.

The history: ``share-poll`` ops (per key, the records delivered with their delivery counts),
``ack`` ops (per record, the outcome; the op's type is the outcome of the ``commit_sync`` that
sent them), and the key's sends. Times are the probe's; ``skew`` is the margin allowed between
its clocks and the broker's. A delivery's acquisition happened between its poll's invocation
and completion (``start``, ``end``): the probe's client acquires records only while polling.

Anomalies, per group and key (record: ``key, group, offset, value`` and the ops involved):

- ``share-lost``: an acknowledged write (send ok) at offset ``o`` that no consumer of the group
  was ever delivered, though the group was delivered records below ``o`` (its start offset was
  at or below ``o``) and above it, a lock duration and ``skew`` before the verdict (``o`` was
  acquired by then, and any invisible acquisition had expired), and no poll of the group whose
  records are unknown (``info``, ``fail``, or never completed) could have acquired it (such
  acquisitions may have archived it unseen). Example: deliveries of 4 and 6, never of 5 (sent
  ok): lost once 6 is ``lock + skew`` old.
- ``share-double-accept``: two deliveries of one record both acknowledged ACCEPT, ok. Example:
  p1 accepts offset 5 (ok); its lock had expired and p2, redelivered 5, accepts it too (ok).
- ``share-redelivered``: a record delivered to a poll invoked more than ``skew`` after an ok
  ACCEPT or REJECT of an earlier delivery completed. Example: p1 rejects 5 (ok, ends t=3); p2's
  poll invoked at t=5 gets 5.
- ``share-concurrent-delivery``: two deliveries of one record certainly within one lock: both
  polls ended more than ``skew`` before the lock of the earlier-invoked one could expire (its
  invocation plus ``lock``), neither delivery was acknowledged (by an ack not failed) before
  the later poll ended, and the two polls' placements do not name different leaders for the
  key (a new share-partition leader knows nothing of the first lock). Example: p1's poll
  (t=0..1) and p2's (t=2..3) both get 5; no ack.
- ``share-delivery-count``: a delivery count outside [1, ``limit``], or a delivery whose poll was
  invoked after another's ended with a count no higher, unless the history shows a failover in
  between: the first delivery was not acknowledged ok before the later poll ended, and the
  key's leader differs between the two polls' placements or the first delivery's ack, invoked
  while its lock certainly held, did not succeed (``info``, ``fail`` or never completed).
  Example: 5 delivered with count 2, released (ok), then delivered with count 2 again. Gaps
  (1, then 3) are allowed: an acquisition nobody saw (a consumer killed with records in its
  buffer) counts too.

What is allowed: redelivery after a RELEASE, a failed or in-doubt ack, or an expired lock; a
record never delivered when the group's start offset was above it (``share.auto.offset.reset``
is ``latest`` by default); a delivery count that skips; a count no higher than an earlier one
across a share-partition leader change, and a second delivery within the first's lock (a new
leader reloads the state last written to the share coordinator, and an acquisition is not
written: docs/share-groups.md quotes Kafka's ``SharePartition``).

Verdicts wait for the events they depend on: a record is judged once ``grace`` (online) passed
since the last event that touched it (again if more come; each pair is reported once), and a
lost write once its deadline is ``grace`` behind the watermark. Offline the history's last time
plays the watermark. Records are forgotten once judged, settled (accepted, rejected or at the
limit) and older than ``KEPT_NS``; at most ``MAX_RECORDS`` per group and key even so.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Final

from kmon.checker.anomaly import (
    SHARE_CONCURRENT_DELIVERY,
    SHARE_DELIVERY_COUNT,
    SHARE_DOUBLE_ACCEPT,
    SHARE_LOST,
    SHARE_REDELIVERED,
)
from kmon.checker.sink import Sink
from kmon.history.model import ACCEPT, REJECT

if TYPE_CHECKING:  # (state.py imports this module)
    from kmon.checker.state import KeyState

NEVER: Final = 1 << 62
# How long a settled record and a blind poll are kept after their last event, past the grace.
KEPT_NS: Final = 60 * 1_000_000_000
MAX_RECORDS: Final = 4096  # per group and key: records in flight at once (4096 > 2000 locks)
MAX_DELIVERIES: Final = 16  # per record: a broker past its limit is reported, not remembered
MAX_BLIND: Final = 64  # unknown polls per group and key: older ones are forgotten
MAX_PASSES: Final = 4096
MAX_GAPS: Final = 16  # late lower deliveries a group's key keeps judging below (ShareLog.gaps)
# Settled records forgotten online keep their settling and highest-count deliveries, so a
# later redelivery is still judged; at most this many per group and key (the lowest go).
MAX_SETTLED: Final = 4096

# Ack statuses of a delivery
NO_ACK: Final = 0
ACK_PENDING: Final = 1  # invoked, not completed (yet)
ACK_OK: Final = 2
ACK_INFO: Final = 3
ACK_FAIL: Final = 4
_STATUS: Final = {"invoke": ACK_PENDING, "ok": ACK_OK, "info": ACK_INFO, "fail": ACK_FAIL}


class ShareSettings:
    """The share group's settings the rules depend on (``CheckConfig`` carries them)."""

    __slots__ = ("limit", "lock_ns", "skew_ns")

    def __init__(self, lock_ns: int = 30_000_000_000, limit: int = 5,
                 skew_ns: int = 1_000_000_000) -> None:
        self.lock_ns = lock_ns  # share.record.lock.duration.ms
        self.limit = limit  # share.delivery.count.limit
        self.skew_ns = skew_ns  # clock skew allowed between probes and brokers

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ShareSettings) and self.row() == other.row()

    def __hash__(self) -> int:
        return hash(self.row())

    def row(self) -> tuple[int, int, int]:
        return (self.lock_ns, self.limit, self.skew_ns)


DEFAULT_SETTINGS: Final = ShareSettings()


class Delivery:
    """One delivery of a record to a consumer: its poll, its count, the key's leader as the
    poll's placement named it, and its acknowledgement."""

    __slots__ = ("ack_end", "ack_op", "ack_start", "ack_status", "count", "end", "leader", "op",
                 "outcome", "process", "start")

    def __init__(self, process: Any, op: int, start: int, end: int, count: int,
                 leader: int = -1) -> None:
        self.process = process
        self.op = op
        self.start = start  # the poll's invocation: the acquisition is no earlier
        self.end = end  # its completion: the acquisition is no later
        self.count = count
        self.leader = leader  # the broker leading the key, per the probe's metadata (-1: unknown)
        self.outcome = ""  # the ack's outcome ("" none)
        self.ack_status = NO_ACK
        self.ack_op = -1
        self.ack_start = NEVER
        self.ack_end = NEVER

    def settled(self) -> bool:
        """Acknowledged ACCEPT or REJECT, ok: the record is archived."""
        return self.ack_status == ACK_OK and self.outcome in (ACCEPT, REJECT)

    def released_before(self, t: int) -> bool:
        """An ack of this delivery (any outcome, not failed) was invoked before ``t``."""
        return self.ack_status != NO_ACK and self.ack_status != ACK_FAIL and self.ack_start < t

    def ack_lost_before(self, t: int, cfg: ShareSettings) -> bool:
        """An ack of this delivery was invoked before ``t``, certainly while its lock held, and
        did not succeed (failed, in doubt, or not completed): a healthy share-partition leader
        takes such an acknowledgement, so the broker-side state it was sent to may be gone."""
        return (self.ack_status != NO_ACK and self.ack_status != ACK_OK and self.ack_start < t
                and self.ack_start + cfg.skew_ns < self.start + cfg.lock_ns)

    def row(self) -> tuple:
        return (self.process, self.op, self.start, self.end, self.count, self.outcome,
                self.ack_status, self.ack_op, self.ack_start, self.ack_end, self.leader)


def delivery_of(row: tuple) -> Delivery:
    d = Delivery(row[0], row[1], row[2], row[3], row[4])
    d.outcome, d.ack_status, d.ack_op, d.ack_start, d.ack_end = row[5:10]
    if len(row) > 10:  # (states saved before the leader was kept have none)
        d.leader = row[10]
    return d


class ShareRecord:
    """What the group did with the record at one offset: its deliveries, in arrival order."""

    __slots__ = ("deliveries", "dropped", "judged", "reported", "time", "value")

    def __init__(self, value: Any) -> None:
        self.value = value
        self.deliveries: list[Delivery] = []
        self.dropped = 0  # deliveries past MAX_DELIVERIES
        self.time = 0  # the latest event that touched it
        self.judged = -1  # ``time`` when it was last judged (-1: never)
        self.reported: set[tuple[str, int, int]] = set()  # (anomaly, op, op) already emitted

    def due(self, grace: int) -> int:
        """When its evidence is all in, if it has any not judged yet (else NEVER)."""
        return NEVER if self.judged == self.time else self.time + grace

    def row(self) -> tuple:
        return (self.value, [d.row() for d in self.deliveries], self.dropped, self.time,
                self.judged, sorted(self.reported))


def record_of(row: tuple) -> ShareRecord:
    r = ShareRecord(row[0])
    r.deliveries = [delivery_of(d) for d in row[1]]
    r.dropped, r.time, r.judged, r.reported = row[2], row[3], row[4], {tuple(x) for x in row[5]}
    return r


class ShareLog:
    """One share group's view of one key: its records, how far its deliveries went, the polls
    whose records are unknown, and how far lost writes have been judged."""

    __slots__ = ("blind", "first_end", "gaps", "inflight", "judged", "low", "passes", "records",
                 "settled")

    def __init__(self) -> None:
        self.records: dict[int, ShareRecord] = {}
        self.settled: dict[int, ShareRecord] = {}  # forgotten records, pruned (MAX_SETTLED)
        self.low = -1  # the lowest offset ever delivered (-1: none yet)
        self.judged = -1  # every offset up to this one has had its share-lost verdict
        # (offset, time): the highest offset a poll was delivered, when it ended
        self.passes: list[tuple[int, int]] = []
        self.inflight: dict[Any, int] = {}  # process -> invocation of its share poll
        self.blind: list[tuple[int, int]] = []  # (start, end) of polls with unknown records
        self.first_end = NEVER  # when the group's first poll that was delivered anything ended
        # (lo, hi, passed): offsets strictly between lo and hi, below the lowest delivery when
        # those above them were judged, until a later delivery of lo; passed by ``passed``
        self.gaps: list[tuple[int, int, int]] = []

    def nbytes(self) -> int:
        recs = sum(sys.getsizeof(r) + sum(sys.getsizeof(d) for d in r.deliveries)
                   for r in self.records.values())
        recs += sum(sys.getsizeof(r) + sum(sys.getsizeof(d) for d in r.deliveries)
                    for r in self.settled.values())
        return (sys.getsizeof(self) + sys.getsizeof(self.records) + recs
                + sys.getsizeof(self.settled) + sys.getsizeof(self.passes)
                + sys.getsizeof(self.blind) + sys.getsizeof(self.gaps))

    def rows(self) -> tuple:
        return ({o: r.row() for o, r in self.records.items()}, self.low, self.judged,
                list(self.passes), dict(self.inflight), list(self.blind),
                {o: r.row() for o, r in self.settled.items()}, self.first_end, list(self.gaps))


def log_of(rows: tuple) -> ShareLog:
    """The inverse of ``ShareLog.rows`` (the saved state)."""
    g = ShareLog()
    records, g.low, g.judged, passes, g.inflight, blind, settled = rows[:7]
    if len(rows) > 7:  # (saved before gaps were kept: none)
        g.first_end, g.gaps = rows[7], [tuple(x) for x in rows[8]]
    g.records = {o: record_of(r) for o, r in records.items()}
    g.settled = {o: record_of(r) for o, r in settled.items()}
    g.passes = [tuple(p) for p in passes]
    g.blind = [tuple(b) for b in blind]
    return g


# -- folding fragments ------------------------------------------------------------------------


def _log(logs: dict[str, ShareLog], group: str) -> ShareLog:
    g = logs.get(group)
    if g is None:
        g = logs[group] = ShareLog()
    return g


def polled(logs: dict[str, ShareLog], group: str, process: Any, op: int, ty: str, start: int,
           end: int, shares: list[tuple[int, Any, int]] | None, leader: int = -1) -> None:
    """A share poll of the key: invoked (``ty`` "invoke"), or completed with ``shares``;
    ``leader``: the key's leader as the poll's placement named it (-1: unknown)."""
    g = _log(logs, group)
    if ty == "invoke":
        g.inflight[process] = start
        return
    g.inflight.pop(process, None)
    if ty != "ok":  # its records are not all known: it may have acquired any
        g.blind.append((start, end))
        if len(g.blind) > MAX_BLIND:
            del g.blind[0]
    if not shares:
        return
    top = -1
    for off, value, count in shares:
        _delivered(g, off, value, Delivery(process, op, start, end, count, leader))
        if off > top:
            top = off
    g.passes.append((top, end))
    if end < g.first_end:
        g.first_end = end
    if len(g.passes) > MAX_PASSES:
        del g.passes[0]


def _delivered(g: ShareLog, off: int, value: Any, d: Delivery) -> None:
    rec = g.records.get(off)
    if rec is None:
        rec = g.settled.pop(off, None) or ShareRecord(value)  # delivered after it settled?
        g.records[off] = rec
        if len(g.records) > MAX_RECORDS:
            _drop_lowest(g)
    if len(rec.deliveries) < MAX_DELIVERIES:
        rec.deliveries.append(d)
    else:
        rec.dropped += 1
    if d.end > rec.time:
        rec.time = d.end
    if g.low < 0:
        g.low = g.judged = off  # no write below the group's first delivery is judged
    elif off < g.low:
        if g.judged == g.low:  # (a late lower delivery, nothing judged above the old low yet)
            g.judged = off
        elif off + 1 < g.low and len(g.gaps) < MAX_GAPS:
            # offsets above it were judged while the old low was the lowest delivery: those
            # between are judged apart, passed when the group's first poll ended (every poll
            # so far was delivered the old low or above)
            g.gaps.append((off, g.low, g.first_end))
        g.low = off


def acked(logs: dict[str, ShareLog], group: str, process: Any, op: int, ty: str, start: int,
          end: int, acks: list[tuple[int, str]]) -> None:
    """An ack op of the key: invoked or completed; each ack names the process's delivery."""
    g = _log(logs, group)
    status = _STATUS[ty]
    for off, outcome in acks:
        rec = g.records.get(off)
        if rec is None:
            continue  # forgotten (or never seen: its poll's events were dead letters)
        d = _held(rec, process)
        if d is None:
            continue
        d.outcome, d.ack_status, d.ack_op = outcome, status, op
        d.ack_start = min(d.ack_start, start)
        d.ack_end = end if status in (ACK_OK, ACK_FAIL) else NEVER
        t = end if ty != "invoke" else start
        if t > rec.time:
            rec.time = t


def _held(rec: ShareRecord, process: Any) -> Delivery | None:
    """The process's latest delivery of the record (a consumer acknowledges what it holds)."""
    for d in reversed(rec.deliveries):
        if d.process == process:
            return d
    return None


# -- verdicts ---------------------------------------------------------------------------------


def decide(logs: dict[str, ShareLog], st: KeyState, watermark: int, grace: int,
           cfg: ShareSettings, sink: Sink) -> None:
    """Judge the records and lost writes whose evidence is all in by ``watermark`` (events
    arrive at most ``grace`` late); forget what is settled."""
    for name, g in logs.items():
        for off, rec in g.records.items():
            if rec.due(grace) <= watermark:
                judge_record(rec, st.key, name, off, cfg, sink)
                rec.judged = rec.time
        _judge_lost(g, st, name, watermark - grace, cfg, sink)
        _forget(g, watermark - grace - KEPT_NS, cfg)
        # blind polls as long as a lost write still to judge may ask about them: its pass is
        # at most a grace late, its excuse window reaches _archive_ns before it
        old = watermark - 2 * grace - cfg.lock_ns - cfg.skew_ns - _archive_ns(cfg)
        g.blind = [b for b in g.blind if b[1] >= old]


def next_due(logs: dict[str, ShareLog], grace: int, cfg: ShareSettings) -> int:
    """The earliest watermark at which ``decide`` has something to judge."""
    due = NEVER
    for g in logs.values():
        for rec in g.records.values():
            if rec.due(grace) < due:
                due = rec.due(grace)
        for _, t in g.passes:
            if t + cfg.lock_ns + cfg.skew_ns + grace < due:
                due = t + cfg.lock_ns + cfg.skew_ns + grace
        for _, _, t in g.gaps:
            if t + cfg.lock_ns + cfg.skew_ns + grace < due:
                due = t + cfg.lock_ns + cfg.skew_ns + grace
    return due


def judge_record(rec: ShareRecord, key: Any, group: str, off: int, cfg: ShareSettings,
                 sink: Sink) -> None:
    """Every rule over the record's deliveries, each finding reported once."""
    ds = sorted(rec.deliveries, key=_by_start)
    for d in ds:
        if d.count < 1 or d.count > cfg.limit:
            _report(rec, sink, SHARE_DELIVERY_COUNT, key, group, off, d, None,
                    {"count": d.count, "limit": cfg.limit})
    for i, a in enumerate(ds):
        for b in ds[i + 1:]:
            _judge_pair(rec, key, group, off, a, b, cfg, sink)


def _judge_pair(rec: ShareRecord, key: Any, group: str, off: int, a: Delivery, b: Delivery,
                cfg: ShareSettings, sink: Sink) -> None:
    """Deliveries ``a`` and ``b`` of one record, ``a`` invoked first."""
    skew = cfg.skew_ns
    if a.settled() and a.ack_end + skew < b.start:
        _report(rec, sink, SHARE_REDELIVERED, key, group, off, a, b, {"outcome": a.outcome})
    if (a.ack_status == ACK_OK and b.ack_status == ACK_OK and a.outcome == ACCEPT
            and b.outcome == ACCEPT):
        _report(rec, sink, SHARE_DOUBLE_ACCEPT, key, group, off, a, b, {})
    later = max(a.end, b.end)
    if (later + skew < a.start + cfg.lock_ns and not a.released_before(later)
            and not b.released_before(later) and not _leader_changed(a, b)):
        _report(rec, sink, SHARE_CONCURRENT_DELIVERY, key, group, off, a, b,
                {"lock-ms": cfg.lock_ns // 1_000_000})
    if a.end < b.start and b.count <= a.count and not _failover_between(a, b, cfg):
        _report(rec, sink, SHARE_DELIVERY_COUNT, key, group, off, a, b,
                {"counts": [a.count, b.count]})


def _failover_between(a: Delivery, b: Delivery, cfg: ShareSettings) -> bool:
    """The history shows that ``a``'s count may have been lost with its share-partition leader
    before ``b``: ``a`` was not acknowledged ok before ``b``'s poll ended, and the key's leader
    differs between the two polls' placements or ``a``'s ack, sent while its lock held, did
    not succeed. A new share-partition leader reloads the counts last written to the share
    coordinator; an acquisition is not written, an ok acknowledgement is (its response waits
    for the write), so only an unacknowledged count can be lost (docs/share-groups.md)."""
    if a.ack_status == ACK_OK and a.ack_start < b.end:
        return False
    return _leader_changed(a, b) or a.ack_lost_before(b.end, cfg)


def _leader_changed(a: Delivery, b: Delivery) -> bool:
    """The key's leader differs between the placements of ``a``'s and ``b``'s polls: a new
    share-partition leader, which knows nothing of ``a``'s acquisition (not written), its
    lock or its count."""
    return a.leader >= 0 and b.leader >= 0 and a.leader != b.leader


def _report(rec: ShareRecord, sink: Sink, kind: str, key: Any, group: str, off: int,
            a: Delivery, b: Delivery | None, extra: dict[str, Any]) -> None:
    tag = (kind, a.op, -1 if b is None else b.op)
    if tag in rec.reported:
        return
    rec.reported.add(tag)
    ops = [a.op] if b is None else [a.op, b.op]
    procs = [a.process] if b is None else [a.process, b.process]
    sink.anomaly(kind, {"key": key, "group": group, "offset": off, "value": rec.value,
                        "ops": ops, "processes": procs, **extra})


def _by_start(d: Delivery) -> tuple[int, int]:
    return (d.start, d.op)


# -- lost writes ------------------------------------------------------------------------------


def _judge_lost(g: ShareLog, st: KeyState, group: str, now: int, cfg: ShareSettings,
                sink: Sink) -> None:
    """Judge offsets above ``g.judged`` in order while the first delivery past each is old
    enough (``now``: the watermark less the grace period)."""
    if g.gaps:
        _judge_gaps(g, st, group, now, cfg, sink)
    if g.low < 0 or not g.passes:
        return
    wait = cfg.lock_ns + cfg.skew_ns
    passes = sorted(g.passes)
    # suffix minima: the earliest time a poll was delivered an offset at or above passes[i]
    first = [0] * len(passes)
    t = NEVER
    for i in range(len(passes) - 1, -1, -1):
        t = min(t, passes[i][1])
        first[i] = t
    j = 0
    off = g.judged + 1
    while True:
        while j < len(passes) and passes[j][0] <= off:
            j += 1  # the first pass strictly above ``off``
        if j == len(passes) or first[j] + wait > now:
            break
        if off > g.low and off not in g.records:
            _lost_at(g, st, group, off, first[j], cfg, sink)
        g.judged = off
        off += 1
    g.passes = [p for p in g.passes if p[0] > g.judged]


def _judge_gaps(g: ShareLog, st: KeyState, group: str, now: int, cfg: ShareSettings,
                sink: Sink) -> None:
    """Judge the offsets of each gap (``ShareLog.gaps``) once it was passed long enough, as
    ``_judge_lost`` judges the others: without them, how batches fall would decide whether a
    write below a late lower delivery is judged."""
    left = []
    for lo, hi, passed in g.gaps:
        if passed + cfg.lock_ns + cfg.skew_ns > now:
            left.append((lo, hi, passed))
            continue
        for off in range(max(lo + 1, st.base), hi):
            if off not in g.records and off not in g.settled:
                _lost_at(g, st, group, off, passed, cfg, sink)
    g.gaps = left


def _in_gap(g: ShareLog, off: int) -> bool:
    return any(lo < off < hi for lo, hi, _ in g.gaps)


def _lost_at(g: ShareLog, st: KeyState, group: str, off: int, passed: int, cfg: ShareSettings,
             sink: Sink) -> None:
    """Offset ``off``, never delivered, was passed at ``passed``: lost if an acknowledged write
    is there and no poll with unknown records could have acquired it."""
    if not st.in_window(off):
        return  # compacted, or never written (a transaction marker, aborted records)
    i = off - st.base
    if not (st.occupied(i) and st.acked(i)):
        return
    written = st.revealed_ns(i)
    if _blind_between(g, max(written - cfg.skew_ns, passed - _archive_ns(cfg)), passed):
        return
    sink.anomaly(SHARE_LOST, {"key": st.key, "group": group, "offset": off,
                              "value": st.value(st.val[i]), "writer": st.writer(i),
                              "passed-at": passed})


def _archive_ns(cfg: ShareSettings) -> int:
    """How long before a record was passed invisible acquisitions may have archived it: as
    many locks as the delivery limit (after each, it is available, and acquired lowest offset
    first, so a later visible delivery above it would have been of it)."""
    return cfg.limit * (cfg.lock_ns + cfg.skew_ns)


def _blind_between(g: ShareLog, lo: int, hi: int) -> bool:
    """A poll whose records are unknown overlapped [lo, hi]; one never completed (its process
    killed, or still in flight) acquired nothing after ``KEPT_NS``."""
    if any(start <= hi and start + KEPT_NS >= lo for start in g.inflight.values()):
        return True
    return any(start <= hi and end >= lo for start, end in g.blind)


# -- forgetting -------------------------------------------------------------------------------


def _forget(g: ShareLog, horizon: int, cfg: ShareSettings) -> None:
    """Drop records already judged for loss, settled and idle since ``horizon``; polls in
    flight that long (of killed processes) become blind ones."""
    done = [o for o, r in g.records.items()
            if o <= g.judged and r.time <= horizon and _settled(r, cfg)
            and not (g.gaps and _in_gap(g, o))]
    for o in done:
        g.settled[o] = _pruned(g.records.pop(o), cfg)
    while len(g.settled) > MAX_SETTLED:
        del g.settled[min(g.settled)]
    for p in [p for p, t in g.inflight.items() if t <= horizon - KEPT_NS]:
        t = g.inflight.pop(p)  # killed mid-poll: it may have acquired anything while it lasted
        g.blind.append((t, t + KEPT_NS))


def _pruned(r: ShareRecord, cfg: ShareSettings) -> ShareRecord:
    """What a later delivery of a settled record is judged against: the delivery that settled
    it and the highest-count one (their findings stay reported); the rest is long past any
    lock."""
    keep = [d for d in r.deliveries if d.settled()][:1]
    top = max(r.deliveries, key=_count_of)
    if top not in keep:
        keep.append(top)
    ops = {d.op for d in keep}
    r.deliveries = keep
    r.reported = {t for t in r.reported if t[1] in ops and (t[2] in ops or t[2] == -1)}
    return r


def _count_of(d: Delivery) -> int:
    return d.count


def _settled(r: ShareRecord, cfg: ShareSettings) -> bool:
    """Nothing more may happen to the record: accepted or rejected, or delivered ``limit``
    times (released or expired, it is archived)."""
    return any(d.settled() or d.count >= cfg.limit for d in r.deliveries)


def _drop_lowest(g: ShareLog) -> None:
    """Past MAX_RECORDS: the lowest offset goes, and counts as judged for loss."""
    low = min(g.records)
    del g.records[low]
    if g.judged < low:
        g.judged = low
