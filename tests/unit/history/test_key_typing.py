"""The key-typing rule for JSON poll maps (object keys are always strings), both directions."""

from __future__ import annotations

import io
import json

import pytest

from kmon.history import Op, dump_jsonl, loads
from kmon.history.model import poll, send
from kmon.history.wire import KeyTyping


def jsonl(*ops: dict) -> list[Op]:
    return loads("\n".join(json.dumps(op) for op in ops), "jsonl")


def sent(key, index=0) -> dict:
    return {
        "index": index,
        "process": 0,
        "type": "ok",
        "f": "send",
        "value": [["send", key, [0, 5]]],
    }


def polled(key_text: str, index=1) -> dict:
    return {
        "index": index,
        "process": 1,
        "type": "ok",
        "f": "poll",
        "value": [["poll", {key_text: [[0, 5]]}]],
    }


def polled_key(ops: list[Op]):
    (key,) = ops[-1].reads()
    return key


def test_int_keyed_history_polls_int_keys():
    key = polled_key(jsonl(sent(1), polled("1")))
    assert key == 1 and type(key) is int


def test_string_keyed_history_polls_string_keys_even_when_they_look_numeric():
    key = polled_key(jsonl(sent("1"), polled("1")))
    assert key == "1" and type(key) is str


def test_assign_subscribe_rebalance_and_placement_keys_are_evidence_too():
    assign = {"index": 0, "process": 1, "type": "ok", "f": "assign", "value": ["7"]}
    assert polled_key(jsonl(assign, polled("7"))) == "7"
    rebalance = {**polled("7", 0), "rebalance-log": [{"type": "assigned", "keys": ["7"]}]}
    assert polled_key(jsonl(rebalance)) == "7"  # the op's own typed keys count
    placed = {**polled("7", 0), "placements": [{"key": "7", "topic": "t", "partition": 0}]}
    assert polled_key(jsonl(placed)) == "7"


def test_commit_and_start_keys_are_evidence_too():
    committed = {"index": 0, "process": 1, "type": "ok", "f": "commit",
                 "value": [["commit", "7", 3]]}
    assert polled_key(jsonl(committed, polled("7"))) == "7"
    started = {**polled("7", 0), "starts": [{"key": "7", "offset": 0, "source": "reset"}]}
    assert polled_key(jsonl(started)) == "7"


def test_an_unseen_numeric_key_is_an_int_and_other_strings_stay_strings():
    assert polled_key(jsonl(polled("42", 0))) == 42
    assert polled_key(jsonl(sent("x"), polled("x"))) == "x"
    assert polled_key(jsonl(polled("007", 0))) == "007"  # not canonical: a string


def test_the_int_wins_when_both_spellings_were_sent():
    ops = jsonl(sent(1, 0), sent("1", 1), polled("1", 2))
    assert type(polled_key(ops)) is int


def test_evidence_is_what_came_before_in_file_order():
    # A poll of "1" before any typed mention reads as an int; after "1" is sent, as a string.
    ops = jsonl(polled("1", 0), sent("1", 1), polled("1", 2))
    assert [type(k) for op in (ops[0], ops[2]) for k in op.reads()] == [int, str]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("42", 42),
        ("-7", -7),
        ("007", "007"),
        ("+1", "+1"),
        ("1.0", "1.0"),
        ("-0", "-0"),
        (" 1", " 1"),
        ("١", "١"),
        ("1_000", "1_000"),
        ("", ""),
    ],
)
def test_canonical_decimal_rule(text, expected):
    assert KeyTyping().read(text) == expected


def test_edn_keeps_key_types_without_the_rule():
    ops = loads(
        '{:index 0, :type :ok, :process 0, :f :poll, :value [[:poll {"1" [[0 5]], 2 [[0 6]]}]]}',
        "edn",
    )
    assert set(ops[0].reads()) == {"1", 2}


def test_writer_uses_the_typed_poll_form_only_where_the_object_form_would_misread():
    ops = [
        Op(0, 0, 0, "ok", "send", [send(1, 5, 0)]),
        Op(1, 0, 1, "ok", "poll", [poll({1: [(0, 5)]})]),  # object form reads back as int 1
        Op(2, 0, 1, "ok", "poll", [poll({"1": [(0, 5)]})]),  # "1" would read back as int 1
        Op(3, 0, 1, "ok", "poll", [poll({"x": [(0, 5)]})]),
    ]
    buf = io.StringIO()
    dump_jsonl(ops, buf)
    lines = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert [line["value"][0][1] for line in lines[1:]] == [
        {"1": [[0, 5]]},
        [["1", [[0, 5]]]],
        {"x": [[0, 5]]},
    ]
    assert loads(buf.getvalue(), "jsonl") == ops


def test_writer_keeps_an_int_key_exact_in_a_string_keyed_history():
    ops = [
        Op(0, 0, 0, "ok", "send", [send("1", 5, 0)]),
        Op(1, 0, 1, "ok", "poll", [poll({1: [(0, 5)], "1": [(0, 5)]})]),
    ]
    buf = io.StringIO()
    dump_jsonl(ops, buf)
    assert loads(buf.getvalue(), "jsonl") == ops
