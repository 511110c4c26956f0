"""Stage 2, per writer: the checker's transaction stage over the facts stage 1 sends.

Torn transactions and lost writes of ``info`` writers need what every key learned about one
multi-write op; stage 1 folds keys independently, so it sends each such ``TxnFact`` to the facts
topic and a second stateful query folds them with ``kmon.checker.torn``.

State is grouped by *bucket* of writers (``(probe, writer mod buckets)``), each bucket one
``TxnStage`` (the checker's dict of per-writer states): a busy probe completes thousands of
transactions per second, and one state read and write per bucket per micro-batch costs far less
than one per writer.

**When to forget a writer.** A writer's invisible facts come only when stage 1's watermark
passes the reads that went past its values plus the grace period; its visible facts may have
come long before. So stage 2's clock is *stage 1's watermark*, carried by every fact (``wm``,
the watermark of the call that emitted it), not the facts' own event times: a micro-batch
that covers a lot of event time (a restart with a backlog) must not make stage 2 forget a
writer whose invisible facts stage 1 has not decided yet. A fact counts at ``max(time, wm)``,
and ``TxnStage.advance(clock)`` forgets writers ``txn.retention`` behind the clock (at least
two grace periods; readers of a transaction's other keys may lag far behind), oldest first past
``txn.max.writers`` per bucket. Stage 1 flushes each micro-batch's facts before the next one
starts, so a clock value read here means every fact stage 1 decided before it is already here too.
Forgetting happens when facts arrive; a bucket idle forever keeps its last few writers.

Each fact carries its key's topic, partition and leader broker (``leader``, as stage 1 last
knew it); a bucket keeps the latest per key for its evidence (``broker``) and metric labels.

Facts of one batch are applied in (time, writer, key, value) order, so a replayed batch emits the
same evidence; judging is incremental and order-independent in what it finds.

**Facts records.** Stage 1 groups each key's facts of a call by bucket into records
(``keyfold.KeyFold._flush_facts``; split past ``FACTS_PER_RECORD``), which the driver produces
as they are, keyed ``<bucket>/<probe>`` (``fact_key``): stage 2 groups records by their key,
without parsing them in the JVM, and a bucket's Python call parses a few JSON records
(``parse_facts``) instead of receiving one row per fact, which PySpark converts cell by cell.
A record names its key, the key's placement and the watermark once, and each fact is a short
array with the key's values in their JSON types (``keyfold.facts_record``). The format before
(one JSON object per fact, repeating all of these, its key and value as JSON text to be
parsed again) was about 235 bytes a fact: at 200k events a batch of the bench's workload,
25k facts and 5.4 MB through the driver, the facts topic and stage 2, whose Python spent
more time in ``json.loads`` than in judging. Records in it are still read (a facts topic
written by the previous release).

**Generations: cost that follows the writers touched.** A bucket keeps every writer for
``txn.retention`` (thousands at a busy probe's rate: megabytes), while a micro-batch's facts
touch a few: new transactions' visible facts, and invisible ones a grace period or more
behind. So the monitor keeps a bucket's writers in *generations* of ``GEN_SPAN`` op indices
(a probe numbers its ops in time order, so a generation is a stretch of time), each one value
of a map state, and the bucket's **head** (places, verdicts, clock, and per generation its
latest fact time and writer count) in one value. A batch reads and rewrites only the
generations its facts' writers fall in; a generation whose latest fact is ``txn.retention``
behind the clock is removed unread, and past ``txn.max.writers`` the oldest generations go
first (so a bucket keeps at most ``txn.max.writers`` writers plus one generation's).
``to_bytes``/``from_bytes`` keep the whole bucket in one value (the layout before
generations, still loaded from old checkpoints and used offline).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import pickle
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from kmon.checker.sink import Sink, TxnFact
from kmon.checker.torn import TxnStage, TxnState, write_of
from kmon.streaming import evidence as ev
from kmon.streaming.keyfold import ANOMALY, FACTS_FORMAT, STATS, bucket_of

# 2: each key's place carries its leader broker (1: topic and partition only); 3: a head,
# its writers in generations apart.
_STATE_VERSION = 2
_HEAD_VERSION = 3
GEN_SPAN: Final = 1 << 16  # op indices per generation (about half a minute at 5k events/s)

# The fields an old-format fact (a JSON object per fact) cannot do without (its probe, wm,
# topic, partition and leader too).
_REQUIRED = frozenset(("kind", "writer", "key", "value", "offset", "outcome", "time"))

log = logging.getLogger("kmon.monitor")


def fact_key(probe: str, bucket: int) -> str:
    """The facts record key of (probe, bucket)."""
    return f"{bucket}/{probe}"


@dataclass(frozen=True, slots=True)
class FactsRecord:
    """One facts record as stage 2 applies it: one key's facts (of one stage 1 call), the key
    as JSON text (its places' and the facts' order's name), its placement and stage 1's
    watermark (``wm``) when the call made them."""

    key_text: str
    place: tuple[str, int | None, int | None]  # topic, partition, leader broker
    wm: int
    facts: list[TxnFact]


class _Stray(ValueError):
    """Not a fact of this probe and bucket."""


def parse_facts(value: bytes, probe: str, bucket: int, buckets: int) -> list[FactsRecord]:
    """The facts of (probe, bucket) in one facts record (``keyfold.facts_record``, or the
    older format: a JSON array of one object per fact). A record that is not one (the facts
    topic is the monitor's own, but shared topics happen) is logged and its strays left out:
    stage 2 must never fail on data."""
    try:
        data = json.loads(value)
        if isinstance(data, list):
            records = legacy_records(data, probe)
        elif isinstance(data, dict) and data.get("v") == FACTS_FORMAT:
            records = [_record(data, probe)]
        else:
            raise _Stray("neither format")
    except (ValueError, TypeError, KeyError, AttributeError, IndexError):
        log.warning("stage 2 left out a facts record that is not one: %r", value[:200])
        return []
    kept = [FactsRecord(r.key_text, r.place, r.wm,
                        [f for f in r.facts if bucket_of(f.writer, buckets) == bucket])
            for r in records]
    strays = sum(len(r.facts) for r in records) - sum(len(r.facts) for r in kept)
    if strays:
        log.warning("stage 2 left out %d facts of other buckets in a record of %s/%s",
                    strays, bucket, probe)
    return [r for r in kept if r.facts]


def _record(data: dict[str, Any], probe: str) -> FactsRecord:
    if data["probe"] != probe:
        raise _Stray("another probe's")
    key = data["key"]
    wm = _int(data["wm"])
    facts = [TxnFact("visible", _int(w), key, v, _offset(o), "ok", _int(t))
             for w, v, o, t in data["vis"]]
    facts += [TxnFact("invisible", _int(w), key, v, _offset(o), str(oc), _int(t), _int(r),
                      _int(m))
              for w, v, o, oc, t, r, m in data["inv"]]
    return FactsRecord(ev.to_json(key), _place(data), wm, facts)


def legacy_records(facts: list[dict[str, Any]], probe: str | None = None) -> list[FactsRecord]:
    """Facts in the format before ``keyfold.FACTS_FORMAT`` (an object per fact, key and value
    as JSON text), a record each; those of other probes (when ``probe`` is given) or without
    the fields stage 2 needs are left out."""
    out = []
    for f in facts:
        if (probe is not None and f.get("probe") != probe) or not f.keys() >= _REQUIRED \
                or f["time"] is None:
            continue
        wm = _int(f.get("wm") or 0)
        out.append(FactsRecord(f["key"], _place(f), wm, [TxnFact(
            f["kind"], _int(f["writer"]), json.loads(f["key"]), json.loads(f["value"]),
            f["offset"], f["outcome"], _int(f["time"]), f.get("reader", -1),
            f.get("max_read", -1))]))
    return out


def _place(data: dict[str, Any]) -> tuple[str, int | None, int | None]:
    part = data.get("partition")
    part = None if part is None or part != part or part < 0 else int(part)
    leader = data.get("leader")
    return (data.get("topic") or ev.UNKNOWN_TOPIC, part, leader if type(leader) is int else None)


def _int(x: Any) -> int:
    if type(x) is not int:
        raise _Stray(f"not an integer: {x!r}")
    return x


def _offset(x: Any) -> int | None:
    return None if x is None else _int(x)


def gen_of(writer: int) -> int:
    """The generation a writer's state is kept in."""
    return writer // GEN_SPAN


@dataclass(frozen=True)
class GenInfo:
    """What a bucket's head knows of one generation without reading it."""

    latest: int  # the latest fact time (ns) of its writers: it is forgotten past retention
    writers: int
    nbytes: int = 0  # as last written


@dataclass(frozen=True)
class SavedBucket:
    """A bucket as the store keeps it: its head, the generations this batch changed (number ->
    bytes) and those it dropped."""

    head: bytes
    puts: dict[int, bytes] = field(default_factory=dict)
    removed: tuple[int, ...] = ()
    nbytes: int = 0  # the whole bucket's, head and every generation

    @property
    def written(self) -> int:
        return len(self.head) + sum(len(d) for d in self.puts.values())


GenReader = Callable[[int], "bytes | None"]


def _group_by_gen(txns: dict[int, TxnState]) -> dict[int, dict[int, TxnState]]:
    """Writers (op index -> state) by generation."""
    out: dict[int, dict[int, TxnState]] = {}
    for w, ts in txns.items():
        out.setdefault(gen_of(w), {})[w] = ts
    return out


def _row_of(ts: TxnState) -> tuple:
    return ([x.row()[:3] for x in ts.visible], [x.row() for x in ts.invisible],
            ts.torn_reported, ts.lost_reported, ts.time)


def _txn_of(row: tuple) -> TxnState:
    vis, inv, torn, lost, t = row
    ts = TxnState()
    ts.visible = [write_of(r) for r in vis]
    ts.invisible = [write_of(r) for r in inv]
    ts.torn_reported, ts.lost_reported, ts.time = torn, lost, t
    return ts


class TxnBucket:
    """One (probe, bucket)'s transaction stage. Whole (``gens`` None: every writer in
    ``stage``) or in generations (``paged``: the generations this batch's facts fall in,
    ``loaded``, are read on demand through ``read_gen`` into ``rows``, their writers as stored;
    ``stage`` holds only the writers the facts name, made into the checker's states).

    Rows stay rows: a batch's facts name a few writers of each generation they read (an
    invisible fact, decided a grace period after the fact, reads a generation of thousands of
    writers), and making every stored writer into the checker's objects and back cost more
    than judging the facts (at 200k events a batch, three quarters of stage 2's Python)."""

    __slots__ = ("by_gen", "clock", "cluster", "gens", "loaded", "max_writers", "places",
                 "probe", "read_gen", "removed", "rows", "stage", "stored", "timer_ms",
                 "verdicts")

    def __init__(self, probe: str, grace_ns: int, verdict_memory: int = 1024,
                 retain_ns: int | None = None, max_writers: int | None = None,
                 cluster: str = "local", paged: bool = False) -> None:
        self.probe = probe
        self.cluster = cluster  # the monitor's ``cluster`` setting, stamped on evidence
        self.max_writers = max_writers
        # Paged, the writer bound is kept per generation here, not by the stage.
        self.stage = TxnStage(grace_ns, retain_ns, None if paged else max_writers)
        self.clock = 0  # stage 1's watermark, as the latest fact carried it
        # key (JSON) -> (topic, partition, leader broker) as the key's latest fact said
        self.places: dict[str, tuple[str, int | None, int | None]] = {}
        self.verdicts = ev.Verdicts(verdict_memory)
        self.timer_ms: int | None = None  # (no timers: forgetting happens as facts arrive)
        self.gens: dict[int, GenInfo] | None = {} if paged else None
        self.stored: frozenset[int] = frozenset()  # generations in the store when loaded
        self.loaded: set[int] = set()  # generations read this batch (rewritten on save)
        # writer -> row (``_row_of``) of each loaded generation, but those in ``stage``
        self.rows: dict[int, dict[int, tuple]] = {}
        self.removed: set[int] = set()
        self.read_gen: GenReader | None = None
        # ``stage``'s writers by generation, while ``_settle_gens`` runs
        self.by_gen: dict[int, dict[int, TxnState]] | None = None

    def to_bytes(self) -> bytes:
        txns = {w: _row_of(ts) for w, ts in self.stage.txns.items()}
        return pickle.dumps((_STATE_VERSION, txns, self.places, self.verdicts.to_state(),
                             self.clock), protocol=5)

    @classmethod
    def from_bytes(cls, probe: str, data: bytes, grace_ns: int, verdict_memory: int = 1024,
                   retain_ns: int | None = None, max_writers: int | None = None,
                   cluster: str = "local") -> TxnBucket:
        """A bucket's state as ``to_bytes`` wrote it, this version or version 1 (places
        without a leader: unknown until the key's next fact)."""
        version, txns, places, verdicts, clock = pickle.loads(data)
        if version == 1:
            places = {k: (t, p, None) for k, (t, p) in places.items()}
        elif version != _STATE_VERSION:
            raise ValueError(f"unknown transaction stage state version {version!r}")
        b = cls(probe, grace_ns, verdict_memory, retain_ns, max_writers, cluster)
        for w, row in txns.items():
            b.stage.txns[w] = _txn_of(row)
        b.places, b.clock = places, clock
        b.verdicts = ev.Verdicts.from_state(verdicts, verdict_memory)
        return b

    def to_parts(self) -> SavedBucket:
        """The head, the generations read this batch (all that can have changed) and those
        dropped. Only for a paged bucket."""
        assert self.gens is not None, "a whole bucket is saved with to_bytes"
        puts = {g: pickle.dumps(self.rows[g], protocol=5) for g in self.loaded
                if g in self.rows}
        for g, data in puts.items():
            self.gens[g] = dataclasses.replace(self.gens[g], nbytes=len(data))
        gens = {g: (i.latest, i.writers, i.nbytes) for g, i in self.gens.items()}
        head = pickle.dumps((_HEAD_VERSION, self.places, self.verdicts.to_state(), self.clock,
                             gens), protocol=5)
        removed = tuple(sorted((self.removed & self.stored) - puts.keys()))
        return SavedBucket(head, puts, removed,
                           len(head) + sum(i.nbytes for i in self.gens.values()))

    @classmethod
    def from_parts(cls, probe: str, head: bytes, read_gen: GenReader, grace_ns: int,
                   verdict_memory: int = 1024, retain_ns: int | None = None,
                   max_writers: int | None = None, cluster: str = "local") -> TxnBucket:
        """A paged bucket from its head (``to_parts``), reading generations through
        ``read_gen`` as facts need them; a whole state (``to_bytes``, an older checkpoint) is
        loaded whole and rewritten in generations on save."""
        parts = pickle.loads(head)
        if parts[0] != _HEAD_VERSION:
            whole = cls.from_bytes(probe, head, grace_ns, verdict_memory, retain_ns,
                                   max_writers, cluster)
            b = cls(probe, grace_ns, verdict_memory, retain_ns, max_writers, cluster, True)
            for g, writers in _group_by_gen(whole.stage.txns).items():
                b.rows[g] = {w: _row_of(ts) for w, ts in writers.items()}
            b.places, b.clock, b.verdicts = whole.places, whole.clock, whole.verdicts
            b.loaded = set(b.rows)
            b.read_gen = read_gen
            return b
        _, places, verdicts, clock, gens = parts
        b = cls(probe, grace_ns, verdict_memory, retain_ns, max_writers, cluster, True)
        b.places, b.clock = places, clock
        b.verdicts = ev.Verdicts.from_state(verdicts, verdict_memory)
        b.gens = {g: GenInfo(*info) for g, info in gens.items()}
        b.stored = frozenset(b.gens)
        b.read_gen = read_gen
        return b

    def _load(self, writers: Iterable[int]) -> None:
        """Read the generations ``writers`` fall in (those not read yet) into ``rows``, and
        make ``writers`` stored there the stage's."""
        assert self.gens is not None
        for w in writers:
            g = gen_of(w)
            if g not in self.loaded:
                self.loaded.add(g)
                data = self.read_gen(g) if g in self.gens and self.read_gen else None
                self.rows[g] = pickle.loads(data) if data else {}
            row = self.rows[g].pop(w, None)
            if row is not None:
                self.stage.txns[w] = _txn_of(row)

    def batch(self, records: list[FactsRecord]) -> list[dict[str, Any]]:
        """Apply facts records (``parse_facts``), then forget old writers."""
        facts = sorted(((f, r) for r in records for f in r.facts), key=_fact_order)
        if self.gens is not None:
            self._load(dict.fromkeys(f.writer for f, _ in facts))
        out: list[dict[str, Any]] = []
        sink = Sink()
        for f, r in facts:
            self.places[r.key_text] = r.place
            self.clock = max(self.clock, r.wm)
            decided = f.time
            if f.time < r.wm:  # a fact counts at stage 1's clock when it was sent
                f = TxnFact(f.kind, f.writer, f.key, f.value, f.offset, f.outcome, r.wm,
                            f.reader, f.max_read)
            self.stage.apply(f, sink)
            for a in sink.anomalies:
                self._anomaly(a, decided, out)
            sink.anomalies.clear()
        if self.clock > 0:
            self.stage.advance(self.clock)
        if self.gens is not None:
            self._settle_gens()
        if not self.stage.txns and not self.gens:
            self.places.clear()
        out.append({"kind": STATS, "probe": self.probe, "frags": len(facts)})
        return out

    def _settle_gens(self) -> None:
        """The head's view of the generations after a batch: those read recounted, those past
        retention dropped unread, the oldest dropped while the bucket is over its bound."""
        gens = self.gens
        assert gens is not None
        self.by_gen = _group_by_gen(self.stage.txns)
        retain = self.stage.retain_ns
        # the writers the facts did not name are forgotten as ``stage.advance`` forgets
        horizon = self.clock - retain if retain is not None and self.clock > 0 else None
        for g in list(self.loaded):
            rows = self.rows.get(g, {})
            if horizon is not None:
                rows = {w: r for w, r in rows.items() if r[4] > horizon}
            for w, ts in self.by_gen.get(g, {}).items():
                rows[w] = _row_of(ts)
            self.rows[g] = rows
            if rows:
                gens[g] = GenInfo(max(r[4] for r in rows.values()), len(rows),
                                  gens[g].nbytes if g in gens else 0)
            else:
                self._drop(g)
        if retain is not None and self.clock > 0:
            for g in [g for g, i in gens.items() if i.latest <= self.clock - retain]:
                self._drop(g)
        if self.max_writers is not None:
            total = sum(i.writers for i in gens.values())
            for g in sorted(gens, key=lambda g: (gens[g].latest, g))[:-1]:
                if total <= self.max_writers:
                    break
                total -= gens[g].writers
                self._drop(g)

    def _drop(self, g: int) -> None:
        assert self.gens is not None
        self.gens.pop(g, None)
        self.removed.add(g)
        if g in self.loaded:
            self.loaded.discard(g)
            self.rows.pop(g, None)
            assert self.by_gen is not None, "dropped only by _settle_gens, which groups first"
            for w in self.by_gen.pop(g, {}):
                del self.stage.txns[w]

    def next_timer_ms(self, watermark_ns: int) -> int | None:
        return None

    def _anomaly(self, a: Any, decided: int, out: list) -> None:
        rid, verdict, update = self.verdicts.classify(self.probe, a)
        key = a.record.get("key")
        topic, part, broker = self.places.get(ev.to_json(key), (ev.UNKNOWN_TOPIC, None, None))
        rec = ev.evidence(rid=rid, verdict=verdict, update=update, type=a.type,
                          cluster=self.cluster, probe=self.probe, key=key, topic=topic,
                          partition=part, broker=broker, record=a.record, decided_ns=decided,
                          stage="transaction")
        out.append({"kind": ANOMALY, "probe": self.probe, "key": ev.to_json(key),
                    "topic": topic, "part": part, "broker": broker, "atype": a.type, "id": rid,
                    "verdict": verdict, "upd": update, "decided": decided,
                    "body": ev.to_json(rec)})


def _fact_order(item: tuple[TxnFact, FactsRecord]) -> tuple:
    """(time, writer, key, value, kind), key and value as JSON text: the order a replayed
    batch applies its facts in, whatever order its records came in."""
    f, r = item
    return (f.time, f.writer, r.key_text, _json_text(f.value), f.kind)


def _json_text(x: Any) -> str:
    """``x`` as JSON text; an int (the probes' values) without the encoder's cost."""
    return str(x) if type(x) is int else ev.to_json(x)
