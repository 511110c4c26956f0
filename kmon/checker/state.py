"""Per-key state: the in-flight window of one topic-partition's log, in packed vectors.

Slot ``i`` describes offset ``base + i``. For an occupied slot, ``val`` holds the value's code
(see ``values.py``), ``wref`` the writer op's index (-1 unknown), ``atime`` when it was revealed
(below) and ``flg`` what we know (``flags.py``). An empty slot that some op read or sent across
keeps that crossing (a ``Crossing``: ``crossing``/``set_crossing``) in the same arrays, so a
value arriving there later proves a skip. Detectors ask the state by intention (``consumed``,
``acked_unread``, ``outcome``, ``writer_of``, ``crossing``...) and never read the bits.

``atime`` of an occupied slot is when the offset was first *revealed*: the earliest completion of
an ok or info op that sent or read it (Jepsen's realtime-lag model: from then on, lower offsets
are no longer the end of the log).

Values known but not held in a slot (a send completed without an offset, or a value displaced
from its offset by a conflicting one) live in ``loose``, a ``Loose`` record each; reads whose
writer's outcome is not known yet wait in ``pending_reads`` (``PendingRead``).

Encodings (so an in-flight offset costs about 21 bytes online, ``window_codec.py``): ``wref``
holds writer op indices in 32 bits (``writers``: a ``WriterCodec``); ``atime`` (``ack``/
``set_ack``) holds times in units of ``clock`` (a ``TimeCodec``): nanoseconds in 64 bits
offline (``at64``), milliseconds in 32 bits in a *compact* state (``at32``, online); the value
index (``value_index.py``) holds 16-bit positions while the window is under 64k offsets.

Storage: the per-slot, per-chunk and per-block tables are ``librt.vecs`` vectors (mypyc's
runtime library), whose elements compiled code reads and writes as plain C integers; an
``array.array`` element costs a boxed object and, for a write, argument parsing: about 370
instructions against a handful. The value index (``value_index.py``) is such a vector too. A
vector is replaced, not resized in place, when it grows: re-read it after ``slot``.

Offsets below ``base`` have been compacted: once the watermark is a grace period past every
event that touched a chunk of 256 offsets and nothing is pending there, the chunk is dropped, so
memory follows the in-flight window, not the history.

How the window's vectors grow and shrink together is ``window.py``'s; the bytes a state store
keeps, and loading the previous release's, are ``state_format.py``'s.
"""

from __future__ import annotations

import sys
from typing import Any, Final

from librt.vecs import append, vec
from mypy_extensions import i16, i32, i64

from kmon.checker import state_format, window
from kmon.checker.flags import (
    CAND,
    DECIDED,
    FLAG_OUTCOME,
    GAP,
    GAP_BITS,
    GAP_INT,
    GAP_SEND,
    MULTI,
    OCCUPIED,
    READ,
    READ_OK,
    VER,
    W_ANY,
    W_FAIL,
    W_OK,
)
from kmon.checker.offsets import GroupOffsets
from kmon.checker.records import Crossing, Loose, PendingRead, ProcPos
from kmon.checker.share import ShareLog
from kmon.checker.value_index import ValueIndex
from kmon.checker.values import decode, encode
from kmon.checker.window import BLOCK_BITS, CHUNK, CHUNK_BITS, GROW_BELOW_LIMIT
from kmon.checker.window_codec import INF, TimeCodec, WriterCodec  # noqa: F401  (INF: detectors')


class ValueWriter:
    """What a key knows of a value's writer, wherever the value is held (a slot or a loose
    record): its op (-1 unknown) and its flags as they were when asked (``mark`` records a
    flag where the value is held, not in this copy)."""

    __slots__ = ("flags", "op", "rec", "slot", "st")

    def __init__(self, st: KeyState, slot: int, rec: Loose | None, flags: int, op: int) -> None:
        self.st = st
        self.slot = slot  # -1: not in a slot
        self.rec = rec
        self.flags = flags
        self.op = op

    def completed(self) -> bool:
        """The writer's outcome is known (ok, info or fail)."""
        return bool(self.flags & W_ANY)

    def failed(self) -> bool:
        return bool(self.flags & W_FAIL)

    def multi(self) -> bool:
        """The writer op wrote two or more values."""
        return bool(self.flags & MULTI)

    def outcome(self) -> str:
        return FLAG_OUTCOME[self.flags & W_ANY]

    def marked(self, flag: int) -> bool:
        return bool(self.flags & flag)

    def mark(self, flag: int) -> None:
        if self.slot >= 0:
            self.st.mark(self.slot, flag)
        elif self.rec is not None:
            self.rec.mark(flag)




