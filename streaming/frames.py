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

# decode.SEND ... (no Spark import here)
SEND, READ, ASSIGNED, REBALANCED, READ_STR, DEAD = 0, 1, 2, 3, 4, 9

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
    n = len(cols["idx"])
    if not n:
        return [], None
    per = [cols[c].tolist() for c in _PER_PART]
    r_off, r_val = cols["r_off"].tolist(), cols["r_val"].tolist()
    r_str, r_vs = cols["r_str"].tolist(), cols["r_vs"].tolist()
    ordered = "r_off@" in cols
    if ordered:
        at_off, at_val, at_str = (cols[f"{c}@"].tolist() for c in ("r_off", "r_val", "r_str"))
    o = v = s = 0  # running positions in the flat read columns (when in pack order)
    out: list[Fragment] = []
    fr: Fragment | None = None
    placement = None
    for i, (idx, _pos, proc, ty, f, t, it, kind, sv, ss, so, nw, topic, part, ln) in enumerate(
            zip(*per, strict=True)):
        if fr is None or fr.op != idx:
            # split() counts the op's writes on keys it sent to or read, not on keys only
            # assigned or rebalanced (an op's parts come sends, reads, then those).
            fr = Fragment(key, idx, proc, ty, f, t, it,
                          n_writes=nw if kind in (SEND, READ, READ_STR) else 0)
            out.append(fr)
        if kind == SEND:
            send = (sv if ss is None else ss, so if so >= 0 else None)
            if fr.sends is None:
                fr.sends = [send]
            else:
                fr.sends.append(send)
        elif kind in (READ, READ_STR):
            if ordered:
                o = at_off[i]
            offs = r_off[o:o + ln]
            o += ln
            if kind == READ:
                if ordered:
                    v = at_val[i]
                vals = r_val[v:v + ln]
                v += ln
            else:
                if ordered:
                    s = at_str[i]
                vals = [int(x) if y is None else y
                        for x, y in zip(r_vs[s:s + ln], r_str[s:s + ln], strict=True)]
                s += ln
            pairs = list(zip(offs, vals, strict=True))
            if fr.reads is None:
                fr.reads = pairs
            else:
                fr.reads.extend(pairs)
        elif kind == ASSIGNED:
            fr.assigned = True
        elif kind == REBALANCED:
            fr.rebalanced = True
        if topic is not None:
            placement = (topic, part if part >= 0 else None)
    return out, placement
