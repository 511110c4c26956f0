"""A key's state as bytes: the form state stores keep (``KeyState.to_bytes``/``from_bytes``).

The monitor saves every key's state in its state store after each micro-batch and loads it on
the next, so a release must load what the previous one saved (a monitor upgraded in place
restarts from its checkpoint). The format is a pickled dict:

- ``v``: the version, 3 (version 2 still loads, below);
- ``key``, ``vals`` (code -> original value for non-int values), ``wide_writers`` (writer ops
  too far from the key's first to fit 32 bits, ``window_codec.WriterCodec``);
- ``scalars``: ``SCALARS``, the window's counters and its parts' (``PART_SCALARS``: the value
  index's, the writer and time codecs');
- ``arrays``: the packed tables in ``TABLES`` order, each as (array typecode, raw bytes);
- ``loose``, ``pending_reads``, ``cands``, ``procs``: the records beside the window, as lists
  (``records.py``: ``row``/``loose_of``...);
- ``groups`` (only when the key has any): each consumer group's committed-offset record
  (``offsets.GroupOffsets.rows``). Added within version 3: a state saved without it loads
  with none.
- ``shares`` (only when the key has any): each share group's log (``share.ShareLog.rows``).
  Added within version 3 too: a state saved without it loads with none.

Version 2 (before 2026-11-25) differs in three ways, each converted on load: its flags were 16
unsigned bits with READ_OK in bit 15 (``flags_v2``), its writers 64-bit offsets from the first
writer (``wref`` typecode ``q``), and it had no ``twins`` count (loaded as 1: some may exist,
so absence verdicts scan for them).
"""

from __future__ import annotations

import pickle
from array import array
from typing import TYPE_CHECKING, Any, Final

from librt.vecs import vec
from mypy_extensions import i16, i32, i64

from kmon.checker.flags import READ_OK
from kmon.checker.offsets import group_of
from kmon.checker.records import PROC_FIELDS, ProcPos, loose_of, pending_read_of
from kmon.checker.share import log_of
from kmon.checker.window import BLOCK_BITS, CHUNK_BITS
from kmon.checker.window_codec import NO_WRITER

if TYPE_CHECKING:  # (state.py imports this module)
    from kmon.checker.state import KeyState

VERSION: Final = 3

# The packed tables, in the order ``KeyState.tables`` gives them.
TABLES: Final = ("val", "flg", "wref", "atime", "ctime", "amin", "bmin", "index")
# How each table but the index follows the window (``window.py``): an entry per slot, per chunk
# (CHUNK_BITS) or per block (BLOCK_BITS) of offsets from ``base``: (table, bits per entry).
WINDOW_TABLES: Final = (("val", 0), ("flg", 0), ("wref", 0), ("atime", 0),
                        ("ctime", CHUNK_BITS), ("amin", CHUNK_BITS), ("bmin", BLOCK_BITS))
# (twins last: version 2 states end before it)
SCALARS: Final = ("base", "compacted", "ibase", "iused", "frontier", "frontier_op", "late",
                  "unseen_decided", "unseen_from", "max_time", "last_revealed", "obase", "tunit",
                  "tbase", "twins")
# Scalars kept by a part of the state: (the part, its field).
PART_SCALARS: Final = {"ibase": ("index", "base"), "iused": ("index", "used"),
                       "obase": ("writers", "base"), "tunit": ("clock", "unit"),
                       "tbase": ("clock", "base")}

_TYPECODE: Final = {8: "q", 4: "i", 2: "h"}  # a vector's item size -> its array typecode
_V2_READ_OK: Final = 1 << 15
_V2_NO_WRITER: Final = -(1 << 63)


def dump(st: KeyState) -> bytes:
    """``st`` in the current format."""
    return pickle.dumps(body_of(st), protocol=5)


def body_of(st: KeyState) -> dict[str, Any]:
    """``st`` as the dict ``dump`` pickles: a state store that keeps the window's tables in
    pages (the monitor's, ``streaming/state_pages.py``) splits its ``arrays`` first."""
    procs = {p: tuple(getattr(pp, s) for s in PROC_FIELDS) for p, pp in st.procs.items()}
    body = {
        "v": VERSION,
        "key": st.key,
        "scalars": tuple(_scalar(st, name) for name in SCALARS),
        "arrays": (*(_packed(t) for t in st.tables()[:-1]), st.index.packed()),
        "wide_writers": st.writers.wide,
        "vals": st.vals,
        "loose": {c: rec.row() for c, rec in st.loose.items()},
        "pending_reads": {c: [w.row() for w in ws] for c, ws in st.pending_reads.items()},
        "cands": [[d, o, r] for d, o, r in zip(st.cand_due, st.cand_offset, st.cand_reader,
                                               strict=True)],
        "procs": procs,
    }
    if st.groups:
        body["groups"] = {name: g.rows() for name, g in st.groups.items()}
    if st.shares:
        body["shares"] = {name: g.rows() for name, g in st.shares.items()}
    return body


