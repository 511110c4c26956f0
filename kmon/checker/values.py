"""Opaque values as 64-bit codes, so per-key state can live in packed arrays.

Ints in [-2**62, 2**62) are their own code: exact, free to compute, and what Jepsen and kmon's
probes write. Anything else (strings, huge ints) gets a stable 62-bit hash tagged into
[2**62, 2**63), and the original object is kept in a side table while the value is in flight,
so reports still show values with their input types. ``EMPTY`` lies outside both ranges.
"""

from __future__ import annotations

import hashlib
from typing import Final

EMPTY: Final = -(1 << 63)
_DIRECT_MIN: Final = -(1 << 62)
_TAG: Final = 1 << 62
_MASK: Final = _TAG - 1  # also the largest direct code: compiled, comparisons with it stay
# unboxed (``_TAG`` itself is past mypyc's unboxed ints)


def _hashed(v: object) -> int:
    text = ("s:" + v) if isinstance(v, str) else f"{type(v).__name__}:{v!r}"
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "little") & _MASK) | _TAG


def encode(v: object, table: dict[int, object]) -> int:
    """The code of ``v``; non-direct values are remembered in ``table`` for decoding."""
    if type(v) is int and _DIRECT_MIN <= v <= _MASK:
        return v
    code = _hashed(v)
    table[code] = v
    return code


def decode(code: int, table: dict[int, object]) -> object:
    return table.get(code, code) if code > _MASK else code


def is_direct(code: int) -> bool:
    return code <= _MASK
