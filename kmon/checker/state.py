"""Per-key state: the in-flight window of one topic-partition's log, in packed arrays.

Slot ``i`` describes offset ``base + i``. For an occupied slot, ``val`` holds the value's code
(see ``values.py``), ``wref`` the writer op's index (-1 unknown), ``atime`` the time the writer's
``ok`` completion acknowledged it (0 if none) and ``flg`` what we know (flags below). An empty
slot that some op read or sent across keeps that crossing in the same arrays (``val`` = the
first op, or for a crossing within one op the offset it started from; ``wref`` = the second op;
``atime`` = the process) so a value arriving there later proves a skip.

Values known but not held in a slot (a send invoked but not completed, completed without an
offset, or displaced from its offset by a conflicting value) live in ``loose`` as
``[offset | None, flags, writer, ack_time]``.

Offsets below ``base`` have been compacted: once the watermark is a grace period past every
event that touched a chunk of 256 offsets and nothing is pending there, the chunk is dropped, so
memory follows the in-flight window, not the history.
"""

from __future__ import annotations

import pickle
import sys
from array import array
from typing import Any

from kmon.checker.values import EMPTY, decode, encode

INF = (1 << 63) - 1

# Slot and loose-record flags.
VER = 1 << 0  # in the version order: a poll read it here, or an ok send reported this offset
READ = 1 << 1  # some poll read this value
SENT = 1 << 2  # a send completion reported this offset for this value
W_OK = 1 << 3  # the writer's completion: ok ...
W_INFO = 1 << 4  # ... info ...
W_FAIL = 1 << 5  # ... or fail (none of the three: not known yet)
MULTI = 1 << 6  # the writer op wrote two or more values: the transaction stage checks atomicity
GAP = 1 << 7  # empty slot some op read or sent across; the crossing is kept in the slot
GAP_SEND = 1 << 8  # ... and it was between two sends of one op
CAND = 1 << 9  # an absence verdict (lost-write / invisible write) is pending for this slot
DECIDED = 1 << 10  # that verdict, or an unseen verdict, was emitted
G1A_DONE = 1 << 11  # G1a already reported for this value
VISIBLE_DONE = 1 << 12  # a visible fact was already sent for this value
UNSEEN_DONE = 1 << 13  # an unseen verdict was already emitted for this value
GAP_INT = 1 << 14  # the crossing was within one op: ``val`` holds the offset it started from

W_ANY = W_OK | W_INFO | W_FAIL
OCCUPIED = VER | SENT
OUTCOME_FLAG = {"ok": W_OK, "info": W_INFO, "fail": W_FAIL}
FLAG_OUTCOME = {W_OK: "ok", W_INFO: "info", W_FAIL: "fail", 0: "unknown"}

CHUNK_BITS = 8
CHUNK = 1 << CHUNK_BITS
BLOCK_BITS = 4
_GROW_BELOW_LIMIT = 1 << 20  # how far below base a young key may still grow


class ProcPos:
    """One process's position on one key: its last ok poll and send, for order checks."""

    __slots__ = (
        "lag_pos",
        "poll_off",
        "poll_op",
        "poll_val",
        "send_off",
        "send_op",
        "send_val",
        "time",
    )

    def __init__(self) -> None:
        self.poll_off: int | None = None  # None: no position (never polled, or reset)
        self.poll_op = -1
        self.poll_val: Any = None
        self.send_off: int | None = None
        self.send_op = -1
        self.send_val: Any = None
        self.lag_pos = -1  # highest offset this process has read: what it has caught up to
        self.time = 0


def _empty(typecode: str, n: int, fill: int) -> array:
    return array(typecode, [fill]) * n


