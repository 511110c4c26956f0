"""Every Jepsen wire shape, and every kmon extra, read into the model (JSONL input)."""

from __future__ import annotations

import json

import pytest

from kmon.history import KeyPlacement, Op, OpMeta, Rebalance, loads, op_to_json
from kmon.history.model import Start, commit, poll, send


def jsonl(*ops: dict) -> list[Op]:
    return loads("\n".join(json.dumps(op) for op in ops), "jsonl")


def one(**fields) -> Op:
    base = {"index": 0, "time": 5, "process": 0, "type": "ok", "f": "txn"}
    return jsonl({**base, **fields})[0]


def test_op_fields_are_read_as_given():
    op = jsonl({"index": 7, "time": 123, "process": 3, "type": "info", "f": "send", "value": []})[0]
    assert op == Op(index=7, time=123, process=3, type="info", f="send", value=[])
    assert op.meta is None and op.rebalance_log == ()


@pytest.mark.parametrize(
    ("mop", "expected"),
    [
        (["send", 1, 10], send(1, 10)),  # as invoked
        (["send", 1, [4, 10]], send(1, 10, 4)),  # completed with its offset
        (["send", 1, [None, 10]], send(1, 10)),  # completed, offset unknown
        (["send", "k", "v"], send("k", "v")),  # strings stay strings
        (["send", 1, 4, 10], send(1, 10, 4)),  # Jepsen's documented 4-element form
        (["poll"], poll()),  # as invoked
        (["poll", None], poll()),
        (["poll", {}], poll({})),  # completed, nothing read
        (["poll", {"1": [[0, 10], [1, 11]]}], poll({1: [(0, 10), (1, 11)]})),
        (["poll", [[1, [[0, 10]]], ["x", [[3, "y"]]]]], poll({1: [(0, 10)], "x": [(3, "y")]})),
        (["commit", 1, 11], commit(1, 11)),  # an offset commit sent with the transaction
        (["commit", "k", 0], commit("k", 0)),
    ],
)
def test_micro_op_shapes(mop, expected):
    assert one(value=[mop]).value == [expected]


def test_a_txn_keeps_micro_op_order_and_the_model_accessors_work():
    op = one(value=[["send", 1, [4, 10]], ["poll", {"2": [[7, 70]]}], ["send", 2, [8, 80]]])
    assert op.value == [send(1, 10, 4), poll({2: [(7, 70)]}), send(2, 80, 8)]
    assert op.sends() == [(1, 10, 4), (2, 80, 8)]
    assert op.reads() == {2: [(7, 70)]}


def test_assign_and_subscribe_values_are_key_lists():
    assert one(f="assign", value=[3, "x"]).value == [3, "x"]
    assert one(f="subscribe", value=[1]).value == [1]


def test_missing_values_of_list_valued_fs_are_empty_lists():
    assert one(f="poll").value == []
    assert one(f="assign", value=None).value == []


def test_crash_and_nemesis_ops_keep_their_f_and_value():
    assert one(f="crash").value is None
    nemesis = one(process="nemesis", type="info", f="start-partition", value=["isolated", {}])
    assert (nemesis.process, nemesis.f, nemesis.value) == (
        "nemesis",
        "start-partition",
        ["isolated", {}],
    )


def test_jepsen_rebalance_log():
    log = [{"type": "revoked", "keys": [55, 4]}, {"type": "assigned", "keys": [53]}]
    op = one(**{"rebalance-log": log})
    assert op.rebalance_log == (Rebalance("revoked", (55, 4)), Rebalance("assigned", (53,)))
    assert op.rebalanced_keys() == {55, 4, 53}


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        ([{"kind": "lost", "keys": [1]}], (Rebalance("lost", (1,)),)),  # kmon's own name
        ([{"keys": [1, 2]}], (Rebalance("", (1, 2)),)),  # Jepsen's docstring shape
        (
            {"before": [{"type": "revoked", "keys": [1]}], "during": []},
            (Rebalance("revoked", (1,)),),
        ),
        ([3, 4], (Rebalance("", (3, 4)),)),  # a bare list of keys
        ([], ()),
        (None, ()),
    ],
)
def test_other_rebalance_log_shapes_are_read_leniently(log, expected):
    assert one(rebalance_log=log).rebalance_log == expected


def test_seek_to_beginning_spellings():
    for name in ("seek-to-beginning?", "seek-to-beginning", "seek_to_beginning"):
        op = one(f="assign", value=[1], **{name: True})
        assert op.meta == OpMeta(seek_to_beginning=True), name


def test_kmon_probe_extras():
    op = one(
        probe="p-1",
        **{
            "transactional-id": "kmon-p-1-3",
            "txn-seq": 17,
            "deliberate-abort": True,
            "error": "Broker: not leader",
            "placements": [
                {"key": 1, "topic": "kmon-a", "partition": 0, "leader": 2, "leader-epoch": 9},
                {"key": "x", "topic": "kmon-b", "partition": 3, "leader": None},
            ],
        },
    )
    assert op.meta == OpMeta(
        probe="p-1",
        transactional_id="kmon-p-1-3",
        txn_seq=17,
        deliberate_abort=True,
        error="Broker: not leader",
        placements={1: KeyPlacement("kmon-a", 0, 2, 9), "x": KeyPlacement("kmon-b", 3, None, None)},
    )


