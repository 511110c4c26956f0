"""Avro op events: round trips, headers, dead-letter errors, reader/writer schema evolution."""

from __future__ import annotations

import io
import json

import fastavro
import pytest

from kmon.history import KeyPlacement, Op, OpMeta, Rebalance, avro
from kmon.history.avro import DecodeError, EncodeError, decode_op, encode_op
from kmon.history.model import ACCEPT, REJECT, Start, ack, commit, poll, send, share_read

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
        Op(7, 8, 4, "invoke", "commit", [commit(1, 13), commit("k", 0)],
           meta=OpMeta(probe="p", group="g")),
        Op(8, 9, 4, "ok", "commit", [commit(1, 13)], meta=OpMeta(probe="p", group="g")),
        Op(9, 10, 5, "ok", "txn", [send(1, 7, 14), poll({2: [(3, 9)]}), commit(2, 4)],
           meta=OpMeta(probe="p", transactional_id="t", txn_seq=1, group="g")),
        Op(10, 11, 5, "ok", "assign", [1, "k", 3], meta=OpMeta(
            probe="p", group="g",
            starts={1: Start(13, "committed"), "k": Start(0, "reset"), 3: Start(None, "client")})),
        Op(11, 12, 5, "ok", "poll", [poll({1: [(13, 8)]})], rebalance_log=(
            Rebalance("assigned", (1,)),), meta=OpMeta(probe="p", group="g",
                                                        starts={1: Start(13, "restored")})),
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
    assert decode_op(encode_op(Op(0, 0, 0, "ok", "commit", None))).value == []
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
    assert avro.schema_header_value() == b"op-event/3"
    assert avro.kafka_headers() == [("kmon-schema", b"op-event/3")]
    assert avro.version_from_headers([("trace", b"x"), ("kmon-schema", b"op-event/1")]) == 1
    assert avro.version_from_headers({"kmon-schema": "op-event/2"}) == 2
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
    with pytest.raises(DecodeError, match="unknown op event schema version 4"):
        decode_op(encode_op(PROBE_TXN), version=4)


def test_every_packaged_schema_version_parses_and_names_its_version():
    assert avro.schema_versions()[0] == 1 and avro.schema_versions()[-1] == avro.SCHEMA_VERSION
    for version in avro.schema_versions():
        schema = json.loads(avro.schema_json(version))
        (field,) = [f for f in schema["fields"] if f["name"] == "schema_version"]
        assert field["default"] == version
        avro.load_schema(version)


def test_a_commit_mop_without_key_or_offset_is_a_decode_error():
    for missing in ("key", "offset"):
        record = avro.op_to_record(Op(0, 0, 0, "ok", "commit", [commit(1, 2)]))
        record["mops"][0][missing] = None
        with pytest.raises(DecodeError, match="commit mop without key or offset"):
            decode_op(write(json.loads(avro.schema_json()), record))


def test_an_ack_mop_without_key_offset_or_outcome_is_a_decode_error():
    for missing in ("key", "offset", "outcome"):
        record = avro.op_to_record(Op(0, 0, 0, "ok", "ack", [ack(1, 2, ACCEPT)]))
        record["mops"][0][missing] = None
        with pytest.raises(DecodeError, match="ack mop without key, offset or outcome"):
            decode_op(write(json.loads(avro.schema_json()), record))


# ---------------------------------------------------------------------------------------------
# Evolution: v2 appended fields with defaults (group, starts) and enum symbols (the commit op
# and micro-op) to v1, and renamed nothing. Readers keep every older schema.


def schema(version: int) -> dict:
    return json.loads(avro.schema_json(version))


def write(schema: dict, record: dict) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return buf.getvalue()


def read(data: bytes, writer: dict, reader: dict) -> dict:
    return fastavro.schemaless_reader(
        io.BytesIO(data), fastavro.parse_schema(writer), fastavro.parse_schema(reader)
    )


def encode_v1(op: Op) -> bytes:
    """``op`` as an old probe wrote it (v1 has no group, starts or commits)."""
    record = {**avro.op_to_record(op), "schema_version": 1}
    del record["group"], record["starts"]
    for m in record["mops"]:
        del m["share"], m["outcome"]
    return write(schema(1), record)


def encode_v2(op: Op) -> bytes:
    """``op`` as a probe before v3 wrote it (no share ops)."""
    record = {**avro.op_to_record(op), "schema_version": 2}
    for m in record["mops"]:
        del m["share"], m["outcome"]
    return write(schema(2), record)


def test_v3_only_appends_to_v2():
    v2, v3 = schema(2), schema(3)
    assert [f["name"] for f in v3["fields"]] == [f["name"] for f in v2["fields"]]
    mop2, mop3 = (_mop_fields(s) for s in (v2, v3))
    assert mop3[: len(mop2)] == mop2 and mop3[len(mop2):] == ["share", "outcome"]
    assert symbols(v3, "OpF") == [*symbols(v2, "OpF"), "share_poll", "ack"]
    assert symbols(v3, "MopF") == [*symbols(v2, "MopF"), "share_read", "ack"]


def _mop_fields(s: dict) -> list[str]:
    (mops,) = [f for f in s["fields"] if f["name"] == "mops"]
    return [f["name"] for f in mops["type"]["items"]["fields"]]


def symbols(s: dict, name: str) -> list[str]:
    found: list[list[str]] = []

    def walk(x: object) -> None:
        if isinstance(x, dict):
            if x.get("type") == "enum" and x.get("name") == name:
                found.append(x["symbols"])
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(s)
    return found[0]


def test_v2_events_still_decode_and_share_ops_round_trip_in_v3():
    assert decode_op(encode_v2(PROBE_TXN), version=2) == PROBE_TXN
    share = Op(3, 9, 1, "ok", "share-poll", [share_read(5, [(7, "v", 2)]), share_read(6)],
               meta=OpMeta(probe="p", group="sg"))
    acks = Op(4, 10, 1, "info", "ack", [ack(5, 7, REJECT)], meta=OpMeta(probe="p", group="sg"))
    assert decode_op(encode_op(share)) == share and decode_op(encode_op(acks)) == acks


def test_v2_only_appends_to_v1():
    v1, v2 = schema(1), schema(2)
    assert [f["name"] for f in v2["fields"]][: len(v1["fields"])] == [
        f["name"] for f in v1["fields"]
    ]
    assert [f["name"] for f in v2["fields"]][len(v1["fields"]) :] == ["group", "starts"]
    for enum in ("OpF", "MopF"):
        assert symbols(v2, enum) == [*symbols(v1, enum), "commit"], enum


def test_v1_events_still_decode_with_no_group_and_no_starts():
    assert decode_op(encode_v1(PROBE_TXN), version=1) == PROBE_TXN
    record = read(encode_v1(PROBE_TXN), schema(1), schema(2))
    assert (record["group"], record["starts"], record["schema_version"]) == (None, [], 1)
    assert avro.decode_event(encode_v1(PROBE_TXN), [("kmon-schema", b"op-event/1")]) == PROBE_TXN


def test_v2_events_read_by_a_v1_reader_drop_the_new_fields():
    back = read(encode_v2(PROBE_TXN), schema(2), schema(1))
    assert "group" not in back and "starts" not in back
    assert avro.record_to_op({**back, "group": None, "starts": []}) == PROBE_TXN


def test_a_commit_op_resolves_to_unknown_for_a_v1_reader():
    data = encode_v2(Op(0, 0, 0, "ok", "commit", [], meta=OpMeta(probe="p", group="g")))
    back = read(data, schema(2), schema(1))
    assert (back["f"], back["mops"]) == ("unknown", [])
