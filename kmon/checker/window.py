"""The window's allocator: how a key's per-slot, per-chunk and per-block vectors grow and shrink
together (``KeyState.slot`` grows them, compaction drops their front).

A key's state keeps one entry per offset in its window (slot ``i`` is offset ``base + i``) in
five per-slot vectors (``val``, ``flg``, ``wref``, and the ``atime`` one its clock uses), one
per chunk of ``CHUNK`` offsets (``ctime``: the latest event that touched the chunk; ``amin``:
its earliest ack) and one per block of ``1 << BLOCK_BITS`` offsets (``bmin``, the same at a
finer grain, so lag queries scan little). This module keeps them aligned:

- ``base`` is a multiple of ``CHUNK``; the window grows by whole blocks above (sends arrive
  one offset at a time) and by whole chunks below (a young key may learn of lower offsets, at
  most ``GROW_BELOW_LIMIT`` below its base, and only until its first compaction);
- compaction forgets whole chunks from the front (``drop_front``).

A grown vector is a new one (``librt.vecs`` vectors do not resize in place): re-read it after
``KeyState.slot``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from librt.vecs import extend, vec
from mypy_extensions import i16, i32, i64

from kmon.checker.values import EMPTY
from kmon.checker.window_codec import INF, NO_WRITER

if TYPE_CHECKING:  # (state.py imports this module)
    from kmon.checker.state import KeyState

CHUNK_BITS: Final = 8
CHUNK: Final = 1 << CHUNK_BITS
BLOCK_BITS: Final = 4
GROW_BELOW_LIMIT: Final = 1 << 20  # how far below base a young key may still grow


def run64(n: int, fill: int) -> vec[i64]:
    return vec[i64]([fill] * n)


def run32(n: int, fill: int) -> vec[i32]:
    return vec[i32]([fill] * n)


def run16(n: int, fill: int) -> vec[i16]:
    return vec[i16]([fill] * n)


def grow_above(st: KeyState, i: int) -> None:
    """Make slot ``i`` (at or past the end) exist: grow to the end of its block."""
    n = ((i >> BLOCK_BITS) + 1 << BLOCK_BITS) - len(st.val)
    st.val = extend(st.val, run64(n, EMPTY))
    st.flg = extend(st.flg, run16(n, 0))
    st.wref = extend(st.wref, run32(n, NO_WRITER))
    if st.exact_time:
        st.at64 = extend(st.at64, run64(n, 0))
    else:
        st.at32 = extend(st.at32, run32(n, 0))
    chunks = (len(st.val) + CHUNK - 1) >> CHUNK_BITS
    if chunks > len(st.ctime):
        extra = chunks - len(st.ctime)
        st.ctime = extend(st.ctime, run64(extra, 0))
        st.amin = extend(st.amin, run64(extra, INF))
    blocks = len(st.val) >> BLOCK_BITS
    if blocks > len(st.bmin):
        st.bmin = extend(st.bmin, run64(blocks - len(st.bmin), INF))


def grow_below(st: KeyState, off: int) -> None:
    """Make offset ``off`` (below ``base``) exist: move ``base`` down to its chunk's start."""
    new_base = off - (off % CHUNK)
    n = st.base - new_base
    st.val = extend(run64(n, EMPTY), st.val)
    st.flg = extend(run16(n, 0), st.flg)
    st.wref = extend(run32(n, NO_WRITER), st.wref)
    if st.exact_time:
        st.at64 = extend(run64(n, 0), st.at64)
    else:
        st.at32 = extend(run32(n, 0), st.at32)
    st.ctime = extend(run64(n >> CHUNK_BITS, 0), st.ctime)
    st.amin = extend(run64(n >> CHUNK_BITS, INF), st.amin)
    st.bmin = extend(run64(n >> BLOCK_BITS, INF), st.bmin)
    st.base = new_base


def drop_front(st: KeyState, n: int) -> None:
    """Forget the first ``n`` slots (whole chunks): compaction."""
    chunks = n >> CHUNK_BITS
    st.val, st.flg, st.wref = st.val[n:], st.flg[n:], st.wref[n:]
    st.at32, st.at64 = st.at32[n:], st.at64[n:]
    st.ctime, st.amin = st.ctime[chunks:], st.amin[chunks:]
    st.bmin = st.bmin[n >> BLOCK_BITS:]
    st.base += n
    st.writers.forget_below(st.base)
