"""A key's state in a head and pages, so that a micro-batch writes only what it changed.

A key's window (``kmon.checker.window``) is a few packed tables with an entry per offset, per
chunk or per block of offsets from ``base``; on a busy key they are most of its state (hundreds
of KB), while a micro-batch changes only their top: new writes, and reads near the end of the
log. So the monitor keeps the window's tables in **pages** of ``page_slots`` offsets, aligned
to absolute offsets (a page keeps its number while the window grows above it and compaction
drops pages below it), each page one value of a map state; everything else (the key's records,
scalars, the value index unless the caller leaves it out, as ``KeyFold.to_parts`` does, and the
window's **top**, its ``HOT_PAGES`` highest pages) is the **head**, one value, rewritten every
call.

Only the pages below the top are paged out ("cold"): the top grows with every send and takes
the reads that keep up, and folding it into the head keeps a young key to one value, as
before. A batch rewrites a cold page only when its bytes changed (a late read or ack below the
top, a verdict marking old offsets), and drops the pages compaction forgot.

``page_slots`` 0 keeps the whole window in the head (the layout before pages). Either way the
head names the geometry its pages were cut with, so a monitor restarted with another setting
still loads its checkpoint, and rewrites it in the new layout on the key's next call.
"""

from __future__ import annotations

import os
import pickle
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final

from kmon.checker.state_format import SCALARS, TABLES, WINDOW_TABLES
from kmon.checker.window import CHUNK

DEFAULT_PAGE_SLOTS: Final = 512  # ~9 KB of tables per page (compact times)
HOT_PAGES: Final = 2  # pages at the window's top kept in the head
_BASE: Final = SCALARS.index("base")
_INDEX: Final = TABLES.index("index")
_WINDOW: Final = tuple((TABLES.index(name), bits) for name, bits in WINDOW_TABLES)


def check_page_slots(n: int) -> int:
    """``n``, or a ValueError unless it is 0 or a positive multiple of the window's chunk."""
    if n < 0 or n % CHUNK:
        raise ValueError(f"must be 0 or a positive multiple of {CHUNK}, not {n}")
    return n


@dataclass(frozen=True)
class Split:
    """A state body cut in two: ``head`` (the body, its window tables only from the first hot
    page up, with ``pages`` naming the cut) and the cold ``pages`` (page number -> bytes)."""

    head: dict[str, Any]
    pages: dict[int, bytes] = field(default_factory=dict)
    widths: tuple[int, ...] = ()  # bytes per entry of each window table, in the pages' order


def split(body: dict[str, Any], page_slots: int) -> Split:
    """``body`` (``KeyState.to_body``) with the window's cold pages cut out: all but the
    ``HOT_PAGES`` at its top, where sends land and reads that keep up fall."""
    arrays = body["arrays"]
    base = body["scalars"][_BASE]
    slots = len(arrays[0][1]) // 8  # val: 64-bit
    if page_slots <= 0 or base < 0 or slots == 0:
        return Split({**body, "pages": None})
    first = base // page_slots
    hot = (base + slots - 1) // page_slots - HOT_PAGES + 1  # the first page the head keeps
    if hot <= first:
        return Split({**body, "pages": None})
    cut = hot * page_slots - base  # slots below the head's share
    pages = {}
    for p in range(first, hot):
        lo = max(0, p * page_slots - base)
        hi = (p + 1) * page_slots - base
        pages[p] = pickle.dumps(tuple(_slice(arrays[t], bits, lo, hi) for t, bits in _WINDOW),
                                protocol=5)
    head_arrays = list(arrays)
    for t, bits in _WINDOW:
        head_arrays[t] = (arrays[t][0], _slice(arrays[t], bits, cut, None))
    head = {**body, "arrays": tuple(head_arrays), "pages": (page_slots, first, hot)}
    return Split(head, pages, tuple(_ITEM[arrays[t][0]] for t, _ in _WINDOW))


def join(head: dict[str, Any], pages: dict[int, bytes]) -> dict[str, Any]:
    """The body ``split`` cut: ``head`` with its cold ``pages`` put back. A ValueError names a
    page the head needs and the store did not have."""
    cut = head.pop("pages", None)
    patches = head.pop("patches", None) or {}
    if cut is None:
        return head
    _, first, hot = cut
    missing = [p for p in range(first, hot) if p not in pages]
    if missing:
        raise ValueError(f"key state pages missing from the store: {missing[:5]}")
    parts = [_patched(pages[p], patches.get(p)) for p in range(first, hot)]
    arrays = list(head["arrays"])
    for i, (t, _) in enumerate(_WINDOW):
        code, top_raw = arrays[t]
        arrays[t] = (code, b"".join([*(part[i] for part in parts), top_raw]))
    head["arrays"] = tuple(arrays)
    return head


def _patched(data: bytes, patch: list[tuple[int, int, bytes]] | None) -> tuple[bytes, ...]:
    """A stored page's tables with the head's ``patch`` (table, entry, bytes) applied."""
    tables = pickle.loads(data)
    if not patch:
        return tables
    out = [bytearray(t) for t in tables]
    for t, i, entry in patch:
        out[t][i * len(entry):(i + 1) * len(entry)] = entry
    return tuple(bytes(t) for t in out)


