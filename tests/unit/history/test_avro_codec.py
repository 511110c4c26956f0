"""Avro op events: round trips, headers, dead-letter errors, reader/writer schema evolution."""

from __future__ import annotations

import copy
import io
import json

import fastavro
import pytest

from kmon.history import KeyPlacement, Op, OpMeta, Rebalance, avro
from kmon.history.avro import DecodeError, EncodeError, decode_op, encode_op
from kmon.history.model import poll, send

PROBE_TXN = Op(
    index=41,
    time=1_700_000_000_123_456_789,
    process=7,
    type="ok",
    f="txn",
    value=[send(1, 100, 12), send("k", "v", None), poll({1: [(12, 100)], "k": [(3, "v"), (4, 9)]})],
    rebalance_log=(Rebalance("assigned", (1, "k")), Rebalance("", ())),
    meta=OpMeta(
        probe="probe-a",
        transactional_id="kmon-probe-a-7",
        txn_seq=3,
        deliberate_abort=False,
        error=None,
        placements={1: KeyPlacement("kmon-q", 1, 2, 17), "k": KeyPlacement("kmon-r", 0)},
        invoke_time=999,
    ),
)


@pytest.mark.parametrize(
    "op",
    [
        PROBE_TXN,
        Op(0, 1, 0, "invoke", "poll", [poll()], meta=OpMeta(probe="p")),
        Op(1, 2, 0, "ok", "poll", [poll({})], meta=OpMeta(probe="p")),
        Op(2, 3, 1, "fail", "send", [send(5, 6, 0)], meta=OpMeta("p", "t", 9, True, "aborted")),
        Op(3, 4, 2, "ok", "assign", [1, "x"], meta=OpMeta(probe="p", seek_to_beginning=True)),
        Op(4, 5, 2, "ok", "subscribe", [3], meta=OpMeta(probe="p")),
        Op(5, 6, 3, "info", "crash", None, meta=OpMeta(probe="p", error="killed")),
        Op(6, -7, -1, "invoke", "send", [send(-(2**63), 2**63 - 1)]),  # meta None, extremes
    ],
)
def test_round_trip(op):
    assert decode_op(encode_op(op)) == op


def test_int_and_string_keys_and_values_keep_their_types():
    op = Op(
        0,
        0,
        0,
        "ok",
        "txn",
        [send(1, "1", 0), send("1", 1, 1), poll({1: [(0, "1")], "1": [(1, 1)]})],
    )
    back = decode_op(encode_op(op))
    assert [type(x) for m in back.value[:2] for x in m[1:3]] == [int, str, str, int]
    assert {type(k) for k in back.value[2][1]} == {int, str}
    assert back == op


def test_normalisations():
    assert decode_op(encode_op(Op(0, 0, 0, "ok", "poll", None))).value == []
    assert decode_op(encode_op(Op(0, 0, 0, "ok", "assign", None))).value == []
    assert decode_op(encode_op(Op(0, 0, 0, "info", "crash", "ignored"))).value is None
    assert decode_op(encode_op(Op(0, 0, 0, "ok", "poll", [], meta=OpMeta()))).meta is None


@pytest.mark.parametrize(
    ("op", "message"),
    [
        (
            Op(0, 0, "nemesis", "info", "start-partition", None),
            "process 'nemesis' is not an integer",
        ),
        (Op(0, 0, 1, "info", "start-partition", None), "f 'start-partition' is not one of"),
        (Op(0, 0, 1, "okk", "send", []), "okk"),
        (Op(0, 0, 1, "ok", "send", [send(1, 2**64)]), "18446744073709551616"),
        # (the mop built by hand: ``send``, compiled, type-checks its arguments itself)
        (Op(0, 0, 1, "ok", "send", [("send", 1, 1.5, None)]), "1.5"),
        (Op(0, 0, 1, "ok", "send", [send(True, 1)]), "True"),
        (Op(0, 2**63, 1, "ok", "send", []), "op 0"),
    ],
)
def test_unencodable_ops_raise_encode_error(op, message):
    with pytest.raises(EncodeError, match=message.replace("(", r"\(")):
        encode_op(op)


def test_every_truncation_is_a_decode_error():
    data = encode_op(PROBE_TXN)
    for n in range(len(data)):
        with pytest.raises(DecodeError):
            decode_op(data[:n])


def test_trailing_bytes_and_non_bytes_are_decode_errors():
    with pytest.raises(DecodeError, match="trailing bytes"):
        decode_op(encode_op(PROBE_TXN) + b"\x00")
    with pytest.raises(DecodeError, match="expected bytes, got str"):
        decode_op("not bytes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff" * 40,
        b"\x02" + b"\xff" * 12,
        b"garbage that is not avro at all",
        bytes(range(256)),
    ],
)
def test_garbage_is_a_decode_error(data):
    with pytest.raises(DecodeError):
        decode_op(data)


