"""Part rows -> packed rows -> fragments: exactly the fragments ``split`` makes.

``parts_of`` mirrors what ``decode.fragments`` makes in the JVM (the integration tests check
the JVM against ``split`` too); here the pyarrow packing and the pandas unpacking are checked
alone, with keys and values of both types, several packs per key, and dead letters.
"""

from __future__ import annotations

import random

import pyarrow as pa

from kmon.checker.fragment import split
from kmon.checker.parts import ASSIGNED, DEAD, READ, READ_STR, REBALANCED, SEND
from kmon.history.model import KeyPlacement, Op, OpMeta, Rebalance
from kmon.streaming import frames, pack
from kmon.synth import SynthConfig, healthy
from tests.unit.streaming.cases import CASES

SCHEMA = pa.schema([
    ("probe", pa.string()), ("kl", pa.int64()), ("ks", pa.string()), ("idx", pa.int64()),
    ("proc", pa.int64()), ("type", pa.string()), ("f", pa.string()), ("t", pa.int64()),
    ("it", pa.int64()), ("pos", pa.int64()), ("kind", pa.int32()), ("sv", pa.int64()),
    ("ss", pa.string()), ("so", pa.int64()), ("r_off", pa.list_(pa.int64())),
    ("r_val", pa.list_(pa.int64())), ("r_str", pa.list_(pa.string())),
    ("r_vs", pa.list_(pa.string())), ("nw", pa.int32()), ("topic", pa.string()),
    ("part", pa.int32()), ("dl_raw", pa.binary()), ("dl_src", pa.string()),
])


def _key(k):
    return (0, k) if isinstance(k, str) else (k, None)


def parts_of(op: Op, probe: str = "p") -> list[dict]:
    if op.type == "invoke" or op.f == "crash":
        return []
    base = {"probe": probe, "idx": op.index, "proc": op.process, "type": op.type, "f": op.f,
            "t": op.time, "it": op.time, "sv": 0, "ss": None, "so": -1, "r_off": None,
            "r_val": None, "r_str": None, "r_vs": None, "dl_raw": None, "dl_src": None}
    nw = sum(1 for m in op.value or () if m[0] == "send") if op.f in ("send", "poll", "txn") else 0
    place = op.meta.placements if op.meta else {}
    rows = []

    def add(p1, p2, kind, k, **kw):
        kl, ks = _key(k)
        pl = place.get(k)
        rows.append({**base, "kl": kl, "ks": ks, "pos": p1 * 65536 + p2, "kind": kind, "nw": nw,
                     "topic": pl.topic if pl else None, "part": pl.partition if pl else -1,
                     **kw})

    n = 0
    if op.f in ("send", "poll", "txn"):
        for n, m in enumerate(op.value or ()):
            if m[0] == "send":
                v = m[2]
                add(n, 0, SEND, m[1], sv=v if isinstance(v, int) else 0,
                    ss=v if isinstance(v, str) else None, so=-1 if m[3] is None else m[3])
            elif m[1]:
                for j, (k, pairs) in enumerate(m[1].items()):
                    vals = [v for _, v in pairs]
                    strs = any(isinstance(v, str) for v in vals)
                    add(n, j, READ_STR if strs else READ, k, r_off=[o for o, _ in pairs],
                        r_val=None if strs else vals,
                        r_str=[v if isinstance(v, str) else None for v in vals] if strs else None,
                        r_vs=[None if isinstance(v, str) else str(v) for v in vals] if strs
                        else None)
        n += 1
    if op.f in ("assign", "subscribe"):
        for k in op.value or ():
            add(n, 0, ASSIGNED, k)
            n += 1
    for r in op.rebalance_log:
        for k in r.keys:
            add(n, 0, REBALANCED, k)
            n += 1
    return rows


