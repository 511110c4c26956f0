"""The window's codecs on their own (``kmon.checker.window_codec``): times in units of a
clock, writer ops in 32-bit cells."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kmon.checker.window_codec import (
    HOUR,
    I32_MAX,
    MS,
    NO_WRITER,
    WIDE_WRITER,
    TimeCodec,
    WriterCodec,
)

TIMES = st.integers(0, 10**18)


@given(st.lists(TIMES, min_size=1))
def test_offline_times_are_exact(times: list[int]) -> None:
    clock = TimeCodec(compact=False)
    for t in times:
        u = clock.units(t)
        assert u >= 1 and clock.ns(u) == t


@given(TIMES, st.lists(st.integers(-HOUR, 30 * 24 * HOUR)))
def test_compact_times_keep_milliseconds_and_an_hour_before_the_first(
        first: int, later: list[int]) -> None:
    clock = TimeCodec(compact=True)
    assert clock.ns(clock.units(first)) == first  # the clock's base: an hour before it
    for d in later:
        t = first + d
        u = clock.units(t)
        assert 1 <= u <= I32_MAX
        # from an hour before the first time to about 24 days after it, to the millisecond
        # (a unit's start); past that, clamped to the last unit
        assert clock.ns(u) <= t < clock.ns(u) + MS or u in (1, I32_MAX)
        if u == 1:
            assert t < first - HOUR + MS
        if u == I32_MAX:
            assert t >= clock.ns(I32_MAX)


def test_small_ints_fit_the_cell_or_become_minus_one() -> None:
    assert TimeCodec(compact=True).small(I32_MAX) == I32_MAX
    assert TimeCodec(compact=True).small(I32_MAX + 1) == -1
    assert TimeCodec(compact=False).small(I32_MAX + 1) == I32_MAX + 1


@given(st.lists(st.tuples(st.integers(-1, 1 << 40), st.integers(0, 1000)), max_size=50))
def test_writers_round_trip_near_or_far(writes: list[tuple[int, int]]) -> None:
    # Writers within 2**31 of the first are cells; farther ones live in ``wide`` by offset.
    codec = WriterCodec()
    cells: dict[int, int] = {}
    ops: dict[int, int] = {}
    for op, off in writes:
        cells[off] = codec.encode(op, off)
        ops[off] = op
        assert cells[off] != NO_WRITER or op < 0
    for off, w in cells.items():
        assert codec.decode(w, off) == ops[off]
        if w == WIDE_WRITER:
            assert off in codec.wide


def test_compaction_forgets_far_writers_below_the_window() -> None:
    codec = WriterCodec()
    codec.encode(7, 0)
    far = 1 << 40
    assert codec.encode(far, 3) == WIDE_WRITER and codec.encode(far + 1, 300) == WIDE_WRITER
    codec.forget_below(256)
    assert codec.wide == {300: far + 1}
