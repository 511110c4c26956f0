"""Hypothesis properties: random ops round-trip through Avro, JSONL, JSON and EDN; malformed input
only ever raises the codec's own error."""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

import fastavro
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from kmon.history import (
    HistoryError,
    KeyPlacement,
    Op,
    OpMeta,
    Rebalance,
    Start,
    dump_json,
    dump_jsonl,
    loads,
)
from kmon.history.avro import DecodeError, decode_op, encode_op, load_schema, op_to_record
from kmon.history.model import ACK_OUTCOMES, OP_FS, OP_TYPES, START_SOURCES
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
COMMITS = st.tuples(st.just("commit"), KEYS, I64)
SHARE_READS = st.tuples(st.just("share-read"), KEYS,
                        st.none() | st.lists(st.tuples(I64, VALUES, I64), max_size=3))
ACKS = st.tuples(st.just("ack"), KEYS, I64, st.sampled_from(ACK_OUTCOMES))
MOPS = {"send": SENDS, "poll": POLLS, "txn": SENDS | POLLS | COMMITS, "commit": COMMITS,
        "share-poll": SHARE_READS, "ack": ACKS}

PLACEMENTS = st.builds(
    KeyPlacement, st.text(max_size=5), st.integers(0, 2**31 - 1), st.none() | I32, st.none() | I32
)
STARTS = st.builds(Start, st.none() | I64, st.sampled_from([*START_SOURCES, "newer"]))
METAS = st.builds(
    OpMeta,
    probe=st.text(max_size=5),
    transactional_id=st.none() | st.text(max_size=5),
    txn_seq=st.none() | I64,
    deliberate_abort=st.booleans(),
    error=st.none() | st.text(max_size=10),
    seek_to_beginning=st.booleans(),
    placements=st.dictionaries(KEYS, PLACEMENTS, max_size=3),
    group=st.none() | st.text(max_size=5),
    starts=st.dictionaries(KEYS, STARTS, max_size=3),
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
def histories(draw, min_size: int = 0) -> list[Op]:
    """Ops with increasing indices, as any history file has."""
    out, index = [], -1
    for op in draw(st.lists(ops(nemesis=True), min_size=min_size, max_size=8)):
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
    if m[0] == "commit":
        return [Keyword("commit"), m[1], m[2]]
    if m[0] == "share-read":  # (Jepsen has none: kmon's shapes, heads and outcomes as keywords)
        return [Keyword("share-read"), m[1]] + ([] if m[2] is None else [[list(r) for r in m[2]]])
    if m[0] == "ack":
        return [Keyword("ack"), m[1], m[2], Keyword(m[3])]
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
    # Keys of the wire's own maps (placements, starts, rebalance events) are field names: keywords.
    return Keyword(k) if k in _FIELD_NAMES else k


_FIELD_NAMES = frozenset(
    ("key", "topic", "partition", "leader", "leader-epoch", "type", "keys", "offset", "source")
)


# ---------------------------------------------------------------------------------------------
# Malformed input: the codec's own error, never anything else; whatever is accepted writes back.
#
# Random text or bytes almost never get past the JSON parser or fastavro to the op validation,
# so the properties below start from valid histories and events and break one thing in them.
# Each example reports the mutation and the branch it reached (`hypothesis.event`); run with
# ``--hypothesis-show-statistics`` to see how many examples reach each.

ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5) | st.floats(allow_nan=False),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)
ALIASES = [alias for aliases in FIELD_ALIASES.values() for alias in aliases]
REQUIRED = ("type", "f", "process")
# "none" last: Hypothesis leans towards the first choices.
JSON_MUTATIONS = ("delete", "replace", "swap", "rename", "index-not-increasing", "none")


def _jsonl_raws(history: list[Op]) -> list[dict[str, Any]]:
    buf = io.StringIO()
    dump_jsonl(history, buf)
    return [json.loads(line) for line in buf.getvalue().splitlines()]


@st.composite
def mutated_jsonl(draw) -> tuple[str, str, str, list[Op]]:
    """A valid history's JSONL with one field of one op broken: (text, mutation, field,
    history); ``field`` is ``"-"`` when no field was touched.

    delete: a field goes; replace: a field gets any JSON value; swap: a field gets the value
    the same field has in another op (well-typed, maybe inconsistent with the rest of the op);
    rename: a field is written under another of its names (the same history must load);
    index-not-increasing: an index at or below the previous op's."""
    history = draw(histories(min_size=1))
    raws = _jsonl_raws(history)
    i = draw(st.integers(0, len(raws) - 1))
    raw = raws[i]
    how = draw(st.sampled_from(JSON_MUTATIONS))
    field = "-"
    aliased = [name for name in FIELD_ALIASES if name in raw and len(FIELD_ALIASES[name]) > 1]
    if how == "delete":
        field = draw(st.sampled_from(sorted(raw)))
        del raw[field]
    elif how == "replace":
        field = draw(st.sampled_from(sorted({*raw, *REQUIRED})))
        raw[field] = draw(ANY_JSON)
    elif how == "swap":
        other = raws[draw(st.integers(0, len(raws) - 1))]
        field = draw(st.sampled_from(sorted(other)))
        raw[field] = other[field]
    elif how == "rename" and aliased:
        field = draw(st.sampled_from(aliased))
        alias = draw(st.sampled_from([a for a in FIELD_ALIASES[field] if a != field]))
        raw[alias] = raw.pop(field)
    elif how == "index-not-increasing" and i > 0:
        field = "index"
        raw["index"] = draw(st.integers(-3, raws[i - 1]["index"]))
    else:
        how = "none"
    text = "\n".join(json.dumps(r) for r in raws)
    return text, how, field, history


