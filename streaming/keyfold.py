"""Stage 1, per key (topic-partition): the checker's fold over fragment rows, batch by batch.

Pure Python: the Spark processor (``processors.KeyFoldProcessor``) only moves bytes and frames
in and out; everything here is testable without a JVM.

One call per key per micro-batch (``KeyFold.batch``) or per expired timer (``KeyFold.wake``):

1. ``load`` the key's state (the checker's ``KeyState``, its window's cold pages apart:
   ``state_pages``; plus this adapter's
   extras: the key's placement (topic, partition and its latest leader broker, with the op
   index that told it), the timer it has registered, the verdicts it has reported, each live
   consumer's latest realtime lag);
2. apply the batch's fragments in op-index order (a probe's op indices increase, so each
   process's fragments stay in its op order; processes interleave freely, as the fold allows);
3. ``fold.advance`` to the event-time watermark: verdicts whose grace period is over, and
   compaction;
4. emit output rows (anomaly and unseen evidence, per-writer facts for stage 2, one stats row
   for the gauges and the end-to-end histogram), the state bytes, and the next timer: the
   earliest pending deadline, or, while anything is left to settle, one grace period on.

A fragment the fold raises on becomes a ``fold-error`` dead letter (the query never dies on
data); the other fragments of the batch are still folded.
"""

from __future__ import annotations

import bisect
import pickle
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kmon import foldrun
from kmon.checker import fold, lost_write, share, unseen
from kmon.checker.fold import FoldConfig
from kmon.checker.sink import Sink, TxnFact
from kmon.checker.state import INF, KeyState
from kmon.checker.state_format import TABLES
from kmon.history.fragment import Fragment
from kmon.streaming import evidence as ev
from kmon.streaming import state_pages
from kmon.streaming.config import TXN_BUCKETS

# Output row kinds.
ANOMALY = "anomaly"
UNSEEN = "unseen"
FACT = "fact"
STATS = "stats"
DEAD = "dead"

# Output columns (processors.OUTPUT_SCHEMA gives their Spark types). ``broker``: the key's
# leader broker id as its latest placement said (null: unknown). ``settled`` (stats rows, set
# by the processor with the timer): nothing left to judge, so the key's series may be dropped
# once it stays quiet (``metrics.MonitorMetrics.prune``).
OUTPUT_COLUMNS = (
    "kind", "probe", "key", "topic", "part", "broker", "atype", "id", "verdict", "upd",
    "decided", "writer", "body", "unseen", "lag", "e2e", "e2e_sum", "frags", "state_bytes",
    "state_written", "raw", "settled",
)

# Facts records (stage 2's input, ``txnfold``): a transaction's facts go to the bucket of its
# writer (the op index of its send), at most ``FACTS_PER_RECORD`` facts a record: a fact is
# 30-60 bytes of JSON (more with long string values), and Kafka refuses records over 1 MB by
# default.
FACTS_PER_RECORD = 1000
# The facts record's format (``txnfold.parse_facts`` reads it, and the older one: a JSON array
# of one object per fact, each repeating the key's probe, topic, partition, leader and
# watermark, its key and value as JSON text).
FACTS_FORMAT = 2


def bucket_of(writer: int, buckets: int) -> int:
    return writer % buckets


# 5: as 4 without the value index, rebuilt from the window on load (``_INDEX``); 4: the
# checker's state as a body dict, its window's cold pages apart (``state_pages``); 3: as bytes
# (the versions: ``KeyFold.from_parts``).
_STATE_VERSION = 5
# The value index is a hash table over the window's values: about 40% of a head's bytes, read
# and written every call, while rebuilding it takes about 0.2 ms a key (a 5,000-slot window,
# offline), what saving the head does. The checker rebuilds it at every compaction anyway, so
# no verdict depends on its layout.
_INDEX = TABLES.index("index")
_NO_INDEX = ("i", b"")


@dataclass(frozen=True, slots=True)
class Placement:
    """A key's placement as a batch's events gave it: topic, partition, leader broker id
    (None: the events did not say) and the op index of the event that said so (-1: none)."""

    topic: str
    partition: int | None
    leader: int | None = None
    op: int = -1