_SCANS_BEFORE_A_SET: Final = 8


class Consumed:
    """``code in Consumed(st)``: did an ok read consume the value at any slot? For the absence
    verdicts of one ``advance``: the first few questions scan the window (a steady healthy
    window has a few aborted writes due per advance), after that one set answers the rest."""

    def __init__(self, st: KeyState) -> None:
        self.st = st
        self.asked = 0
        self.codes: set[int] | None = None

    def __contains__(self, code: int) -> bool:
        """Whether a slot other than the value's home consumed it (callers check the home)."""
        if not self.st.twins:
            return False
        if self.codes is None:
            self.asked += 1
            if self.asked <= _SCANS_BEFORE_A_SET:
                return self.st.read_ok_at_any_slot(code)
            self.codes = self.st.read_ok_codes()
        return code in self.codes


class KeyState:
    """Everything the fold remembers about one key. See the module docstring."""

    __slots__ = (
        "amin",
        "at32",
        "at64",
        "base",
        "bmin",
        "cand_due",
        "cand_offset",
        "cand_reader",
        "clock",
        "compacted",
        "ctime",
        "flg",
        "frontier",
        "frontier_op",
        "groups",
        "index",
        "key",
        "last_revealed",
        "late",
        "loose",
        "max_time",
        "pending_reads",
        "procs",
        "shares",
        "twins",
        "unseen_decided",
        "unseen_from",
        "val",
        "vals",
        "wref",
        "writers",
    )

    def __init__(self, key: Any, compact: bool = False) -> None:
        self.key = key
        self.base = -1  # offset of slot 0; -1 until the first offset is seen
        self.compacted = False
        self.val: vec[i64] = vec[i64]()
        self.flg: vec[i16] = vec[i16]()
        self.wref: vec[i32] = vec[i32]()  # writer op, encoded by ``writers``
        self.writers = WriterCodec()
        # atime (see ``ack``), ack time in units (0: none): exact nanoseconds in 64 bits offline,
        # milliseconds in 32 bits in a compact state. The other vector stays empty.
        self.at32: vec[i32] = vec[i32]()
        self.at64: vec[i64] = vec[i64]()
        self.clock = TimeCodec(compact)
        self.ctime: vec[i64] = vec[i64]()  # per chunk: latest event time that touched it
        # per chunk: earliest ack (in atime units) in it (INF: none)
        self.amin: vec[i64] = vec[i64]()
        self.bmin: vec[i64] = vec[i64]()  # per block of 16: the same, so lag queries scan little
        self.index = ValueIndex()  # value code -> offset of its slot (see ``find``)
        self.vals: dict[int, Any] = {}  # code -> original value, for non-int values
        self.loose: dict[int, Loose] = {}
        self.pending_reads: dict[int, list[PendingRead]] = {}  # code -> reads awaiting its writer
        # Candidates: pending absence verdicts (lost_write), one per column entry: deadline,
        # offset, the reader op that went past it. Packed: a list of three boxed ints cost ~90
        # bytes each.
        self.cand_due: vec[i64] = vec[i64]()
        self.cand_offset: vec[i64] = vec[i64]()
        self.cand_reader: vec[i64] = vec[i64]()
        self.last_revealed = -1  # highest offset an ok or info op sent or read
        self.frontier = -1  # highest offset any poll has read
        self.frontier_op = -1
        self.procs: dict[Any, ProcPos] = {}
        # consumer group -> its committed offset of this key, as commits and starts show it
        self.groups: dict[str, GroupOffsets] = {}
        # share group -> its deliveries and acknowledgements of this key (``share``)
        self.shares: dict[str, ShareLog] = {}
        self.late = 0  # observations of compacted offsets (not checkable any more)
        self.unseen_decided = 0  # acked values given an unseen verdict and compacted
        self.unseen_from = 0  # no undecided acknowledged-unread value below this offset
        self.max_time = 0
        # Values put in a slot while held at another (never decreases): while 0, a value's
        # home slot is the only one holding it, and no absence verdict needs a window scan.
        self.twins = 0

    # -- values ---------------------------------------------------------------------------
    def code(self, v: Any) -> int:
        return encode(v, self.vals)

    def value(self, code: int) -> Any:
        return decode(code, self.vals)

    # -- slots ----------------------------------------------------------------------------
    def slot(self, off: int) -> int:
        """Slot index of ``off``, growing the window as needed; -1 if it was compacted."""
        if self.base < 0:
            self.base = off - (off % CHUNK)
        i = off - self.base
        if i < 0:
            if self.compacted or -i > GROW_BELOW_LIMIT:
                return -1
            window.grow_below(self, off)
            i = off - self.base
        elif i >= len(self.val):
            window.grow_above(self, i)
        return i

    def drop_front(self, n: int) -> None:
        """Forget the first ``n`` slots (whole chunks): compaction (``window.drop_front``)."""
        window.drop_front(self, n)

    def in_window(self, off: int) -> bool:
        return 0 <= off - self.base < len(self.val)

    def touch(self, i: int, t: int) -> None:
        c = i >> CHUNK_BITS
        if t > self.ctime[c]:
            self.ctime[c] = t
        if t > self.max_time:
            self.max_time = t

    # -- what a slot says, by intention (detectors ask these rather than test flag bits) -----
    def occupied(self, i: int) -> bool:
        """Slot ``i`` holds a value (else it is empty, or remembers a crossing)."""
        return bool(self.flg[i] & OCCUPIED)

    def in_version_order(self, i: int) -> bool:
        """Slot ``i``'s value is in the version order: read there, or an ok send's ack."""
        return bool(self.flg[i] & VER)

    def consumed(self, i: int) -> bool:
        """A committed (ok) poll read the value of occupied slot ``i``."""
        return bool(self.flg[i] & READ_OK)

    def seen(self, i: int) -> bool:
        """Some poll, of any outcome, read slot ``i``'s value."""
        return bool(self.flg[i] & READ)

    def acked(self, i: int) -> bool:
        """The writer of slot ``i``'s value completed ok."""
        return bool(self.flg[i] & W_OK)

    def acked_unread(self, i: int) -> bool:
        """An acknowledged value no committed poll has read (yet): unseen."""
        f = self.flg[i]
        return bool(f & W_OK and f & OCCUPIED and not f & READ_OK)

    def completed(self, i: int) -> bool:
        """The writer of slot ``i``'s value has completed (ok, info or fail)."""
        return bool(self.flg[i] & W_ANY)

    def writer_failed(self, i: int) -> bool:
        """The writer of slot ``i``'s value failed: it never committed."""
        return bool(self.flg[i] & W_FAIL)

    def outcome(self, i: int) -> str:
        """The writer's completion: ok, info, fail, or unknown (not completed yet)."""
        return FLAG_OUTCOME[self.flg[i] & W_ANY]

    def multi_write(self, i: int) -> bool:
        """The writer op wrote two or more values: the transaction stage judges its atomicity."""
        return bool(self.flg[i] & MULTI)

    def mark(self, i: int, flag: int) -> None:
        """Record a detector's own bookkeeping flag (DECIDED, UNSEEN_DONE, VISIBLE_DONE...)."""
        self.flg[i] |= flag

    def marked(self, i: int, flag: int) -> bool:
        return bool(self.flg[i] & flag)

    def decided(self, i: int) -> None:
        """Slot ``i``'s absence verdict was given: no longer a candidate (``lost_write``)."""
        self.flg[i] = (self.flg[i] & ~CAND) | DECIDED

    # -- crossings: empty slots keep the op that read or sent across them ---------------------
    def crossing(self, i: int) -> Crossing | None:
        """What empty slot ``i`` remembers of an op that went across it, or None."""
        f = self.flg[i]
        if not f & GAP:
            return None
        first, op, third = int(self.val[i]), self.writer(i), self.ack(i)
        if f & GAP_INT:
            return Crossing(op, bool(f & GAP_SEND), True, -1, -1, first, first + third)
        return Crossing(op, bool(f & GAP_SEND), False, first, third, -1, -1)

    def set_crossing(self, i: int, c: Crossing) -> None:
        """Keep ``c`` in empty slot ``i``: its ``val`` holds the first op (within one op: the
        offset it started from), ``wref`` the op that crossed, ``atime`` the process (within
        one op: how far the crossing went)."""
        mark = GAP | (GAP_SEND if c.send else 0) | (GAP_INT if c.within else 0)
        self.flg[i] = (self.flg[i] & ~GAP_BITS) | mark
        self.val[i] = c.lo if c.within else c.first_op
        self.set_writer(i, c.op)
        self.set_small(i, c.hi - c.lo if c.within else c.process)

    def clear_crossing(self, i: int) -> None:
        self.flg[i] &= ~GAP_BITS

    # -- ack times and writers (window_codec.py) ------------------------------------------
    def units(self, t: int) -> int:
        """Time ``t`` (ns) in ``atime`` units (always >= 1: 0 means none)."""
        return self.clock.units(t)

    def ns(self, units: int) -> int:
        return self.clock.ns(units)

    @property
    def exact_time(self) -> bool:
        """Offline (not compact): times in exact nanoseconds, in ``at64``."""
        return self.clock.unit == 1

    def ack(self, i: int) -> int:
        """Slot ``i``'s ``atime``: when its offset was first revealed, in units (0: never); in
        an empty slot a crossing keeps a small int here (``set_crossing``)."""
        if self.exact_time:  # (statements, not a conditional: its i64/i32 join would box)
            return self.at64[i]
        return self.at32[i]

    def set_ack(self, i: int, x: int) -> None:
        if self.exact_time:
            self.at64[i] = x
        else:
            self.at32[i] = x

    def reveal(self, i: int, t: int) -> None:
        """An ok or info op completing at ``t`` showed that offset ``base + i`` exists."""
        u = self.units(t)
        a = self.ack(i)
        if not a or u < a:
            self.reveal_units(i, u)

    def reveal_units(self, i: int, u: int) -> None:
        """``reveal`` with the time already in ``atime`` units, known to be the earliest."""
        self.set_ack(i, u)
        off = i + self.base
        if off > self.last_revealed:
            self.last_revealed = off
        if off < self.unseen_from:
            self.unseen_from = off
        c = i >> CHUNK_BITS
        if u < self.amin[c]:
            self.amin[c] = u
        b = i >> BLOCK_BITS
        if u < self.bmin[b]:
            self.bmin[b] = u

    def revealed_ns(self, i: int) -> int:
        """When slot ``i``'s offset was first revealed (ns), or -1."""
        u = self.ack(i)
        return self.ns(u) if u > 0 and self.flg[i] & OCCUPIED else -1

    def writer(self, i: int) -> int:
        """The op index of slot ``i``'s writer, -1 unknown."""
        return self.writers.decode(self.wref[i], self.base + i)

    def set_writer(self, i: int, op: int) -> None:
        self.wref[i] = self.writers.encode(op, self.base + i)

    def set_small(self, i: int, x: int) -> None:
        """Store a small int (a process, an offset distance) in an empty slot's ``atime``."""
        self.set_ack(i, self.clock.small(x))

    # -- value index ------------------------------------------------------------------------
    def read_ok_at_any_slot(self, code: int) -> bool:
        """Whether a committed (ok) read consumed ``code`` at some slot. A value acknowledged at
        a wrong offset sits at two slots, and the index knows only the first: a scan."""
        val, flg = self.val, self.flg
        for i in range(len(val)):
            if val[i] == code and flg[i] & READ_OK and flg[i] & OCCUPIED:
                return True
        return False

    def read_ok_codes(self) -> set[int]:
        """Every value a committed (ok) read consumed at some slot (see read_ok_at_any_slot)."""
        val, flg = self.val, self.flg
        return {val[i] for i in range(len(flg)) if flg[i] & READ_OK and flg[i] & OCCUPIED}

    # The value index (value_index.py) over this window.
    def find(self, code: int) -> int:
        """Offset of the slot holding ``code`` (its first home), or -1."""
        return self.index.find(code, self.val, self.base)

    def probe(self, code: int) -> int:
        """``find``, or a negative ticket for ``index_at``: one walk of the probe chain for a
        value about to be indexed (``ValueIndex.probe``)."""
        return self.index.probe(code, self.val, self.base)

    def index_at(self, ticket: int, off: int, code: int) -> None:
        self.index.add_at(ticket, off, code, self.val, self.flg, self.base, not self.compacted)

    def index_add(self, off: int, code: int) -> None:
        self.index.add(off, code, self.val, self.flg, self.base, not self.compacted)

    def rebuild_index(self) -> None:
        self.index.rebuild(self.val, self.flg, self.base, not self.compacted)

    # -- pending absence verdicts ----------------------------------------------------------
    def add_cand(self, deadline: int, off: int, reader: int) -> None:
        self.cand_due = append(self.cand_due, deadline)
        self.cand_offset = append(self.cand_offset, off)
        self.cand_reader = append(self.cand_reader, reader)

    # -- writer records -----------------------------------------------------------------------
    def record_of(self, code: int) -> tuple[int, Loose | None]:
        """(slot index or -1, loose record or None) for a value we know."""
        off = self.find(code)
        if off >= 0:
            return off - self.base, None
        return -1, self.loose.get(code)

    def writer_of(self, code: int) -> ValueWriter:
        """What is known of the writer of value ``code`` (nothing: op -1, no outcome)."""
        i, rec = self.record_of(code)
        if i >= 0:
            return self.writer_at(i)
        if rec is not None:
            return ValueWriter(self, -1, rec, rec.flags, rec.writer)
        return ValueWriter(self, -1, None, 0, -1)

    def writer_at(self, i: int) -> ValueWriter:
        """The writer of slot ``i``'s value."""
        return ValueWriter(self, i, None, self.flg[i], self.writer(i))

    def proc(self, process: Any) -> ProcPos:
        pp = self.procs.get(process)
        if pp is None:
            pp = self.procs[process] = ProcPos()
        return pp

    # -- size and persistence -----------------------------------------------------------------
    def window_nbytes(self) -> int:
        """Bytes of the packed arrays: what grows with the offset window (per slot, chunk,
        index bucket)."""
        return sum(memoryview(t).nbytes for t in self.tables())

    def tables(self) -> tuple[Any, ...]:
        """The packed tables, in ``state_format.TABLES`` order (``atime``, ``index``: the
        vector in use)."""
        atime = self.at64 if self.exact_time else self.at32
        index = self.index.cells()
        return (self.val, self.flg, self.wref, atime, self.ctime, self.amin, self.bmin, index)

    def nbytes(self) -> int:
        """Approximate retained bytes: packed arrays plus side tables and their contents."""
        total = self.window_nbytes() + sys.getsizeof(self)
        total += sum(sys.getsizeof(part) for part in (self.index, self.clock, self.writers))
        for d in (self.vals, self.loose, self.pending_reads, self.procs, self.writers.wide):
            if d:
                total += sys.getsizeof(d) + sum(sys.getsizeof(v) for v in d.values())
        total += sum(g.nbytes() for g in self.groups.values())
        total += sum(g.nbytes() for g in self.shares.values())
        cands = (self.cand_due, self.cand_offset, self.cand_reader)
        return total + sum(memoryview(t).nbytes for t in cands)

    def to_bytes(self) -> bytes:
        """Serialized state for a state store (``state_format``); round-trips with
        ``from_bytes``."""
        return state_format.dump(self)

    @classmethod
    def from_bytes(cls, data: bytes) -> KeyState:
        """A state as ``to_bytes`` saved it, this release or the previous (``state_format``)."""
        return cls.from_body(state_format.read(data))

    def to_body(self) -> dict[str, Any]:
        """``to_bytes`` before pickling (``state_format.body_of``), for a store that keeps the
        window's tables in parts."""
        return state_format.body_of(self)

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> KeyState:
        """A state from ``to_body``'s dict (or the previous release's)."""
        st = cls(state_format.checked(body)["key"])
        state_format.load(st, body)
        return st