def test_snake_case_aliases_of_the_extras():
    op = one(
        transactional_id="t",
        txn_seq=1,
        deliberate_abort=True,
        placements=[{"key": 1, "topic": "t", "partition": 0, "leader_epoch": 4}],
    )
    assert op.meta == OpMeta(
        transactional_id="t",
        txn_seq=1,
        deliberate_abort=True,
        placements={1: KeyPlacement("t", 0, None, 4)},
    )


def test_non_string_errors_are_kept_as_compact_json_text():
    assert (
        one(error=["txn-in-error-state", "fenced"]).meta.error == '["txn-in-error-state","fenced"]'
    )


def test_jepsen_intentional_abort_marks_the_abort_deliberate():
    error = {"type": "abort", "definite?": True, "body-error": {"type": "intentional-abort"}}
    assert one(type="fail", error=error).meta.deliberate_abort is True
    assert one(type="fail", error={"type": "abort"}).meta.deliberate_abort is False
    explicit = one(type="fail", error=error, **{"deliberate-abort": False})
    assert explicit.meta.deliberate_abort is False


def test_ops_without_index_get_dense_indices_in_file_order():
    ops = jsonl(
        {"process": 0, "type": "invoke", "f": "poll"},
        {"process": 0, "type": "ok", "f": "poll"},
        {"index": 10, "process": 1, "type": "invoke", "f": "poll"},
        {"process": 1, "type": "ok", "f": "poll"},
    )
    assert [op.index for op in ops] == [0, 1, 10, 11]
    assert ops[0].time == 0  # time is optional too


def test_unknown_fields_are_ignored():
    assert one(**{"poll-ms": 1000, "end-process?": True}).value == []


def test_writer_emits_jepsen_shapes():
    op = Op(
        index=3,
        time=9,
        process=1,
        type="ok",
        f="txn",
        value=[send(1, 10, 4), send(1, 11), poll({2: [(0, 5)]})],
        rebalance_log=(Rebalance("assigned", (2,)),),
    )
    assert op_to_json(op) == {
        "index": 3,
        "time": 9,
        "type": "ok",
        "process": 1,
        "f": "txn",
        "value": [["send", 1, [4, 10]], ["send", 1, [None, 11]], ["poll", {"2": [[0, 5]]}]],
        "rebalance-log": [{"type": "assigned", "keys": [2]}],
    }
    invoke = Op(0, 0, 1, "invoke", "txn", [send(1, 10), poll()])
    assert op_to_json(invoke)["value"] == [["send", 1, 10], ["poll"]]


def test_writer_emits_probe_whenever_meta_is_set_so_meta_survives():
    bare = Op(0, 0, 1, "invoke", "assign", [1], meta=OpMeta())
    assert op_to_json(bare) == {
        "index": 0,
        "time": 0,
        "type": "invoke",
        "process": 1,
        "f": "assign",
        "value": [1],
        "probe": "",
    }
    assert jsonl(op_to_json(bare)) == [bare]


def test_commit_ops_carry_commit_micro_ops_the_group_and_the_model_accessor_works():
    op = one(f="commit", value=[["commit", 1, 5], ["commit", "x", 9]], group="g")
    assert op.value == [commit(1, 5), commit("x", 9)]
    assert op.commits() == [(1, 5), ("x", 9)]
    assert op.meta == OpMeta(group="g")
    assert one(f="commit").value == []


def test_a_txns_commit_micro_ops_sit_beside_its_sends_and_polls():
    op = one(value=[["send", 1, [4, 10]], ["poll", {"2": [[7, 70]]}], ["commit", 2, 8]])
    assert op.sends() == [(1, 10, 4)] and op.reads() == {2: [(7, 70)]}
    assert op.commits() == [(2, 8)]


def test_starts_keep_offset_source_and_key_types():
    op = one(
        f="assign",
        value=[1, "1", 2],
        group="g-assign",
        starts=[
            {"key": 1, "offset": 12, "source": "committed"},
            {"key": "1", "offset": 0, "source": "reset"},
            {"key": 2, "offset": None, "source": "client"},
        ],
    )
    assert op.meta == OpMeta(
        group="g-assign",
        starts={1: Start(12, "committed"), "1": Start(0, "reset"), 2: Start(None, "client")},
    )
    assert [type(k) for k in op.meta.starts] == [int, str, int]


def test_writer_emits_commit_mops_group_and_starts():
    op = Op(
        4,
        9,
        1,
        "ok",
        "commit",
        [commit(1, 5)],
        meta=OpMeta(probe="p", group="g", starts={"k": Start(None, "restored")}),
    )
    wire = op_to_json(op)
    assert wire["value"] == [["commit", 1, 5]]
    assert (wire["group"], wire["starts"]) == (
        "g",
        [{"key": "k", "offset": None, "source": "restored"}],
    )
    assert loads(json.dumps(wire), "jsonl") == [op]
