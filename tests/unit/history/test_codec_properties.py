"""Hypothesis properties: random ops round-trip through Avro, JSONL, JSON and EDN; malformed input
only ever raises the codec's own error."""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kmon.history import (
    HistoryError,
    KeyPlacement,
    Op,
    OpMeta,
    Rebalance,
    dump_json,
    dump_jsonl,
    loads,
)
from kmon.history.avro import DecodeError, decode_op, encode_op
from kmon.history.model import OP_FS, OP_TYPES
from kmon.history.wire import FIELD_ALIASES, op_to_wire

I64 = st.integers(-(2**63), 2**63 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
# Decimal-looking strings are the interesting case for the JSON key-typing rule.
SCALARS = st.one_of(I64, st.text(max_size=6), I64.map(str), st.integers(-3, 3).map(str))
KEYS = VALUES = SCALARS
OFFSETS = st.none() | I64

SENDS = st.tuples(st.just("send"), KEYS, VALUES, OFFSETS)
RECORDS = st.lists(st.tuples(I64, VALUES), max_size=3)
POLLS = st.tuples(st.just("poll"), st.none() | st.dictionaries(KEYS, RECORDS, max_size=3))
MOPS = {"send": SENDS, "poll": POLLS, "txn": SENDS | POLLS}

PLACEMENTS = st.builds(
    KeyPlacement, st.text(max_size=5), st.integers(0, 2**31 - 1), st.none() | I32, st.none() | I32
)
METAS = st.builds(
    OpMeta,
    probe=st.text(max_size=5),
    transactional_id=st.none() | st.text(max_size=5),
    txn_seq=st.none() | I64,
    deliberate_abort=st.booleans(),
    error=st.none() | st.text(max_size=10),
    seek_to_beginning=st.booleans(),
    placements=st.dictionaries(KEYS, PLACEMENTS, max_size=3),
    invoke_time=st.none() | I64,
)
REBALANCES = st.builds(
    Rebalance,
    st.sampled_from(["assigned", "revoked", "lost", ""]),
    st.lists(KEYS, max_size=3).map(tuple),
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def ops(draw, nemesis: bool = False) -> Op:
    """One model op; ``nemesis`` adds ops Avro cannot carry (string processes, other fs)."""
    fs = [*OP_FS, "start-partition"] if nemesis else list(OP_FS)
    f = draw(st.sampled_from(fs))
    if f in MOPS:
        value = draw(st.lists(MOPS[f], max_size=4))
    elif f in ("assign", "subscribe"):
        value = draw(st.lists(KEYS, max_size=4))
    elif f == "crash":
        value = None
    else:
        value = draw(JSON_VALUES)
    return Op(
        index=draw(st.integers(0, 2**63 - 1)),
        time=draw(I64),
        process=draw(I64 | st.text(max_size=5) if nemesis else I64),
        type=draw(st.sampled_from(OP_TYPES)),
        f=f,
        value=value,
        rebalance_log=tuple(draw(st.lists(REBALANCES, max_size=2))),
        meta=draw(st.none() | METAS),
    )


@st.composite
def histories(draw) -> list[Op]:
    """Ops with increasing indices, as any history file has."""
    out, index = [], -1
    for op in draw(st.lists(ops(nemesis=True), max_size=8)):
        index += draw(st.integers(1, 3))
        op.index = index
        out.append(op)
    return out


# ---------------------------------------------------------------------------------------------
# Round trips


@given(ops())
def test_avro_round_trip(op):
    expected = op
    if op.meta == OpMeta():  # documented: an all-default meta and no meta are one event
        expected = Op(op.index, op.time, op.process, op.type, op.f, op.value, op.rebalance_log)
    assert decode_op(encode_op(op)) == expected


@given(histories())
def test_jsonl_round_trip(history):
    buf = io.StringIO()
    dump_jsonl(history, buf)
    assert loads(buf.getvalue(), "jsonl") == history


@given(histories())
def test_json_round_trip(history):
    buf = io.StringIO()
    dump_json(history, buf)
    assert loads(buf.getvalue(), "json") == history


@settings(max_examples=50, deadline=None)  # edn_format builds its parser on every parse
@given(histories())
def test_edn_round_trip(history):
    assert loads("\n".join(edn_op(op) for op in history), "edn") == history


def edn_op(op: Op) -> str:
    """``op`` as Jepsen prints it: field names, type, f and mop heads as keywords."""
    wire = op_to_wire(op)
    wire["type"], wire["f"] = Keyword(op.type), Keyword(op.f)
    if op.f in MOPS:  # typed poll maps: EDN keeps key types
        wire["value"] = [edn_mop(m) for m in op.value]
    return edn({Keyword(k): v for k, v in wire.items()})


def edn_mop(m: tuple) -> list:
    if m[0] == "send":
        return [Keyword("send"), m[1], [m[3], m[2]]]
    if m[1] is None:
        return [Keyword("poll")]
    return [Keyword("poll"), {k: [list(r) for r in rs] for k, rs in m[1].items()}]


class Keyword(str):
    pass


def edn(x: Any) -> str:
    if isinstance(x, Keyword):
        return ":" + x
    if x is None or isinstance(x, bool):
        return {None: "nil", True: "true", False: "false"}[x]
    if isinstance(x, int | str):
        return json.dumps(x, ensure_ascii=False)  # JSON's string escapes are EDN's
    if isinstance(x, dict):
        return "{" + ", ".join(f"{edn(_kw(k))} {edn(v)}" for k, v in x.items()) + "}"
    return "[" + " ".join(edn(v) for v in x) + "]"


def _kw(k: Any) -> Any:
    # Keys of the wire's own maps (placements, rebalance events) are field names: keywords.
    return (
        Keyword(k)
        if k in ("key", "topic", "partition", "leader", "leader-epoch", "type", "keys")
        else k
    )


# ---------------------------------------------------------------------------------------------
# Malformed input: the codec's own error, never anything else; whatever is accepted writes back.

ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5) | st.floats(allow_nan=False),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)
ALIASES = [alias for aliases in FIELD_ALIASES.values() for alias in aliases]
MOPISH = st.lists(
    st.tuples(st.sampled_from(["send", "poll"]), ANY_JSON).map(list)
    | st.tuples(st.just("send"), SCALARS, st.lists(ANY_JSON, max_size=2)).map(list)
    | st.tuples(st.just("poll"), st.dictionaries(SCALARS.map(str), ANY_JSON, max_size=2)).map(list),
    max_size=3,
)
RAW_OPS = st.fixed_dictionaries(
    {"type": st.sampled_from(OP_TYPES) | ANY_JSON, "process": SCALARS | ANY_JSON},
    optional={name: ANY_JSON for name in ["index", "time", *ALIASES]}
    | {"value": MOPISH | ANY_JSON, "f": st.sampled_from(OP_FS) | ANY_JSON},
)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(RAW_OPS, min_size=1, max_size=4))
def test_any_json_ops_load_or_raise_history_error_and_accepted_ones_write_back(raws):
    text = "\n".join(json.dumps(raw) for raw in raws)
    try:
        history = loads(text, "jsonl")
    except HistoryError:
        return
    buf = io.StringIO()
    dump_jsonl(history, buf)
    assert loads(buf.getvalue(), "jsonl") == history


@given(st.binary(max_size=200))
def test_any_bytes_decode_or_raise_decode_error(data):
    with contextlib.suppress(DecodeError):
        decode_op(data)


@given(ops(), st.data())
def test_corrupted_events_decode_or_raise_decode_error(op, data):
    event = bytearray(encode_op(op))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(event) - 1))
        event[i] = data.draw(st.integers(0, 255))
    with contextlib.suppress(DecodeError):
        decode_op(bytes(event))