def read(data: bytes) -> dict[str, Any]:
    """The saved body (its ``key`` makes the fresh state ``load`` fills); a ValueError for a
    version this release does not know."""
    return checked(pickle.loads(data))


def checked(body: dict[str, Any]) -> dict[str, Any]:
    """``body``, or a ValueError when its version is not one this release loads."""
    version = body.get("v")
    if version not in (2, VERSION):
        raise ValueError(f"unknown key state version {version!r}")
    return body


def load(st: KeyState, body: dict[str, Any]) -> None:
    """Fill the fresh state ``st`` (``KeyState(body["key"])``) from ``read``'s body."""
    version = body["v"]
    names = SCALARS if version == VERSION else SCALARS[:-1]
    for name, v in zip(names, body["scalars"], strict=True):
        _set_scalar(st, name, v)
    if version == 2:
        st.twins = 1  # not counted then: assume some, so verdicts scan
    st.writers.wide = body.get("wide_writers", {})  # (version 2: filled by _load_tables)
    _load_tables(st, dict(zip(TABLES, body["arrays"], strict=True)))
    st.vals = body["vals"]
    st.loose = {c: loose_of(row) for c, row in body["loose"].items()}
    st.pending_reads = {c: [pending_read_of(w) for w in ws]
                        for c, ws in body["pending_reads"].items()}
    for d, o, r in body["cands"]:
        st.add_cand(d, o, r)
    for p, fields in body["procs"].items():
        pp = ProcPos()
        for s, v in zip(PROC_FIELDS, fields, strict=True):
            setattr(pp, s, v)
        st.procs[p] = pp
    for name, rows in body.get("groups", {}).items():
        st.groups[name] = group_of(rows)
    for name, rows in body.get("shares", {}).items():
        st.shares[name] = log_of(rows)


def _load_tables(st: KeyState, tables: dict[str, tuple[str, bytes]]) -> None:
    """Tables as ``dump`` packed them, or as version 2 did (arrays)."""
    st.val, st.ctime = _vec64(tables["val"]), _vec64(tables["ctime"])
    st.amin, st.bmin = _vec64(tables["amin"]), _vec64(tables["bmin"])
    code, raw = tables["flg"]
    st.flg = vec[i16](memoryview(raw).cast("h") if code == "h" else flags_v2(raw))
    if st.exact_time:  # (the clock's unit, a scalar, is loaded first)
        st.at64 = _vec64(tables["atime"])
    else:
        st.at32 = vec[i32](memoryview(tables["atime"][1]).cast("i"))
    code, raw = tables["wref"]
    if code == "i":
        st.wref = vec[i32](memoryview(raw).cast("i"))
    else:  # version 2 widened a window's writers to 64 bits, offsets from the first writer
        wide = array("q", raw)
        st.wref = vec[i32]([NO_WRITER] * len(wide))
        first = st.writers.base
        for i, w in enumerate(wide):
            if w != _V2_NO_WRITER and first is not None:
                st.set_writer(i, w + first)
    st.index.load(tables["index"])


def flags_v2(raw: bytes) -> list[int]:
    """Version 2 flags (16 unsigned bits, READ_OK in bit 15) in today's layout."""
    return [f & ~_V2_READ_OK | (READ_OK if f & _V2_READ_OK else 0) for f in array("H", raw)]


def _scalar(st: KeyState, name: str) -> Any:
    part = PART_SCALARS.get(name)
    return getattr(st, name) if part is None else getattr(getattr(st, part[0]), part[1])


def _set_scalar(st: KeyState, name: str, v: Any) -> None:
    part = PART_SCALARS.get(name)
    if part is None:
        setattr(st, name, v)
    else:
        setattr(getattr(st, part[0]), part[1], v)


def _packed(table: Any) -> tuple[str, bytes]:
    """(array typecode, raw bytes) of a vector or array: the form state stores keep."""
    if isinstance(table, array):
        return table.typecode, table.tobytes()
    view = memoryview(table)
    return _TYPECODE[view.itemsize], view.tobytes()


def _vec64(packed: tuple[str, bytes]) -> vec[i64]:
    return vec[i64](memoryview(packed[1]).cast("q"))
