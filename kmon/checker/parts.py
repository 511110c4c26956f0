"""Fragments from part columns: the online monitor's input, rebuilt into ``Fragment`` objects.

The monitor's JVM stage turns each op into *parts* (one per send, per key read in a poll, per
key assigned or rebalanced) and packs one key's parts into list columns (see
``kmon.streaming.pack``); ``kmon.streaming.frames`` turns those into plain lists and calls
``from_columns``. One op's parts of a key merge into the fragment ``fragment.split`` makes.

Here, not in ``frames``, so it is compiled with the checker: this loop runs once per part of
every event the monitor reads, and interpreted it cost more than the fold itself.
"""

from __future__ import annotations

from typing import Any, Final

from kmon.checker.fragment import Fragment

# Part kinds (``kmon.streaming.decode`` makes them). READ_STR: a read with string values.
SEND: Final = 0
READ: Final = 1
ASSIGNED: Final = 2
REBALANCED: Final = 3
READ_STR: Final = 4
DEAD: Final = 9


class PartColumns:
    """One key's parts in (op index, position) order: per-part lists, and the flat read lists
    they index into (``r_off`` for every read part, ``r_val`` for reads of longs only,
    ``r_str``/``r_vs`` for reads with strings among their values). ``at_off``/``at_val``/
    ``at_str``, when given, say where each part's records start in those flat lists (parts
    from several packs were reordered); otherwise records are consumed in part order."""

    __slots__ = ("at_off", "at_str", "at_val", "f", "idx", "it", "kind", "nw", "part", "proc",
                 "r_len", "r_off", "r_str", "r_val", "r_vs", "so", "ss", "sv", "t", "topic",
                 "type")

    def __init__(self, cols: dict[str, list[Any]]) -> None:
        self.idx: list[int] = cols["idx"]
        self.proc: list[Any] = cols["proc"]
        self.type: list[str] = cols["type"]
        self.f: list[str] = cols["f"]
        self.t: list[int] = cols["t"]
        self.it: list[int] = cols["it"]
        self.kind: list[int] = cols["kind"]
        self.sv: list[int] = cols["sv"]
        self.ss: list[Any] = cols["ss"]
        self.so: list[int] = cols["so"]
        self.nw: list[int] = cols["nw"]
        self.topic: list[Any] = cols["topic"]
        self.part: list[int] = cols["part"]
        self.r_len: list[int] = cols["r_len"]
        self.r_off: list[int] = cols["r_off"]
        self.r_val: list[Any] = cols["r_val"]
        self.r_str: list[Any] = cols["r_str"]
        self.r_vs: list[Any] = cols["r_vs"]
        self.at_off: list[int] | None = cols.get("r_off@")
        self.at_val: list[int] | None = cols.get("r_val@")
        self.at_str: list[int] | None = cols.get("r_str@")


def from_columns(key: Any, c: PartColumns) -> tuple[list[Fragment], tuple[str, int | None] | None]:
    """The fragments of one key's parts, in op order, and the latest placement seen."""
    out: list[Fragment] = []
    fr: Fragment | None = None
    placement: tuple[str, int | None] | None = None
    o = v = s = 0  # running positions in the flat read lists (when in part order)
    idx, kind, topic = c.idx, c.kind, c.topic
    at_off, at_val, at_str = c.at_off, c.at_val, c.at_str
    for i in range(len(idx)):
        op = idx[i]
        k = kind[i]
        if fr is None or fr.op != op:
            # split() counts the op's writes on keys it sent to or read, not on keys only
            # assigned or rebalanced (an op's parts come sends, reads, then those).
            writes = c.nw[i] if k in (SEND, READ, READ_STR) else 0
            fr = Fragment(key, op, c.proc[i], c.type[i], c.f[i], c.t[i], c.it[i],
                          n_writes=writes)
            out.append(fr)
        if k == SEND:
            ss = c.ss[i]
            so = c.so[i]
            send = (c.sv[i] if ss is None else ss, so if so >= 0 else None)
            if fr.sends is None:
                fr.sends = [send]
            else:
                fr.sends.append(send)
        elif k in (READ, READ_STR):
            n = c.r_len[i]
            if at_off is not None:
                o = at_off[i]
            offs = c.r_off[o:o + n]
            o += n
            if k == READ:
                if at_val is not None:
                    v = at_val[i]
                vals = c.r_val[v:v + n]
                v += n
            else:
                if at_str is not None:
                    s = at_str[i]
                vals = _mixed(c.r_vs, c.r_str, s, n)
                s += n
            pairs = list(zip(offs, vals, strict=True))
            if fr.reads is None:
                fr.reads = pairs
            else:
                fr.reads.extend(pairs)
        elif k == ASSIGNED:
            fr.assigned = True
        elif k == REBALANCED:
            fr.rebalanced = True
        t = topic[i]
        if t is not None:
            p = c.part[i]
            placement = (t, p if p >= 0 else None)
    return out, placement


def _mixed(longs_as_text: list[Any], strings: list[Any], start: int, n: int) -> list[Any]:
    """A read's values when strings are among them: each a string, or a long given as text."""
    return [int(longs_as_text[j]) if strings[j] is None else strings[j]
            for j in range(start, start + n)]