def _slice(packed: tuple[str, bytes], bits: int, lo: int, hi: int | None) -> bytes:
    """Entries of ``packed`` covering slots [lo, hi) (``lo``, ``hi``: multiples of CHUNK, so of
    every table's grain; None: to the end)."""
    raw = packed[1]
    width = _ITEM[packed[0]]
    start = (lo >> bits) * width
    return raw[start:] if hi is None else raw[start:((hi + (1 << bits) - 1) >> bits) * width]


_ITEM: Final = {"q": 8, "i": 4, "h": 2}


# -- what the store holds ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Page:
    """A cold page as stored: its bytes and a token drawn when they were written, which the
    head lists, so that a copy held in memory is known to be the stored one."""

    token: int
    data: bytes


@dataclass
class PageWrites:
    """What a save does to the store's pages, against those it loaded: pages to put (new or
    changed bytes, each with a new token) and pages to remove (compacted)."""

    put: dict[int, Page]
    removed: list[int]

    @property
    def nbytes(self) -> int:
        return sum(len(p.data) for p in self.put.values())


Patches = dict[int, list[tuple[int, int, bytes]]]  # page -> (table, entry, its bytes)


def changes(loaded: dict[int, Page], pages: dict[int, bytes],
            widths: tuple[int, ...] = ()) -> tuple[dict[int, Page], PageWrites, Patches]:
    """The store's pages after a save of ``pages`` (page number -> bytes) over ``loaded``, the
    writes that make them, and the patches the head carries instead: an unchanged page keeps
    its token, and so does a page with a few entries changed (``PATCH_ENTRIES`` over all
    pages; ``widths``: the tables' entry sizes). Verdicts decided as the watermark passes mark
    flags on old offsets, a few per busy key and batch, which otherwise rewrite a whole page."""
    now: dict[int, Page] = {}
    put: dict[int, Page] = {}
    patches: Patches = {}
    budget = PATCH_ENTRIES if widths else 0
    for p, data in pages.items():
        old = loaded.get(p)
        if old is not None and old.data == data:
            now[p] = old
            continue
        patch = _diff(old.data, data, widths, budget) if old is not None and budget else None
        if patch is not None:
            now[p], patches[p] = old, patch
            budget -= len(patch)
        else:
            now[p] = put[p] = Page(new_token(), data)
    return now, PageWrites(put, [p for p in loaded if p not in pages]), patches


PATCH_ENTRIES: Final = 64  # entries a head patches at most, over all its cold pages


def _diff(old: bytes, new: bytes, widths: tuple[int, ...],
          budget: int) -> list[tuple[int, int, bytes]] | None:
    """The entries that take page ``old`` to ``new`` (tables of equal sizes), or None when they
    are more than ``budget``."""
    was, now = pickle.loads(old), pickle.loads(new)
    if len(was) != len(now) or len(widths) != len(now):
        return None
    out: list[tuple[int, int, bytes]] = []
    for t, (a, b, w) in enumerate(zip(was, now, widths, strict=True)):
        if a == b:
            continue
        if len(a) != len(b):
            return None
        for i in range(0, len(b), w):
            if a[i:i + w] != b[i:i + w]:
                out.append((t, i // w, b[i:i + w]))
                if len(out) > budget:
                    return None
    return out


def new_token() -> int:
    """A random 63-bit token (from the OS: Python workers forked from one daemon share the
    ``random`` module's state)."""
    return int.from_bytes(os.urandom(8), "big") >> 1


def tokens(pages: dict[int, Page]) -> dict[int, int]:
    return {p: page.token for p, page in pages.items()}


class PageCache:
    """The cold pages a Python worker last saved or loaded, per key, up to ``max_bytes`` (least
    recently used keys forgotten first). A key's copy is used only when the head lists the
    same token for every page: a retried task's store is rolled back to an older head, whose
    tokens the copy then does not match."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._keys: OrderedDict[Any, tuple[dict[int, Page], int]] = OrderedDict()
        self.hits = self.misses = 0

    def get(self, key: Any, want: dict[int, int]) -> dict[int, Page] | None:
        """The key's pages if every token in ``want`` (page -> token) matches; else None."""
        got = self._keys.get(key)
        if got is not None and tokens(got[0]) == want:
            self._keys.move_to_end(key)
            self.hits += 1
            return got[0]
        self.misses += 1
        return None

    def put(self, key: Any, pages: dict[int, Page]) -> None:
        self.drop(key)
        size = sum(len(p.data) for p in pages.values())
        if not pages or size > self.max_bytes:
            return
        self._keys[key] = (pages, size)
        self.nbytes += size
        while self.nbytes > self.max_bytes:
            _, (_, n) = self._keys.popitem(last=False)
            self.nbytes -= n

    def drop(self, key: Any) -> None:
        old = self._keys.pop(key, None)
        if old is not None:
            self.nbytes -= old[1]