def _unpack(tables: list[pa.Table]) -> dict:
    packed = pa.concat_tables(tables).to_pandas()
    got = {}
    for (probe, kl, ks), g in packed.groupby(["probe", "kl", "ks"], dropna=False, sort=False):
        if probe == frames.DEAD_PROBE:
            continue
        key = frames.key_of(kl, None if ks != ks else ks)
        frs, _ = frames.fragments(key, [g.iloc[[i]] for i in range(len(g))])
        for fr in frs:
            got[(fr.op, fr.key)] = fr
    return got


_FIELDS = ("key", "op", "process", "type", "f", "time", "invoke_time", "sends", "reads",
           "assigned", "rebalanced", "n_writes")


def _check(ops: list[Op], chunks: int, seed: int = 1) -> None:
    rows = [r for op in ops for r in parts_of(op)]
    random.Random(seed).shuffle(rows)  # the shuffle to the stateful operator keeps no order
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    step = max(1, len(rows) // chunks + 1)
    packs = [pack.pack_table(table.slice(i, step)) for i in range(0, len(rows), step)]
    got = _unpack(packs)
    want = {(fr.op, fr.key): fr for op in ops if op.type != "invoke" and op.f != "crash"
            for fr in split(op)}
    assert set(got) == set(want)
    for k, fr in want.items():
        for f in _FIELDS:
            a, b = getattr(got[k], f), getattr(fr, f)
            assert a == b and type(a) is type(b), (k, f, a, b)


def test_cases_round_trip() -> None:
    for _, ops in CASES.values():
        _check(ops, chunks=1)
        _check(ops, chunks=3)


def test_synthetic_run_round_trips_in_many_packs() -> None:
    ops = list(healthy(3_000, SynthConfig(keys=6, processes=3, keys_per_process=3)))
    _check(ops, chunks=7)


def test_string_keys_values_and_rebalances() -> None:
    ops = [
        Op(1, 10, 7, "ok", "txn", [("send", 1, 5, 7), ("send", "k", "v", None),
                                   ("poll", {1: [(3, 4), (4, "s"), (5, 2**60)], "x": []}),
                                   ("send", 1, 6, 8), ("poll", {1: [(6, 9)]})],
           rebalance_log=(Rebalance("assigned", (1, "y")),),
           meta=OpMeta(placements={1: KeyPlacement("t", 2)})),
        Op(2, 11, 7, "ok", "assign", [1, 2, "z"]),
        Op(3, 12, 8, "ok", "poll", [("poll", {"k": [(0, "v"), (1, 2)]})]),
    ]
    _check(ops, chunks=2)


def test_placement_is_the_latest_in_op_order() -> None:
    ops = [Op(i, i, 0, "ok", "send", [("send", 1, i, i)],
              meta=OpMeta(placements={1: KeyPlacement("t", i)})) for i in range(3)]
    table = pa.Table.from_pylist([r for op in ops for r in parts_of(op)], schema=SCHEMA)
    packed = pack.pack_table(table).to_pandas()
    _, placement = frames.fragments(1, [packed])
    assert placement == ("t", 2)


def test_dead_letters_pack_under_their_reason() -> None:
    dead = {**{f.name: None for f in SCHEMA}, "probe": frames.DEAD_PROBE, "kl": 0,
            "ks": "undecodable", "idx": 0, "proc": 0, "t": 0, "it": 0, "pos": 0, "kind": DEAD,
            "sv": 0, "so": -1, "nw": 0, "part": -1}
    rows = [dict(dead, dl_raw=b"x", dl_src="ev:0:1"), dict(dead, dl_raw=b"y", dl_src="ev:0:2")]
    packed = pack.pack_table(pa.Table.from_pylist(rows, schema=SCHEMA)).to_pylist()
    assert len(packed) == 1
    assert packed[0]["dl_raw"] == [b"x", b"y"] and packed[0]["ks"] == "undecodable"


def test_empty_batch() -> None:
    assert pack.pack_table(SCHEMA.empty_table()).num_rows == 0
    assert frames.fragments(1, []) == ([], None)
