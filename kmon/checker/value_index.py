"""The value index of a key's window: value code -> the offset of the slot holding it.

Open addressing with linear probing over one vector of positions (offset - ``base``): 16-bit
while the window's positions fit in 16 unsigned bits (the vector's signed elements read back
unsigned; 0xFFFF marks an empty cell), else 32-bit (-1 empty). Vectors, not arrays: compiled
code reads their cells as C ints. A value held at two slots (a duplicate, an ack naming the
wrong offset) is indexed at its first home only.

The index does not own the window: every call is given the window's value codes (``val``),
and the offset of its slot 0 (``window_base``). Cells pointing below ``window_base`` (offsets
compacted since the last rebuild) are tombstones: skipped by lookups, reused by additions.
Kept at most 70% full, tombstones included; a rebuild sizes it to the values live then.
"""

from __future__ import annotations

from typing import Final

from librt.vecs import vec
from mypy_extensions import i16, i32, i64

from kmon.checker.flags import OCCUPIED
from kmon.checker.values import EMPTY

NARROW_NONE: Final = 0xFFFF  # an empty cell of the 16-bit vector (as read back, unsigned)
NARROW_LIMIT: Final = 0xFFFF  # positions from here on need the 32-bit vector


def _run16(n: int, fill: int) -> vec[i16]:
    return vec[i16]([fill] * n)


def _run32(n: int, fill: int) -> vec[i32]:
    return vec[i32]([fill] * n)


def _home(code: int, size: int) -> int:
    return (code ^ (code >> 29) ^ (code >> 47)) % size


