"""The window's allocator on its own (``kmon.checker.window``): whatever offsets a key learns
of and whatever it compacts, its per-slot, per-chunk and per-block vectors stay aligned."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kmon.checker.state import KeyState
from kmon.checker.values import EMPTY
from kmon.checker.window import BLOCK_BITS, CHUNK, CHUNK_BITS, GROW_BELOW_LIMIT
from kmon.checker.window_codec import INF, NO_WRITER

START = 10 * CHUNK + 7


def _aligned(s: KeyState) -> None:
    n = len(s.val)
    assert s.base % CHUNK == 0 and n % (1 << BLOCK_BITS) == 0
    assert len(s.flg) == len(s.wref) == n
    atime, unused = (s.at64, s.at32) if s.exact_time else (s.at32, s.at64)
    assert len(atime) == n and len(unused) == 0
    assert len(s.ctime) == len(s.amin) == (n + CHUNK - 1) >> CHUNK_BITS
    assert len(s.bmin) == n >> BLOCK_BITS


ACTIONS = st.lists(st.one_of(
    st.tuples(st.just("slot"), st.integers(-3 * CHUNK, 6 * CHUNK)),
    st.tuples(st.just("compact"), st.integers(0, 3)),
), max_size=40)


@given(ACTIONS, st.booleans())
def test_the_vectors_stay_aligned(actions: list[tuple[str, int]], compact: bool) -> None:
    s = KeyState("k", compact=compact)
    s.slot(START)
    marked: dict[int, int] = {}  # offset -> the value code put there
    for kind, x in actions:
        if kind == "slot":
            off = START + x
            i = s.slot(off)
            if i < 0:  # below a compacted base: refused
                assert s.compacted and off < s.base
                continue
            assert s.base + i == off and s.in_window(off)
            s.val[i] = off
            marked[off] = off
        else:  # compaction drops whole chunks from the front
            n = min(x, len(s.val) >> CHUNK_BITS) << CHUNK_BITS
            s.drop_front(n)
            s.compacted = True
            marked = {o: v for o, v in marked.items() if o >= s.base}
        _aligned(s)
        for off, v in marked.items():  # growing in either direction moves nothing
            assert s.val[off - s.base] == v


def test_new_slots_are_empty() -> None:
    s = KeyState("k")
    s.slot(START)
    s.slot(START - CHUNK)
    s.slot(START + 3 * CHUNK)
    assert set(s.val) == {EMPTY} and set(s.flg) == {0} and set(s.wref) == {NO_WRITER}
    assert set(s.at64) == {0} and set(s.ctime) == {0}
    assert set(s.amin) == {INF} and set(s.bmin) == {INF}


def test_a_young_key_grows_below_only_so_far() -> None:
    s = KeyState("k")
    s.slot(GROW_BELOW_LIMIT + 2 * CHUNK)
    assert s.slot(CHUNK) == -1 and s.base == GROW_BELOW_LIMIT + 2 * CHUNK
    assert s.slot(3 * CHUNK) == 0 and s.base == 3 * CHUNK
