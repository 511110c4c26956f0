"""The value index on its own (``kmon.checker.value_index``), against a dict model: a window of
slots that values are put in, whose front is dropped (compaction), and rebuilds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from librt.vecs import vec
from mypy_extensions import i16, i64

from kmon.checker.flags import OCCUPIED, SENT, VER
from kmon.checker.value_index import NARROW_LIMIT, ValueIndex
from kmon.checker.values import EMPTY


class Window:
    """The slots a key's state would give the index: codes, flags, the offset of slot 0."""

    def __init__(self, n: int) -> None:
        self.val = vec[i64]([EMPTY] * n)
        self.flg = vec[i16]([0] * n)
        self.base = 0
        self.index = ValueIndex()
        self.homes: dict[int, int] = {}  # the model: code -> offset of its first home

    def put(self, off: int, code: int, ticketed: bool) -> None:
        """What version_order does: look the value up, fill the slot, index it if new."""
        i = off - self.base
        found = self.index.probe(code, self.val, self.base)
        expected = self.homes.get(code, -1)
        assert (found if found >= 0 else -1) == expected
        self.val[i], self.flg[i] = code, VER | SENT
        if found >= 0:
            return  # a twin: the index keeps the first home
        if ticketed:
            self.index.add_at(found, off, code, self.val, self.flg, self.base, True)
        else:
            self.index.add(off, code, self.val, self.flg, self.base, True)
        self.homes[code] = off

    def drop_front(self, n: int) -> None:
        self.val, self.flg = self.val[n:], self.flg[n:]
        self.base += n
        self.homes = {c: o for c, o in self.homes.items() if o >= self.base}

    def rebuild(self) -> None:
        self.index.rebuild(self.val, self.flg, self.base, False)
        self.homes = {}
        for i in range(len(self.val)):
            if self.flg[i] & OCCUPIED:
                self.homes.setdefault(self.val[i], self.base + i)

    def check(self) -> None:
        for code in range(-3, 40):
            assert self.index.find(code, self.val, self.base) == self.homes.get(code, -1), code
        assert self.index.used * 10 <= self.index.size() * 7


ACTIONS = st.lists(st.one_of(
    st.tuples(st.just("put"), st.integers(0, 63), st.integers(-3, 39), st.booleans()),
    st.tuples(st.just("drop"), st.integers(1, 8)),
    st.tuples(st.just("rebuild")),
), max_size=120)


@settings(max_examples=300)
@given(ACTIONS)
def test_the_index_finds_each_values_first_home(actions: list[tuple]) -> None:
    w = Window(64)
    for action in actions:
        if action[0] == "put":
            _, slot, code, ticketed = action
            if slot < len(w.val) and not w.flg[slot] & OCCUPIED:
                w.put(w.base + slot, code, ticketed)
        elif action[0] == "drop" and action[1] < len(w.val):
            w.drop_front(action[1])  # the cells of dropped values become tombstones
        elif action[0] == "rebuild":
            w.rebuild()
        w.check()


def test_positions_past_16_bits_move_the_index_to_32_bits() -> None:
    # Positions up to 0xFFFE fit the narrow cells (above 0x7FFF read back unsigned); the first
    # one past them rebuilds the index wide, and every value is still found.
    w = Window(NARROW_LIMIT + 8)
    offsets = [0, 1, 0x7FFF, 0x8000, 0xFFFD, 0xFFFE]
    for n, off in enumerate(offsets):
        w.put(off, 1000 + n, ticketed=n % 2 == 0)
    assert w.index.narrow()
    w.put(NARROW_LIMIT + 1, 999, ticketed=True)
    assert not w.index.narrow()
    for n, off in enumerate(offsets):
        assert w.index.find(1000 + n, w.val, w.base) == off
    assert w.index.find(999, w.val, w.base) == NARROW_LIMIT + 1


def test_packed_cells_load_back() -> None:
    w = Window(32)
    for n in range(10):
        w.put(n * 3, n, ticketed=True)
    again = ValueIndex()
    again.base, again.used = w.index.base, w.index.used
    again.load(w.index.packed())
    for n in range(10):
        assert again.find(n, w.val, w.base) == n * 3
    assert again.packed() == w.index.packed()