@dataclass(frozen=True)
class FoldSettings:
    grace_ns: int
    unseen_grace_ns: int | None
    e2e_buckets_ns: tuple[int, ...]  # upper bounds of the end-to-end histogram, ascending
    verdict_memory: int = 1024
    cluster: str = "local"  # the monitor's ``cluster`` setting, stamped on evidence
    # Share groups (``share.lock``, ``share.delivery.limit``, ``share.skew``): plain ints, so
    # that the settings pickle to executors whatever the fold is compiled to.
    share_lock_ns: int = share.DEFAULT_SETTINGS.lock_ns
    share_delivery_limit: int = share.DEFAULT_SETTINGS.limit
    share_skew_ns: int = share.DEFAULT_SETTINGS.skew_ns
    page_slots: int = state_pages.DEFAULT_PAGE_SLOTS  # ``state.page.slots``
    txn_buckets: int = TXN_BUCKETS  # ``txn.buckets``: the facts' writer buckets

    def fold_config(self) -> FoldConfig:
        shares = share.ShareSettings(self.share_lock_ns, self.share_delivery_limit,
                                     self.share_skew_ns)
        return FoldConfig(self.grace_ns, self.unseen_grace_ns, collect_lags=True,
                          share_settings=shares)


class KeyFold:
    """One key's state and the adapter's extras, for one call."""

    __slots__ = ("facts", "lags", "last_ops", "leader", "pages", "partition", "placed",
                 "probe", "settings", "st", "timer_ms", "topic", "verdicts")

    def __init__(self, probe: str, key: Any, settings: FoldSettings) -> None:
        self.settings = settings
        self.probe = probe
        self.st = KeyState(key, compact=True)  # millisecond ack times: ~22 bytes per offset
        self.topic = ev.UNKNOWN_TOPIC
        self.partition: int | None = None
        self.leader: int | None = None  # the latest placement's leader broker
        self.placed = -1  # op index of the latest placement
        self.timer_ms: int | None = None
        self.verdicts = ev.Verdicts(settings.verdict_memory)
        self.lags: dict[Any, tuple[int, int]] = {}  # process -> (invoke time, lag ns)
        self.facts: list[TxnFact] = []  # this call's facts for stage 2 (not state)
        self.last_ops: dict[Any, int] = {}  # process -> op index of its last folded fragment
        self.pages: dict[int, state_pages.Page] = {}  # the cold pages the store holds

    # -- persistence ----------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """The whole state as one value (no pages)."""
        return self.to_parts(0).head

    def to_parts(self, page_slots: int) -> Saved:
        """The state as a head and its cold window pages (``state_pages``; ``page_slots`` 0:
        all in the head), with the page writes that take the store from ``pages`` there."""
        body = self.st.to_body()
        arrays = list(body["arrays"])
        arrays[_INDEX] = _NO_INDEX
        cut = state_pages.split({**body, "arrays": tuple(arrays)}, page_slots)
        pages, writes, patches = state_pages.changes(self.pages, cut.pages, cut.widths)
        if patches:
            cut.head["patches"] = patches
        extra = (_STATE_VERSION, self.topic, self.partition, self.leader, self.placed,
                 self.timer_ms, self.verdicts.to_state(), self.lags, self.last_ops,
                 state_pages.tokens(pages))
        return Saved(pickle.dumps((cut.head, extra), protocol=5), pages, writes)

    @classmethod
    def from_bytes(cls, probe: str, data: bytes, settings: FoldSettings) -> KeyFold:
        """A key's state saved whole (``to_bytes``, or any earlier version)."""
        return cls.from_parts(probe, data, _no_pages, settings)

    @classmethod
    def from_parts(cls, probe: str, head: bytes,
                   read_pages: Callable[[dict[int, int]], dict[int, state_pages.Page]],
                   settings: FoldSettings) -> KeyFold:
        """A key's state from its head (``to_parts``, or a whole state of any earlier version)
        and, only when the head has some, its cold pages: ``read_pages`` is given the tokens
        the head lists (page number -> token) and returns the pages, kept as ``pages`` for
        the next save to write only what changed.

        Versions: 5 leaves the value index out (rebuilt here); 4 keeps the checker's state as
        a body dict, cold pages apart; 3 and earlier as one bytes value; 2 has no last op per
        process; 1 not the leader broker and the op index of the placement either (unknown
        until the key's next placement)."""
        body, extra = pickle.loads(head)
        version = extra[0]
        last_ops: dict[Any, int] = {}
        tokens: dict[int, int] = {}
        if version in (_STATE_VERSION, 4):
            _, topic, partition, leader, placed, timer_ms, verdicts, lags, last_ops, tokens = extra
        elif version == 3:
            _, topic, partition, leader, placed, timer_ms, verdicts, lags, last_ops = extra
        elif version == 2:
            _, topic, partition, leader, placed, timer_ms, verdicts, lags = extra
        elif version == 1:
            _, topic, partition, timer_ms, verdicts, lags = extra
            leader, placed = None, -1
        else:
            raise ValueError(f"unknown key fold state version {version!r}")
        kf = cls(probe, None, settings)
        if isinstance(body, bytes):  # versions 1-3: the checker's own bytes
            kf.st = KeyState.from_bytes(body)
        else:
            kf.pages = read_pages(tokens) if tokens else {}
            data = {p: page.data for p, page in kf.pages.items()}
            kf.st = KeyState.from_body(state_pages.join(body, data))
            if version == _STATE_VERSION:
                kf.st.rebuild_index()
        kf.topic, kf.partition, kf.timer_ms = topic, partition, timer_ms
        kf.leader, kf.placed = leader, placed
        kf.verdicts = ev.Verdicts.from_state(verdicts, settings.verdict_memory)
        kf.lags, kf.last_ops = lags, last_ops
        return kf

    # -- one call -------------------------------------------------------------------------
    def batch(self, frags: list[Fragment], placement: Placement | None,
              watermark_ns: int) -> list[dict[str, Any]]:
        """Fold this batch's fragments (any order), then advance to the watermark.
        ``placement`` replaces the key's unless it comes from an older op (a late event)."""
        if placement is not None and placement.op >= self.placed:
            self.topic, self.partition = placement.topic, placement.partition
            self.leader, self.placed = placement.leader, placement.op
        out: list[dict[str, Any]] = []
        sink = Sink()
        cfg = self.settings.fold_config()
        frags.sort(key=_op_index)
        frags = self._unseen_before(frags)
        ops = _OpsOf(frags)
        e2e: list[int] = []
        errors: list[tuple[Fragment, Exception]] = []
        i = 0
        while i < len(frags):
            i = foldrun.apply_run(self.st, frags, i, cfg, sink, self.lags, e2e, errors)
            for bad, exc in errors:  # a bug or an unforeseen shape: dead-letter, go on
                out.append(self._fold_error(bad, exc))
            errors.clear()
            if sink.anomalies or sink.unseen or sink.facts:
                fr = frags[i - 1]
                self._drain(sink, out, fr.time, ops, fr.op)
        self._advance(watermark_ns, sink, out, ops)
        self._flush_facts(out, watermark_ns)
        out.append(self._stats(len(frags), e2e))
        return out

    def _unseen_before(self, frags: list[Fragment]) -> list[Fragment]:
        """``frags`` (in op order) without those folded before. The events topic can hold an
        op event twice: its idempotent producer resends a batch under a new epoch when a
        broker fails over mid-request, which the broker cannot deduplicate (kmon nemesis
        chaos saw a poll folded twice read as a nonmonotonic poll). A process's events come
        in op order (one events partition each), so a fragment at or below its process's
        last folded op index is such a copy, in this batch or an earlier one."""
        fresh = []
        for fr in frags:
            if fr.op <= self.last_ops.get(fr.process, -1):
                continue
            self.last_ops[fr.process] = fr.op
            fresh.append(fr)
        return fresh

    def _forget_gone_processes(self) -> None:
        """Keep the last op index of processes the fold still tracks (it drops quiet ones)."""
        for p in [p for p in self.last_ops if p not in self.st.procs]:
            del self.last_ops[p]

    def wake(self, watermark_ns: int) -> list[dict[str, Any]]:
        """An expired timer: advance to the watermark (no input)."""
        self.timer_ms = None  # Spark removed the timer that fired
        out: list[dict[str, Any]] = []
        self._advance(watermark_ns, Sink(), out, {})
        self._flush_facts(out, watermark_ns)
        out.append(self._stats(0, []))
        return out

    def next_timer_ms(self, watermark_ns: int) -> int | None:
        """When this key next needs the watermark: its earliest deadline, or a grace period
        from now while something is left to compact or judge; None when fully settled."""
        st, s = self.st, self.settings
        due = fold.next_deadline(st, s.fold_config())  # (the config: share groups' deadlines)
        if s.unseen_grace_ns is not None:
            due = min(due, unseen.next_deadline(st, s.unseen_grace_ns))
        if len(st.val) or st.procs or st.loose:
            due = min(due, watermark_ns + s.grace_ns)
        if due >= INF:
            return None
        return max(-(-due // 1_000_000), watermark_ns // 1_000_000 + 1)

    # -- helpers --------------------------------------------------------------------------
    def _advance(self, watermark_ns: int, sink: Sink, out: list, ops: Mapping) -> None:
        if watermark_ns <= 0:
            return
        st = self.st
        due = lost_write.due_by_offset(st, watermark_ns)
        fold.advance(st, watermark_ns, self.settings.fold_config(), sink)
        self._forget_gone_processes()
        for a in sink.anomalies:  # absence verdicts: decided when their deadline passed
            a_due = due.get(a.record.get("offset"), watermark_ns)
            self._anomaly(a, a_due, out, ops)
        sink.anomalies.clear()
        self._unseen(sink, out)
        self._facts(sink)
        live = st.procs
        for p in [p for p in self.lags if p not in live]:
            del self.lags[p]  # the fold forgot an idle consumer: so does the lag gauge

    def _drain(self, sink: Sink, out: list, t: int, ops: Mapping, decider: int) -> None:
        for a in sink.anomalies:
            self._anomaly(a, t, out, ops, decider)
        sink.anomalies.clear()
        self._unseen(sink, out)
        self._facts(sink)

    def _anomaly(self, a: Any, decided: int, out: list, ops: Mapping,
                 decider: int | None = None) -> None:
        rid, verdict, update = self.verdicts.classify(self.probe, a)
        key = a.record.get("key", self.st.key)
        rec = ev.evidence(rid=rid, verdict=verdict, update=update, type=a.type,
                          cluster=self.settings.cluster, probe=self.probe, key=key,
                          topic=self.topic, partition=self.partition, broker=self.leader,
                          record=a.record, decided_ns=decided, ops=ops, stage="key",
                          decider=decider)
        out.append(self._row(ANOMALY, atype=a.type, id=rid, verdict=verdict, upd=update,
                             decided=decided, body=ev.to_json(rec)))

    def _unseen(self, sink: Sink, out: list) -> None:
        grace = self.settings.unseen_grace_ns or 0
        for key, value, offset, ack in sink.unseen:
            record = {"key": key, "value": value, "offset": offset, "ack-time": ack}
            rid = ev.evidence_id(self.probe, ev.UNSEEN, record)
            rec = ev.evidence(rid=rid, verdict=rid, update=False, type=ev.UNSEEN,
                              cluster=self.settings.cluster, probe=self.probe, key=key,
                              topic=self.topic, partition=self.partition,
                              broker=self.leader, record=record, decided_ns=ack + grace)
            out.append(self._row(UNSEEN, atype=ev.UNSEEN, id=rid, verdict=rid, upd=False,
                                 decided=ack + grace, body=ev.to_json(rec)))
        sink.unseen.clear()

    def _facts(self, sink: Sink) -> None:
        self.facts.extend(sink.facts)
        sink.facts.clear()

    def _flush_facts(self, out: list, watermark_ns: int) -> None:
        """This call's facts as facts records, each stamped with this call's watermark: stage
        2's clock (see ``txnfold``). A row per writer bucket (``writer``: the bucket; past
        ``FACTS_PER_RECORD`` facts, more), its body the record's value, which the driver
        produces as it is, never parsing facts. A record names the key, its placement and the
        watermark once; each fact is a short array (``facts_record``)."""
        if not self.facts:
            return
        by_bucket: dict[int, list[TxnFact]] = {}
        buckets = self.settings.txn_buckets
        for f in self.facts:
            by_bucket.setdefault(bucket_of(f.writer, buckets), []).append(f)
        for bucket, group in sorted(by_bucket.items()):
            for i in range(0, len(group), FACTS_PER_RECORD):
                record = facts_record(self.probe, self.st.key, self.topic, self.partition,
                                      self.leader, watermark_ns,
                                      group[i:i + FACTS_PER_RECORD])
                out.append(self._row(FACT, writer=bucket, body=ev.to_json(record)))
        self.facts = []

    def _stats(self, n: int, e2e: list[int]) -> dict[str, Any]:
        bounds = self.settings.e2e_buckets_ns
        counts = [0] * (len(bounds) + 1)
        for d in e2e:
            counts[bisect.bisect_left(bounds, d)] += 1
        worst = max((lag for _, lag in self.lags.values()), default=0)
        return self._row(STATS, unseen=unseen.unseen_count(self.st), lag=worst, e2e=counts,
                         e2e_sum=sum(e2e), frags=n, settled=False)  # the processor decides

    def _fold_error(self, fr: Fragment, exc: Exception) -> dict[str, Any]:
        detail = {"probe": self.probe, "key": self.st.key, "index": fr.op,
                  "process": fr.process, "error": f"{type(exc).__name__}: {exc}",
                  "trace": "".join(traceback.format_exception(exc, limit=4))}
        return self._row(DEAD, atype="fold-error", id=f"{self.probe}:{fr.op}:{self.st.key}",
                         body=ev.to_json(detail))

    def _row(self, kind: str, **fields: Any) -> dict[str, Any]:
        row = {"kind": kind, "probe": self.probe, "key": ev.to_json(self.st.key),
               "topic": self.topic, "part": self.partition, "broker": self.leader}
        row.update(fields)
        return row


@dataclass(frozen=True)
class Saved:
    """A key's state as ``KeyFold.to_parts`` cut it: the head value, every cold page, and the
    page writes a store needs (against the pages the key was loaded with)."""

    head: bytes
    pages: dict[int, state_pages.Page]
    writes: state_pages.PageWrites

    @property
    def nbytes(self) -> int:
        return len(self.head) + sum(len(p.data) for p in self.pages.values())

    @property
    def written(self) -> int:
        return len(self.head) + self.writes.nbytes


def _no_pages(tokens: dict[int, int]) -> dict[int, state_pages.Page]:
    raise ValueError(f"a state with window pages ({len(tokens)}) read as a whole value")


def facts_record(probe: str, key: Any, topic: str, partition: int | None,
                 leader: int | None, watermark_ns: int, facts: list[TxnFact]) -> dict[str, Any]:
    """One key's facts of one call and writer bucket as a facts record (``FACTS_FORMAT``):
    ``vis`` lists visible writes as ``[writer, value, offset, time]``, ``inv`` invisible ones
    as ``[writer, value, offset, outcome, time, reader, max_read]``; key and values keep their
    JSON types (int or string)."""
    vis: list[list[Any]] = []
    inv: list[list[Any]] = []
    for f in facts:
        if f.kind == "visible":
            vis.append([f.writer, f.value, f.offset, f.time])
        else:
            inv.append([f.writer, f.value, f.offset, f.outcome, f.time, f.reader, f.max_read])
    return {"v": FACTS_FORMAT, "probe": probe, "key": key, "topic": topic,
            "partition": partition, "leader": leader, "wm": watermark_ns, "vis": vis, "inv": inv}


def timer_to_keep(old_ms: int | None, new_ms: int | None, watermark_ns: int) -> int | None:
    """The timer a key should have registered, given the one it has (``old_ms``) and what it
    needs now (``new_ms``, from ``next_timer_ms``).

    A registered timer still ahead of the watermark and no later than needed is kept: at worst
    it fires early, and that wake sets the next one. A key fed every micro-batch would
    otherwise move its timer a batch further every batch, two state-store calls each (about
    1-2 ms apiece from the Python worker, as much as folding the key's fragments).
    """
    if old_ms is not None and new_ms is not None and watermark_ns // 1_000_000 < old_ms <= new_ms:
        return old_ms
    return new_ms


def _op_index(fr: Fragment) -> int:
    return fr.op


class _OpsOf(Mapping[int, tuple[Any, int]]):
    """Op index -> (process, time) of a batch's fragments, for evidence; built on first use,
    as most batches have no evidence to write."""

    def __init__(self, frags: list[Fragment]) -> None:
        self._frags = frags
        self._map: dict[int, tuple[Any, int]] | None = None

    def _built(self) -> dict[int, tuple[Any, int]]:
        if self._map is None:
            self._map = {fr.op: (fr.process, fr.time) for fr in self._frags}
        return self._map

    def __getitem__(self, op: int) -> tuple[Any, int]:
        return self._built()[op]

    def __iter__(self) -> Iterator[int]:
        return iter(self._built())

    def __len__(self) -> int:
        return len(self._built())