class KeyState:
    """Everything the fold remembers about one key. See the module docstring."""

    def __init__(self, key: Any) -> None:
        self.key = key
        self.base = -1  # offset of slot 0; -1 until the first offset is seen
        self.compacted = False
        self.val = array("q")
        self.flg = array("H")
        self.wref = array("q")
        self.atime = array("q")
        self.ctime = array("q")  # per chunk: latest event time that touched it
        self.amin = array("q")  # per chunk: earliest ok-ack time in it (INF: none)
        self.bmin = array("q")  # per block of 16: the same, so lag queries scan little
        self.index = _empty("i", 16, -1)  # open addressing: code -> offset - ibase
        self.ibase = 0
        self.iused = 0
        self.vals: dict[int, Any] = {}  # code -> original value, for non-int values
        self.loose: dict[int, list] = {}
        self.pending_reads: dict[int, list] = {}  # code -> [reader, offset, deadline, process]
        self.cands: list[list] = []  # [deadline, offset, reader op]
        self.last_ack = -1  # highest offset an ok send acknowledged
        self.frontier = -1  # highest offset any poll has read
        self.frontier_op = -1
        self.procs: dict[Any, ProcPos] = {}
        self.late = 0  # observations of compacted offsets (not checkable any more)
        self.unseen_decided = 0  # acked values given an unseen verdict and compacted
        self.max_time = 0

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
            if self.compacted or -i > _GROW_BELOW_LIMIT:
                return -1
            self._grow_below(off)
            i = off - self.base
        elif i >= len(self.val):
            self._grow_above(i)
        return i

    def _grow_above(self, i: int) -> None:
        # Grow to the end of i's block, not slot by slot: sends arrive one offset at a time.
        n = ((i >> BLOCK_BITS) + 1 << BLOCK_BITS) - len(self.val)
        self.val.extend(_empty("q", n, EMPTY))
        self.flg.extend(_empty("H", n, 0))
        self.wref.extend(_empty("q", n, -1))
        self.atime.extend(_empty("q", n, 0))
        chunks = (len(self.val) + CHUNK - 1) >> CHUNK_BITS
        if chunks > len(self.ctime):
            extra = chunks - len(self.ctime)
            self.ctime.extend(_empty("q", extra, 0))
            self.amin.extend(_empty("q", extra, INF))
        blocks = len(self.val) >> BLOCK_BITS
        if blocks > len(self.bmin):
            self.bmin.extend(_empty("q", blocks - len(self.bmin), INF))

    def _grow_below(self, off: int) -> None:
        new_base = off - (off % CHUNK)
        n = self.base - new_base
        self.val[0:0] = _empty("q", n, EMPTY)
        self.flg[0:0] = _empty("H", n, 0)
        self.wref[0:0] = _empty("q", n, -1)
        self.atime[0:0] = _empty("q", n, 0)
        self.ctime[0:0] = _empty("q", n >> CHUNK_BITS, 0)
        self.amin[0:0] = _empty("q", n >> CHUNK_BITS, INF)
        self.bmin[0:0] = _empty("q", n >> BLOCK_BITS, INF)
        self.base = new_base

    def in_window(self, off: int) -> bool:
        return 0 <= off - self.base < len(self.val)

    def touch(self, i: int, t: int) -> None:
        c = i >> CHUNK_BITS
        if t > self.ctime[c]:
            self.ctime[c] = t
        if t > self.max_time:
            self.max_time = t

    def set_ack(self, i: int, t: int) -> None:
        self.atime[i] = t
        if i + self.base > self.last_ack:
            self.last_ack = i + self.base
        c = i >> CHUNK_BITS
        if t < self.amin[c]:
            self.amin[c] = t
        b = i >> BLOCK_BITS
        if t < self.bmin[b]:
            self.bmin[b] = t

    # -- value index ------------------------------------------------------------------------
    def find(self, code: int) -> int:
        """Offset of the slot holding ``code`` (its first home), or -1."""
        index = self.index
        mask = len(index) - 1
        h = (code ^ (code >> 29) ^ (code >> 47)) & mask
        base, val, ibase = self.base, self.val, self.ibase
        while True:
            p = index[h]
            if p < 0:
                return -1
            i = p + ibase - base
            if i >= 0 and val[i] == code:
                return p + ibase
            h = (h + 1) & mask

    def index_add(self, off: int, code: int) -> None:
        index = self.index
        mask = len(index) - 1
        h = (code ^ (code >> 29) ^ (code >> 47)) & mask
        while index[h] >= 0:
            h = (h + 1) & mask
        index[h] = off - self.ibase
        self.iused += 1
        if self.iused * 4 > len(index) * 3:
            self.rebuild_index()

    def rebuild_index(self) -> None:
        live = [(i, c) for i, c in enumerate(self.val) if c != EMPTY and self.flg[i] & OCCUPIED]
        size = 16
        while size < len(live) * 2:
            size <<= 1
        self.index = _empty("i", size, -1)
        self.ibase = self.base
        self.iused = 0
        seen: set[int] = set()
        for i, c in live:
            if c not in seen:  # a value held at two offsets keeps its first home
                seen.add(c)
                self.index_add(self.base + i, c)

    # -- writer records -----------------------------------------------------------------------
    def record_of(self, code: int) -> tuple[int, list | None]:
        """(slot index or -1, loose record or None) for a value we know."""
        off = self.find(code)
        if off >= 0:
            return off - self.base, None
        return -1, self.loose.get(code)

    def proc(self, process: Any) -> ProcPos:
        pp = self.procs.get(process)
        if pp is None:
            pp = self.procs[process] = ProcPos()
        return pp

    # -- size and persistence -----------------------------------------------------------------
    def nbytes(self) -> int:
        """Approximate retained bytes: packed arrays plus side tables and their contents."""
        arrays = (self.val, self.flg, self.wref, self.atime, self.ctime, self.amin, self.bmin,
                  self.index)
        total = sum(a.itemsize * len(a) for a in arrays) + sys.getsizeof(self)
        for d in (self.vals, self.loose, self.pending_reads, self.procs):
            if d:
                total += sys.getsizeof(d) + sum(sys.getsizeof(v) for v in d.values())
        total += sys.getsizeof(self.cands) + sum(sys.getsizeof(c) for c in self.cands)
        return total

    def to_bytes(self) -> bytes:
        """Serialized state for a state store; round-trips with ``from_bytes``."""
        procs = {
            p: tuple(getattr(pp, s) for s in ProcPos.__slots__) for p, pp in self.procs.items()
        }
        body = {
            "v": 1,
            "key": self.key,
            "scalars": (self.base, self.compacted, self.ibase, self.iused, self.frontier,
                        self.frontier_op, self.late, self.unseen_decided, self.max_time,
                        self.last_ack),
            "arrays": tuple(a.tobytes() for a in (self.val, self.flg, self.wref, self.atime,
                                                  self.ctime, self.amin, self.bmin, self.index)),
            "vals": self.vals,
            "loose": self.loose,
            "pending_reads": self.pending_reads,
            "cands": self.cands,
            "procs": procs,
        }
        return pickle.dumps(body, protocol=5)

    @classmethod
    def from_bytes(cls, data: bytes) -> KeyState:
        body = pickle.loads(data)
        if body.get("v") != 1:
            raise ValueError(f"unknown key state version {body.get('v')!r}")
        st = cls(body["key"])
        (st.base, st.compacted, st.ibase, st.iused, st.frontier, st.frontier_op, st.late,
         st.unseen_decided, st.max_time, st.last_ack) = body["scalars"]
        for name, raw in zip(("val", "flg", "wref", "atime", "ctime", "amin", "bmin", "index"),
                             body["arrays"], strict=True):
            arr = array(getattr(st, name).typecode)
            arr.frombytes(raw)
            setattr(st, name, arr)
        st.vals = body["vals"]
        st.loose = body["loose"]
        st.pending_reads = body["pending_reads"]
        st.cands = body["cands"]
        for p, fields in body["procs"].items():
            pp = ProcPos()
            for s, v in zip(ProcPos.__slots__, fields, strict=True):
                setattr(pp, s, v)
            st.procs[p] = pp
        return st