class ValueIndex:
    """See the module docstring. ``probe`` and ``add_at`` together place a new value in one
    walk of its probe chain: ``probe`` returns the value's offset, or, when it is not indexed,
    a negative *ticket* naming the cell ``add_at`` fills."""

    __slots__ = ("base", "cells16", "cells32", "none", "used")

    def __init__(self) -> None:
        self.cells16: vec[i16] = _run16(16, -1)
        self.cells32: vec[i32] = vec[i32]()  # (the vector not in use stays empty)
        self.none = NARROW_NONE  # the empty cell: NARROW_NONE narrow, -1 wide
        self.base = 0  # positions are offsets - base (the window's base at the last rebuild)
        self.used = 0  # cells not empty, tombstones included

    def narrow(self) -> bool:
        return self.none > 0

    def size(self) -> int:
        return len(self.cells16) if self.none > 0 else len(self.cells32)

    def _cell(self, h: int) -> int:
        if self.none > 0:
            return int(self.cells16[h]) & 0xFFFF
        return int(self.cells32[h])

    def _put(self, h: int, pos: int) -> None:
        if self.none < 0:
            self.cells32[h] = pos
        elif pos < 0:  # (what the unsigned array this replaced raised)
            raise OverflowError("unsigned short is less than minimum")
        else:
            self.cells16[h] = pos - 0x10000 if pos > 0x7FFF else pos

    def find(self, code: int, val: vec[i64], window_base: int) -> int:
        """Offset of the slot holding ``code`` (its first home), or -1."""
        size = self.size()
        h = _home(code, size)
        ibase = self.base
        stale = window_base - ibase  # cells below this point to compacted offsets: tombstones
        none = self.none
        while True:
            p = self._cell(h)
            if p == none:
                return -1
            if p >= stale and val[p - stale] == code:
                return p + ibase
            h += 1
            if h == size:
                h = 0

    def probe(self, code: int, val: vec[i64], window_base: int) -> int:
        """``find``, or, for a value not indexed, a negative ticket for ``add_at``: the first
        tombstone on its chain (reused) or the empty cell that ends it."""
        size = self.size()
        h = _home(code, size)
        ibase = self.base
        stale = window_base - ibase
        none = self.none
        free = -1  # the first tombstone on the chain
        while True:
            p = self._cell(h)
            if p == none:
                return -2 - (h << 1) if free < 0 else -1 - (free << 1)
            if p < stale:
                if free < 0:
                    free = h
            elif val[p - stale] == code:
                return p + ibase
            h += 1
            if h == size:
                h = 0

    def add_at(self, ticket: int, off: int, code: int, val: vec[i64], flg: vec[i16],
               window_base: int, grows: bool) -> None:
        """``add(off, code, ...)`` where the ``probe`` that gave ``ticket`` found room."""
        pos = off - self.base
        if pos >= NARROW_LIMIT and self.none > 0:
            self.add(off, code, val, flg, window_base, grows)
            return
        h = -1 - ticket
        self._put(h >> 1, pos)
        if h & 1:  # an empty cell, not a reused tombstone
            self.used += 1
            if self.used * 10 > self.size() * 7:
                self.rebuild(val, flg, window_base, grows)

    def add(self, off: int, code: int, val: vec[i64], flg: vec[i16], window_base: int,
            grows: bool) -> None:
        """Index ``code`` at ``off``; the caller knows it is not indexed yet."""
        pos = off - self.base
        if pos >= NARROW_LIMIT and self.none > 0:
            self.rebuild(val, flg, window_base, grows)  # the window outgrew 16-bit positions
            pos = off - self.base
        none = self.none
        size = self.size()
        h = _home(code, size)
        stale = window_base - self.base
        while True:
            p = self._cell(h)
            if p == none:
                break
            if p < stale:  # reuse a tombstone
                self._put(h, pos)
                return
            h += 1
            if h == size:
                h = 0
        self._put(h, pos)
        self.used += 1
        if self.used * 10 > size * 7:
            self.rebuild(val, flg, window_base, grows)

    def rebuild(self, val: vec[i64], flg: vec[i16], window_base: int, grows: bool) -> None:
        """Index the window's occupied slots afresh (any size will do: probing is modulo).

        Half full; a window that only ``grows`` (offline, where nothing is compacted) gets a
        third when it holds more live values than cells in use, so its rebuilds stay
        geometric and rarer. Online, compaction rebuilds the index to the window's size."""
        n = len(flg)
        live = 0  # occupied slots hold values (codes), never EMPTY
        for i in range(n):
            if flg[i] & OCCUPIED:
                live += 1
        wider = grows and live * 13 > self.used * 10
        size = max(16, (live * 3 if wider else live * 2) + 1)
        self._empty(size, narrow=n < NARROW_LIMIT)
        self.base = window_base
        none = self.none
        # What add would do for each live value in turn, inline: the table is fresh (no
        # tombstones), positions are slot numbers, and it stays under 70% full.
        used = 0
        for i in range(n):
            if not flg[i] & OCCUPIED or val[i] == EMPTY:
                continue
            c: int = val[i]
            h = _home(c, size)
            while True:
                p = self._cell(h)
                if p == none:
                    self._put(h, i)
                    used += 1
                    break
                if val[p] == c:  # a value held at two offsets keeps its first home
                    break
                h += 1
                if h == size:
                    h = 0
        self.used = used

    def _empty(self, size: int, narrow: bool) -> None:
        if narrow:
            self.cells16, self.cells32, self.none = _run16(size, -1), vec[i32](), NARROW_NONE
        else:
            self.cells16, self.cells32, self.none = vec[i16](), _run32(size, -1), -1

    def cells(self) -> object:
        """The vector in use."""
        return self.cells16 if self.none > 0 else self.cells32

    def packed(self) -> tuple[str, bytes]:
        """As state stores keep it (the arrays before it: 16-bit positions are unsigned)."""
        if self.none > 0:
            return "H", bytes(memoryview(self.cells16))
        return "i", bytes(memoryview(self.cells32))

    def load(self, packed: tuple[str, bytes]) -> None:
        """The cells ``packed`` gave (``base`` and ``used`` are the state's scalars)."""
        code, raw = packed
        if code == "H":
            self.cells16, self.cells32 = vec[i16](memoryview(raw).cast("h")), vec[i32]()
            self.none = NARROW_NONE
        else:
            self.cells16, self.cells32 = vec[i16](), vec[i32](memoryview(raw).cast("i"))
            self.none = -1
