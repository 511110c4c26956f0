"""The monitor's event reader (``kmon.history.events``) against the reference codec.

``read_event`` reads the op event's binary form by hand; ``decode_with_codec`` goes through
fastavro (``kmon.history.avro.decode_op``) and ``fragment.split``. On every event, valid or
not, of the current schema version and of v1 (what probes before v2 emit), both must give the
same fragments, placements, group, starts and clock, or the same dead-letter reason.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kmon.history import avro, events
from kmon.history.events import EventError, Placement, read_event, split_batch
from kmon.history.fragment import from_row, split, to_row
from kmon.history.model import MOP_FS, SHARE_FS, KeyPlacement, Op, OpMeta, Rebalance, Start
from kmon.streaming import decode
from kmon.synth import SynthConfig, healthy
from tests.unit.history.test_codec_properties import ops

V = avro.SCHEMA_VERSION
HEADER = avro.schema_header_value().decode()


def outcome(read: Any) -> tuple:
    """What a reader made of an event: its parts, or the dead-letter reason."""
    try:
        ev = read()
    except EventError as e:
        return ("dead", e.reason)
    return ("ok", ev.probe, ev.index, ev.time, ev.placements, ev.group, ev.starts,
            [(fr.key, to_row(fr)) for fr in ev.frags])


def both(data: bytes, version: int = V) -> tuple[tuple, tuple]:
    return (outcome(lambda: read_event(data, version)),
            outcome(lambda: events.decode_with_codec(data, version)))


def encode_v1(op: Op) -> bytes:
    """``op`` as a probe before schema v2 wrote it: no commit ops or mops, group or starts."""
    record = {**avro.op_to_record(op), "schema_version": 1}
    del record["group"], record["starts"]
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, avro.load_schema(1), record)
    return buf.getvalue()


def encode_v2(op: Op) -> bytes:
    """``op`` as a probe before schema v3 wrote it: no share ops or mops."""
    record = {**avro.op_to_record(op), "schema_version": 2}
    for m in record["mops"]:
        del m["share"], m["outcome"]
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, avro.load_schema(2), record)
    return buf.getvalue()


def v2_op(op: Op) -> Op:
    """``op`` reduced to what schema v2 can carry."""
    f = "crash" if op.f in SHARE_FS else op.f
    return Op(op.index, op.time, op.process, op.type, f, None if f == "crash" else op.value,
              op.rebalance_log, op.meta)


def v1_op(op: Op) -> Op:
    """``op`` reduced to what schema v1 can carry."""
    f = "crash" if op.f == "commit" or op.f in SHARE_FS else op.f
    value = [m for m in op.value or () if m[0] != "commit"] if f in MOP_FS else op.value
    meta = op.meta
    if meta is not None:
        meta = OpMeta(meta.probe, meta.transactional_id, meta.txn_seq, meta.deliberate_abort,
                      meta.error, meta.seek_to_beginning, meta.placements,
                      invoke_time=meta.invoke_time)
    return Op(op.index, op.time, op.process, op.type, f, value, op.rebalance_log, meta)


@settings(max_examples=400)
@given(ops())
def test_every_op_reads_as_the_reference_codec_reads_it(op: Op) -> None:
    fast, reference = both(avro.encode_op(op))
    assert fast == reference


@settings(max_examples=200)
@given(ops())
def test_every_v2_op_reads_as_the_reference_codec_reads_it(op: Op) -> None:
    fast, reference = both(encode_v2(v2_op(op)), 2)
    assert fast == reference


@settings(max_examples=200)
@given(ops())
def test_every_v1_op_reads_as_the_reference_codec_reads_it(op: Op) -> None:
    old = v1_op(op)
    fast, reference = both(encode_v1(old), 1)
    assert fast == reference
    if fast[0] == "ok":  # and it is what the old probe wrote
        assert fast == outcome(lambda: events.event_of(old))


@given(ops(), st.data())
def test_a_truncated_v1_event_is_undecodable(op: Op, data: st.DataObject) -> None:
    raw = encode_v1(v1_op(op))
    cut = data.draw(st.integers(0, len(raw) - 1))
    assert outcome(lambda: read_event(raw[:cut], 1)) == ("dead", events.UNDECODABLE)


@given(ops(), st.data())
def test_a_truncated_event_is_undecodable(op: Op, data: st.DataObject) -> None:
    raw = avro.encode_op(op)
    cut = data.draw(st.integers(0, len(raw) - 1))
    assert outcome(lambda: read_event(raw[:cut], V)) == ("dead", events.UNDECODABLE)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(ops(), st.data())
def test_a_corrupted_event_reads_as_the_reference_codec_reads_it(
        op: Op, data: st.DataObject) -> None:
    raw = bytearray(avro.encode_op(op))
    for _ in range(data.draw(st.integers(1, 3))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    fast, reference = both(bytes(raw))
    if fast != reference:
        # fastavro accepts some bytes Avro's spec forbids: a negative union branch or enum
        # symbol (it indexes them like a Python list) or a varint beyond 64 bits. This reader
        # refuses them, as the JVM's Avro does. Anything else is a difference in reading.
        assert fast == ("dead", events.UNDECODABLE)
        assert not _canonical(bytes(raw))


def _canonical(raw: bytes) -> bool:
    """Whether ``raw`` is exactly how Avro encodes the record fastavro reads in it."""
    schema = avro.load_schema()
    record = fastavro.schemaless_reader(io.BytesIO(raw), schema, None)
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schema, record)
    return buf.getvalue() == raw


def test_a_synthetic_run_splits_as_split_does() -> None:
    ops_ = list(healthy(3_000, SynthConfig(keys=6, processes=4, keys_per_process=3)))
    for op in ops_:
        assert outcome(lambda op=op: read_event(avro.encode_op(op), V)) == outcome(
            lambda op=op: events.event_of(op))


def _fields() -> dict[str, Any]:
    return {"index": 3, "time": 1_000, "process": 1, "type": "ok", "f": "send",
            "value": [("send", 1, 5, 0)], "meta": OpMeta(probe="p")}


def _event(**fields: Any) -> bytes:
    return avro.encode_op(Op(**{**_fields(), **fields}))


@pytest.mark.parametrize(("fields", "reason"), [
    ({"index": -1}, events.NEGATIVE_INDEX),
    ({"time": -5}, events.NEGATIVE_TIME),
    ({"value": [("send", 1, 5, -2)]}, events.NEGATIVE_OFFSET),
    ({"f": "poll", "value": [("poll", {1: [(4, 5), (-1, 6)]})]}, events.NEGATIVE_OFFSET),
    ({"f": "commit", "value": [("commit", 1, -1)]}, events.NEGATIVE_OFFSET),
    ({"f": "assign", "value": [1], "meta": OpMeta(probe="p", starts={1: Start(-3, "reset")})},
     events.NEGATIVE_OFFSET),
])
def test_contract_breaches_get_their_reason(fields: dict[str, Any], reason: str) -> None:
    assert both(_event(**fields)) == (("dead", reason), ("dead", reason))


def test_a_send_without_key_or_value_is_a_dead_letter() -> None:
    # The model cannot build one; change the send's value branch (long 5) to null by hand.
    raw = _event(value=[("send", 1, 77, 0)])
    i = raw.index(bytes([2, 154, 1]))  # value: branch 1 (long), then 77 zig-zag
    broken = raw[:i] + bytes([0]) + raw[i + 3:]
    assert outcome(lambda: read_event(broken, V)) == ("dead", events.SEND_WITHOUT_VALUE)


@pytest.mark.parametrize("missing", ["key", "offset"])
def test_a_commit_without_key_or_offset_is_a_dead_letter(missing: str) -> None:
    # The model cannot build one: write the record by hand.
    record = avro.op_to_record(Op(3, 1_000, 1, "ok", "txn", [("send", 1, 5, 0), ("commit", 2, 7)],
                                  meta=OpMeta(probe="p")))
    record["mops"][1][missing] = None
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, avro.load_schema(), record)
    assert both(buf.getvalue()) == (("dead", events.COMMIT_WITHOUT_OFFSET),) * 2


def test_group_starts_and_commits_are_read() -> None:
    starts = {1: Start(7, "committed"), "k": Start(None, "client")}
    raw = _event(f="assign", value=[1, "k"], meta=OpMeta(probe="p", group="g", starts=starts))
    ev = read_event(raw, V)
    assert (ev.group, ev.starts) == ("g", starts)
    # An offset commit may take effect from its invocation on: its invoke has fragments.
    invoke = read_event(_event(type="invoke", f="commit", value=[("commit", 1, 6)],
                               meta=OpMeta(probe="p", group="g")), V)
    assert (invoke.group, invoke.starts) == ("g", {})
    assert [(fr.key, fr.type, fr.group, fr.commits) for fr in invoke.frags] == [
        (1, "invoke", "g", [6])]
    assert [(fr.key, fr.group, fr.start) for fr in ev.frags] == [
        (1, "g", starts[1]), ("k", "g", starts["k"])]
    v1 = read_event(encode_v1(v1_op(Op(**{**_fields(), "meta": OpMeta(probe="p")}))), 1)
    assert (v1.group, v1.starts) == (None, {})


def test_trailing_bytes_and_a_wrong_version_are_dead_letters() -> None:
    raw = _event()
    assert outcome(lambda: read_event(raw + b"\x00", V)) == ("dead", events.UNDECODABLE)
    # schema_version is the first field: 2 -> 1 (zig-zag 2)
    assert outcome(lambda: read_event(b"\x02" + raw[1:], V)) == (
        "dead", events.VERSION_MISMATCH)
    assert outcome(lambda: read_event(raw, 1)) != outcome(lambda: read_event(raw, V))


def test_invokes_make_no_fragments_but_keep_their_clock_and_placements() -> None:
    raw = _event(type="invoke", value=[("send", 1, 5, None)],
                 meta=OpMeta(probe="p", placements={1: KeyPlacement("t", 4)}))
    ev = read_event(raw, V)
    assert (ev.index, ev.time, ev.frags, ev.placements) == (
        3, 1_000, [], [Placement(1, "t", 4, None, 3)])


def test_placements_carry_the_leader_broker() -> None:
    raw = _event(type="invoke", value=[("send", 1, 5, None)],
                 meta=OpMeta(probe="p", placements={1: KeyPlacement("t", 4, leader=2,
                                                                    leader_epoch=7)}))
    assert read_event(raw, V).placements == [Placement(1, "t", 4, 2, 3)]
    assert events.decode_with_codec(raw, V).placements == [Placement(1, "t", 4, 2, 3)]


def test_a_batch_keeps_each_keys_latest_placement_by_op_index() -> None:
    def op(index: int, leader: int) -> Op:
        return Op(index, index, 1, "invoke", "send", [("send", 1, index, None)],
                  meta=OpMeta(probe="p", placements={1: KeyPlacement("t", 0, leader)}))

    s = split_batch(_batch([op(5, 2), op(4, 1)]), [HEADER] * 2, [0] * 2, None)
    assert s.placements == {("p", 1): Placement(1, "t", 0, 2, 5)}  # 4 came later, is older


def _batch(ops_: list[Op]) -> list[bytes | None]:
    return [avro.encode_op(op) for op in ops_]


def test_a_batch_groups_fragments_by_probe_and_key_in_event_order() -> None:
    ops_ = [
        Op(1, 10, 1, "ok", "txn", [("send", 1, "a", 0), ("send", "k", 2, 1),
                                   ("poll", {1: [(0, "a")], "x": []})],
           rebalance_log=(Rebalance("assigned", (1, "y")),),
           meta=OpMeta(probe="p", invoke_time=4, placements={1: KeyPlacement("t", 1)})),
        Op(2, 20, 2, "ok", "assign", [1, 2], meta=OpMeta(probe="q")),
        Op(3, 30, 1, "ok", "poll", [("poll", {1: [(1, "b")]})], meta=OpMeta(probe="p")),
    ]
    s = split_batch(_batch(ops_), [HEADER] * 3, [0] * 3, None)
    want: dict[tuple, list] = {}
    for op in ops_:
        it = op.meta.invoke_time if op.meta.invoke_time is not None else None
        for fr in split(op, it):
            want.setdefault((op.meta.probe, fr.key), []).append(to_row(fr))
    assert {k: [to_row(fr) for fr in v] for k, v in s.groups.items()} == want
    assert list(s.groups) == list(want)  # first seen, first
    assert s.placements == {("p", 1): Placement(1, "t", 1, None, 1)}
    assert (s.dead, s.max_time) == ([], 30)


def test_a_batch_dead_letters_bad_rows_and_keeps_their_times_out_of_the_clock() -> None:
    good = Op(1, 5_000_000_000, 1, "ok", "send", [("send", 1, 5, 0)], meta=OpMeta(probe="p"))
    ahead = Op(2, 9_000_000_000, 1, "ok", "send", [("send", 1, 6, 1)], meta=OpMeta(probe="p"))
    values = [*_batch([good, ahead, good]), b"\x01 garbage", None]
    headers = [HEADER, HEADER, None, HEADER, HEADER]
    kafka_ms = [5_000, 5_000, 5_000, 5_000, 5_000]
    s = split_batch(values, headers, kafka_ms, max_skew_ns=1_000_000_000)
    assert s.dead == [(1, events.TIME_IN_FUTURE), (2, events.NO_HEADER),
                      (3, events.UNDECODABLE), (4, events.UNDECODABLE)]
    assert s.max_time == 5_000_000_000
    assert list(s.groups) == [("p", 1)]
    bad = split_batch(values[:1], ["op-event/99"], [0], None)
    assert bad.dead == [(0, events.UNKNOWN_VERSION)] and bad.max_time == -1


def test_fragments_pack_and_unpack() -> None:
    ops_ = list(healthy(500, SynthConfig(keys=3, processes=2, keys_per_process=2)))
    s = split_batch(_batch(ops_), [HEADER] * len(ops_), [0] * len(ops_), None)
    for (_, key), frags in s.groups.items():
        back = decode.unpack_fragments(key, decode.pack_fragments(frags))
        assert [(fr.key, to_row(fr)) for fr in back] == [(fr.key, to_row(fr)) for fr in frags]
        assert pickle.loads(decode.pack_fragments(frags)) == [to_row(fr) for fr in frags]


def test_a_share_poll_carries_its_placement_leader_to_the_fold() -> None:
    """``kmon.checker.share`` tells a share-partition leader change by the leaders the share
    polls' placements name: both readers put them on the fragments, and rows keep them."""
    from kmon.history.model import share_read

    op = Op(7, 70, 3, "ok", "share-poll", [share_read(1, [(5, "v5", 1)]), share_read(2, [])],
            meta=OpMeta(probe="p", group="sg", invoke_time=60,
                        placements={1: KeyPlacement("t", 1, 2), 2: KeyPlacement("t", 2)}))
    fast, reference = both(avro.encode_op(op))
    assert fast == reference
    ev = read_event(avro.encode_op(op), V)
    assert {fr.key: fr.leader for fr in ev.frags} == {1: 2, 2: -1}  # (2: no leader known)
    assert {fr.key: fr.leader for fr in split(op)} == {1: 2, 2: -1}
    fr = ev.frags[0]
    assert from_row(fr.key, to_row(fr)).leader == 2
    assert from_row(fr.key, to_row(fr)[:16]).leader == -1  # a row from before: none known
