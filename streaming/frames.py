"""Packed rows (``pack.PACKED_COLUMNS``) of one key -> checker ``Fragment`` objects.

A key gets one or a few packed rows per micro-batch, each a sorted run of its part rows (see
``pack``). Their list columns are concatenated and, when there are several, put in (op index,
position) order; one op's parts then merge into the fragment ``kmon.checker.fragment.split``
makes: its sends of the key and its reads of the key in op order (``[]`` for a key polled
empty), whether an assign or a rebalance touched the key, and how many values the whole op
wrote.

The flattened read columns are consumed in part order: ``r_off`` by every read part, ``r_val``
by reads of longs only, ``r_str``/``r_vs`` (the string values, and the others as text) by reads
with strings among their values. Send offsets of -1 mean unknown.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from kmon.checker.fragment import Fragment
from kmon.checker.parts import READ, READ_STR, PartColumns, from_columns

_PER_PART = ("idx", "pos", "proc", "type", "f", "t", "it", "kind", "sv", "ss", "so", "nw",
             "topic", "part", "r_len")
_FLAT = ("r_off", "r_val", "r_str", "r_vs")


DEAD_PROBE = "\0dead-letter"  # decode.DEAD_PROBE


def key_of(kl: Any, ks: Any) -> Any:
    """The checker key from the grouping key's long and string parts."""
    return ks if ks is not None else int(kl)


def _concat(cells: list[Any]) -> np.ndarray:
    arrays = [c for c in cells if c is not None and len(c)]
    if not arrays:
        return np.empty(0, dtype=object)
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def _starts(lengths: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Where each masked part's records start in a flat column only masked parts fill."""
    n = np.where(mask, lengths, 0)
    return np.cumsum(n) - n


def columns(frames: Iterable[pd.DataFrame]) -> dict[str, np.ndarray]:
    """The key's parts as flat arrays, in (op index, position) order (flat reads unsorted)."""
    cells: dict[str, list[Any]] = {c: [] for c in (*_PER_PART, *_FLAT)}
    packs = 0
    for pdf in frames:
        if not len(pdf):
            continue
        packs += len(pdf)
        for c in cells:
            cells[c].extend(pdf[c].tolist())
    cols = {c: _concat(v) for c, v in cells.items()}
    if packs > 1:  # each pack is sorted; together they need ordering
        kind, lengths = cols["kind"], cols["r_len"]
        starts = {
            "r_off": _starts(lengths, (kind == READ) | (kind == READ_STR)),
            "r_val": _starts(lengths, kind == READ),
            "r_str": _starts(lengths, kind == READ_STR),
        }
        order = np.lexsort((cols["pos"], cols["idx"]))
        for c in _PER_PART:
            cols[c] = cols[c][order]
        cols.update({f"{k}@": v[order] for k, v in starts.items()})
    return cols


def fragments(key: Any, frames: Iterable[pd.DataFrame]) -> tuple[list[Fragment],
                                                                 tuple[str, int | None] | None]:
    """The fragments in one key's packed rows, in op-index order, and the latest placement."""
    cols = columns(frames)
    if not len(cols["idx"]):
        return [], None
    return from_columns(key, PartColumns({c: a.tolist() for c, a in cols.items()}))
