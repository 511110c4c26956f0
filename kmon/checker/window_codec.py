"""How a key's window packs times and writer ops into small ints, per slot.

- ``TimeCodec``: the time an offset was first revealed (``KeyState.atime``) in ``unit`` steps
  after ``base``, plus one (0 means never): exact nanoseconds in 64 bits offline (like
  Jepsen), milliseconds in 32 bits in a *compact* (online) state, where a millisecond is
  plenty and the window costs 4 bytes a slot instead of 8.
- ``WriterCodec``: the writer op's index relative to the first writer the key saw, in 32 bits
  (``KeyState.wref``); a writer further away than that is kept exactly, by offset, on the side.
"""

from __future__ import annotations

from typing import Final

INF: Final = (1 << 63) - 1
I32_MIN: Final = -(1 << 31)
I32_MAX: Final = (1 << 31) - 1
MS: Final = 1_000_000
HOUR: Final = 3600 * 1_000_000_000
NO_WRITER: Final = I32_MIN  # a slot's writer is unknown
WIDE_WRITER: Final = I32_MIN + 1  # a slot's writer is in ``WriterCodec.wide``


class TimeCodec:
    """Nanosecond times <-> ``atime`` units (see the module docstring). ``base`` is fixed by
    the first time encoded: -1 offline; compact, an hour before it, for times that arrive out
    of order. Times past either end clamp to the ends."""

    __slots__ = ("base", "unit")

    def __init__(self, compact: bool) -> None:
        self.unit = MS if compact else 1
        self.base: int | None = None

    def exact(self) -> bool:
        """Offline: exact nanoseconds, in 64 bits."""
        return self.unit == 1

    def units(self, t: int) -> int:
        """``t`` (ns) in units: always >= 1 (0 means no time)."""
        if self.base is None:
            self.base = -1 if self.unit == 1 else t - HOUR
        u = (t - self.base) // self.unit + 1
        top = INF if self.unit == 1 else I32_MAX
        return 1 if u < 1 else (top if u > top else u)

    def ns(self, units: int) -> int:
        """The time (ns) ``units`` stands for: the start of its unit."""
        return (units - 1) * self.unit + (self.base or 0)

    def small(self, x: int) -> int:
        """``x`` if a slot's time cell can hold it, else -1 (an empty slot keeps a small int
        there: ``KeyState.set_crossing``)."""
        lo, hi = (-INF - 1, INF) if self.unit == 1 else (I32_MIN, I32_MAX)
        return x if lo <= x <= hi else -1


class WriterCodec:
    """Writer op indices <-> 32-bit cells (see the module docstring). ``base`` is the first
    writer seen; ``wide`` maps the offset of each slot whose writer did not fit to the writer."""

    __slots__ = ("base", "wide")

    def __init__(self) -> None:
        self.base: int | None = None
        self.wide: dict[int, int] = {}

    def encode(self, op: int, off: int) -> int:
        """The cell for writer ``op`` (-1: unknown) of the slot at offset ``off``."""
        base = self.base
        if op >= 0 and base is not None and WIDE_WRITER < op - base <= I32_MAX:
            return op - base
        if op < 0:
            return NO_WRITER
        if base is None:
            base = self.base = op
        w = op - base
        if WIDE_WRITER < w <= I32_MAX:
            return w
        self.wide[off] = op
        return WIDE_WRITER

    def decode(self, w: int, off: int) -> int:
        """The writer op of the slot at offset ``off`` whose cell is ``w`` (-1: unknown)."""
        base = self.base
        if base is None or w == NO_WRITER:
            return -1
        return self.wide[off] if w == WIDE_WRITER else w + base

    def forget_below(self, off: int) -> None:
        """Offsets below ``off`` were compacted."""
        if self.wide:
            self.wide = {o: w for o, w in self.wide.items() if o >= off}