def test_header_convention():
    assert avro.SCHEMA_HEADER == "kmon-schema"
    assert avro.schema_header_value() == b"op-event/1"
    assert avro.kafka_headers() == [("kmon-schema", b"op-event/1")]
    assert avro.version_from_headers([("trace", b"x"), ("kmon-schema", b"op-event/1")]) == 1
    assert avro.version_from_headers({"kmon-schema": "op-event/1"}) == 1
    assert avro.decode_event(encode_op(PROBE_TXN), avro.kafka_headers()) == PROBE_TXN


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        (None, "no kmon-schema header"),
        ([("other", b"op-event/1")], "no kmon-schema header"),
        ([("kmon-schema", b"op-event/99")], "unknown op event schema version 99"),
        ([("kmon-schema", b"something/1")], "expected op-event/<n>"),
        ([("kmon-schema", None)], "expected op-event/<n>"),
        ([("kmon-schema", b"\xff")], "expected op-event/<n>"),
    ],
)
def test_bad_headers_are_decode_errors(headers, message):
    with pytest.raises(DecodeError, match=message):
        avro.version_from_headers(headers)


def test_unknown_versions_are_decode_errors():
    with pytest.raises(DecodeError, match="unknown op event schema version 2"):
        decode_op(encode_op(PROBE_TXN), version=2)


def test_every_packaged_schema_version_parses_and_names_its_version():
    assert avro.schema_versions()[0] == 1 and avro.schema_versions()[-1] == avro.SCHEMA_VERSION
    for version in avro.schema_versions():
        schema = json.loads(avro.schema_json(version))
        (field,) = [f for f in schema["fields"] if f["name"] == "schema_version"]
        assert field["default"] == version
        avro.load_schema(version)


# ---------------------------------------------------------------------------------------------
# Evolution: a v2 written here adds fields with defaults (and an f symbol) and renames nothing.


def v2_schema() -> dict:
    schema = copy.deepcopy(json.loads(avro.schema_json(1)))
    fields = schema["fields"]
    fields[0]["default"] = 2  # schema_version
    (f_field,) = [f for f in fields if f["name"] == "f"]
    f_field["type"]["symbols"].append("commit")
    fields.append({"name": "client_id", "type": ["null", "string"], "default": None})
    fields.append({"name": "attempt", "type": "int", "default": 0})
    return schema


def write(schema: dict, record: dict) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return buf.getvalue()


def read(data: bytes, writer: dict, reader: dict) -> dict:
    return fastavro.schemaless_reader(
        io.BytesIO(data), fastavro.parse_schema(writer), fastavro.parse_schema(reader)
    )


def test_v1_events_read_with_a_v2_reader_get_the_new_fields_defaults():
    v1 = json.loads(avro.schema_json(1))
    record = read(encode_op(PROBE_TXN), v1, v2_schema())
    assert (record["client_id"], record["attempt"], record["schema_version"]) == (None, 0, 1)
    assert avro.record_to_op(record) == PROBE_TXN


def test_v2_events_read_by_a_v1_reader_drop_the_new_fields():
    v2 = v2_schema()
    record = {**avro.op_to_record(PROBE_TXN), "schema_version": 2, "client_id": "c", "attempt": 3}
    back = read(write(v2, record), v2, json.loads(avro.schema_json(1)))
    assert "client_id" not in back and "attempt" not in back
    assert avro.record_to_op(back) == PROBE_TXN


def test_an_f_unknown_to_the_v1_reader_resolves_to_unknown():
    v2 = v2_schema()
    record = {**avro.op_to_record(PROBE_TXN), "schema_version": 2, "f": "commit"}
    back = avro.record_to_op(read(write(v2, record), v2, json.loads(avro.schema_json(1))))
    assert (back.f, back.value) == ("unknown", None)


def test_decode_op_resolves_an_old_version_to_the_current_schema(monkeypatch):
    # Pretend v2 has shipped: v1 events must still decode, through the v2 reader schema.
    v2 = fastavro.parse_schema(v2_schema())
    load = avro.load_schema
    monkeypatch.setattr(avro, "SCHEMA_VERSION", 2)
    monkeypatch.setattr(avro, "schema_versions", lambda: (1, 2))
    monkeypatch.setattr(
        avro, "load_schema", lambda version=2: v2 if version == 2 else load(version)
    )
    v1_event = encode_op_v1(PROBE_TXN, load(1))
    assert decode_op(v1_event, version=1) == PROBE_TXN


def encode_op_v1(op: Op, schema: dict) -> bytes:
    record = {**avro.op_to_record(op), "schema_version": 1}
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schema, record)
    return buf.getvalue()