@settings(max_examples=300)
@given(mutated_jsonl())
def test_mutated_json_ops_load_or_raise_history_error_and_accepted_ones_write_back(case):
    text, how, field, history = case
    try:
        loaded = loads(text, "jsonl")
    except HistoryError:
        event(f"jsonl {how}: rejected")
        assert how not in ("none", "rename"), f"{how} {field}: a valid history was rejected"
        return
    event(f"jsonl {how}: accepted")
    if how in ("none", "rename"):
        assert loaded == history
    # Whatever breaks a required field, or the order of indices, cannot load.
    assert not (how == "delete" and field in REQUIRED), f"an op without {field} loaded"
    assert how != "index-not-increasing", "an index at or below the previous one loaded"
    buf = io.StringIO()
    dump_jsonl(loaded, buf)
    assert loads(buf.getvalue(), "jsonl") == loaded


def _negative_index(record: dict[str, Any]) -> None:
    record["index"] = -1 - record["index"] % 5


def _send_without_key(record: dict[str, Any]) -> None:
    sends = [m for m in record["mops"] if m["f"] == "send"]
    sends[0]["key" if record["index"] % 2 else "value"] = None


def _poll_as_send(record: dict[str, Any]) -> None:
    polls = [m for m in record["mops"] if m["f"] == "poll"]
    polls[0]["f"] = "send"  # a poll's key and value are null


def _commit_without_key(record: dict[str, Any]) -> None:
    commits = [m for m in record["mops"] if m["f"] == "commit"]
    commits[0]["key" if record["index"] % 2 else "offset"] = None


_F_SYMBOLS = [f.replace("-", "_") for f in OP_FS]  # Avro's enum symbols are identifiers


def _other_f(record: dict[str, Any]) -> None:
    i = _F_SYMBOLS.index(record["f"])
    record["f"] = _F_SYMBOLS[(i + 1 + record["index"] % 5) % len(_F_SYMBOLS)]


def _ack_incomplete(record: dict[str, Any]) -> None:
    acks = [m for m in record["mops"] if m["f"] == "ack"]
    acks[0][("key", "offset", "outcome")[record["index"] % 3]] = None


def _always(record: dict[str, Any]) -> bool:
    return True


# Record-level mutations: (name, applies to the record, mutate it in place, must be rejected).
# The events are written by fastavro's own writer, so they are valid Avro: only the decoder's
# checks of the content stand between them and the monitor. "none" last, as above.
RECORD_MUTATIONS = [
    ("negative-index", _always, _negative_index, True),
    ("send-without-key-or-value", lambda r: any(m["f"] == "send" for m in r["mops"]),
     _send_without_key, True),
    ("poll-as-send", lambda r: any(m["f"] == "poll" for m in r["mops"]), _poll_as_send, True),
    ("commit-without-key-or-offset", lambda r: any(m["f"] == "commit" for m in r["mops"]),
     _commit_without_key, True),
    ("ack-without-key-offset-or-outcome", lambda r: any(m["f"] == "ack" for m in r["mops"]),
     _ack_incomplete, True),
    ("schema-version", _always, lambda r: r.update(schema_version=1), True),
    ("trailing-byte", _always, lambda r: None, True),
    ("f-unknown", _always, lambda r: r.update(f="unknown"), False),
    ("f-other", _always, _other_f, False),
    ("none", _always, lambda r: None, False),
]


@settings(max_examples=300)
@given(ops(), st.sampled_from(RECORD_MUTATIONS))
def test_mutated_events_decode_to_writable_ops_or_raise_decode_error(op, mutation):
    name, applies, mutate, reject = mutation
    record = op_to_record(op)
    if not applies(record):
        name, reject = "none", False
    else:
        mutate(record)
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, load_schema(), record)
    data = buf.getvalue() + (b"\x00" if name == "trailing-byte" else b"")
    try:
        got = decode_op(data)
    except DecodeError:
        event(f"avro {name}: rejected")
        assert reject, f"{name}: a valid event was rejected"
        return
    event(f"avro {name}: accepted")
    assert not reject, f"{name}: decoded to {got!r}"
    assert got.index >= 0
    if got.f == "unknown":  # an f newer than this reader: kept as unknown, with no value
        assert got.value is None
        return
    assert decode_op(encode_op(got)) == got  # what the decoder accepts, the encoder writes
    if name == "none":
        if op.meta == OpMeta():  # an all-default meta and no meta are one event
            op = Op(op.index, op.time, op.process, op.type, op.f, op.value, op.rebalance_log)
        assert got == op


@given(ops(), st.data())
def test_corrupted_events_decode_or_raise_decode_error(op, data):
    buf = bytearray(encode_op(op))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    with contextlib.suppress(DecodeError):
        decode_op(bytes(buf))


@pytest.mark.parametrize("mop", [[], [None], [7, 1, 2], [["send"]], {}, "send"])
@pytest.mark.parametrize("f", ["send", "poll", "txn", "share-poll"])
def test_a_malformed_mop_is_a_history_error_naming_it(f, mop):
    # An empty mop once raised IndexError while the loader noted the op's typed keys
    # (Hypothesis found `"value": [[]]`).
    line = json.dumps({"index": 0, "time": 0, "type": "invoke", "process": 0, "f": f,
                       "value": [mop]})
    with pytest.raises(HistoryError, match=r'"value\[0\]"'):
        loads(line, "jsonl")
