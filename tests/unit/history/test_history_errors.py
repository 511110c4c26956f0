"""Malformed input raises HistoryError naming the line (1-based) and the field."""

from __future__ import annotations

import json

import pytest

from kmon.history import HistoryError, iter_jsonl, load, loads

OK = {"index": 0, "time": 0, "process": 0, "type": "ok", "f": "poll", "value": [["poll", {}]]}


def jsonl_error(*ops) -> str:
    lines = [op if isinstance(op, str) else json.dumps(op) for op in ops]
    with pytest.raises(HistoryError) as e:
        loads("\n".join(lines), "jsonl")
    return str(e.value)


def test_unknown_type_names_line_and_field():
    bad = {**OK, "index": 2, "type": "okk"}
    assert jsonl_error(OK, {**OK, "index": 1}, bad) == (
        'line 3: field "type": expected one of invoke/ok/fail/info, got "okk"'
    )


def test_unknown_f_is_not_an_error():
    assert loads(json.dumps({**OK, "f": "start-partition", "value": None}), "jsonl")[0].f == (
        "start-partition"
    )


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"type": None}, 'field "type": expected one of invoke/ok/fail/info, got null'),
        ({"f": 3}, 'field "f": expected a string, got 3'),
        ({"process": 1.5}, 'field "process": expected an integer or a string, got 1.5'),
        ({"process": True}, 'field "process": expected an integer or a string, got true'),
        ({"index": -1}, 'field "index": expected an integer >= 0, got -1'),
        ({"index": "3"}, 'field "index": expected an integer >= 0, got "3"'),
        ({"time": 1.5}, 'field "time": expected an integer, got 1.5'),
        ({"value": {"a": 1}}, 'field "value": expected a list of micro-ops, got {"a":1}'),
        (
            {"value": [["poll", {}], ["r", 1, None]]},
            'field "value[1]": expected ["send", key, value], ["poll", ...], '
            '["commit", key, offset], ["share-read", key, records] or '
            '["ack", key, offset, outcome], got ["r",1,null]',
        ),
        (
            {"value": [["send", 1.5, 2]]},
            'field "value[0]": expected a key (integer or string), got 1.5',
        ),
        (
            {"value": [["send", 1, [0, None]]]},
            'field "value[0]": expected a value (integer or string), got null',
        ),
        ({"value": [["send", 1, [0]]]}, 'field "value[0]": expected [offset, value], got [0]'),
        ({"value": [["send", 1, ["0", 2]]]}, 'field "value[0]": expected an integer, got "0"'),
        (
            {"value": [["send", 1]]},
            'field "value[0]": expected ["send", key, value], got ["send",1]',
        ),
        (
            {"value": [["poll", {"1": [[0]]}]]},
            'field "value[0]": expected [offset, value], got [0]',
        ),
        (
            {"value": [["poll", {"1": 5}]]},
            'field "value[0]": expected a list of [offset, value], got 5',
        ),
        (
            {"value": [["poll", [[1, []], [1, []]]]]},
            'field "value[0]": key 1 appears twice in one poll',
        ),
        ({"value": [["poll", 3]]}, 'field "value[0]": expected a map of key to records, got 3'),
        (
            {"f": "assign", "value": [1, [2]]},
            'field "value[1]": expected a key (integer or string), got [2]',
        ),
        (
            {"rebalance-log": 7},
            'field "rebalance-log": expected a list of rebalance events, got 7',
        ),
        (
            {"rebalance-log": [{"type": "assigned", "keys": [None]}]},
            'field "rebalance-log": expected a key (integer or string), got null',
        ),
        ({"probe": 5}, 'field "probe": expected a string, got 5'),
        ({"txn-seq": "1"}, 'field "txn-seq": expected an integer, got "1"'),
        ({"deliberate-abort": 1}, 'field "deliberate-abort": expected true or false, got 1'),
        (
            {"seek-to-beginning?": "yes"},
            'field "seek-to-beginning?": expected true or false, got "yes"',
        ),
        (
            {"placements": [{"key": 1, "partition": 0}]},
            'field "placements[0].topic": expected a string, got null',
        ),
        (
            {"placements": [{"key": 1, "topic": "t", "partition": -1}]},
            'field "placements[0].partition": expected an integer >= 0, got -1',
        ),
        (
            {"placements": {"1": {}}},
            'field "placements": expected a list of placements, got {"1":{}}',
        ),
        (
            {"f": "commit", "value": [["commit", 1]]},
            'field "value[0]": expected ["commit", key, offset], got ["commit",1]',
        ),
        (
            {"f": "commit", "value": [["commit", None, 4]]},
            'field "value[0]": expected a key (integer or string), got null',
        ),
        (
            {"value": [["commit", 1, "4"]]},
            'field "value[0]": expected an integer, got "4"',
        ),
        ({"group": 3}, 'field "group": expected a string, got 3'),
        (
            {"starts": [{"key": 1, "offset": 0}]},
            'field "starts[0].source": expected a string, got null',
        ),
        (
            {"starts": [{"key": 1, "offset": 1.5, "source": "reset"}]},
            'field "starts[0].offset": expected an integer, got 1.5',
        ),
        (
            {"starts": [{"key": 1, "source": "client"}, {"key": 1, "source": "client"}]},
            'field "starts[1]": key 1 started twice',
        ),
        ({"starts": {"1": {}}}, 'field "starts": expected a list of starts, got {"1":{}}'),
    ],
)
def test_field_errors(patch, message):
    assert jsonl_error({**OK, **patch}) == f"line 1: {message}"


def test_missing_required_fields():
    for name in ("type", "f", "process"):
        op = {k: v for k, v in OK.items() if k != name}
        assert jsonl_error(op) == f'line 1: field "{name}": missing'


def test_indices_must_increase():
    assert jsonl_error(OK, {**OK, "index": 5}, {**OK, "index": 5}) == (
        'line 3: field "index": expected an index above the previous op\'s 5, got 5'
    )


def test_jsonl_syntax_and_shape_errors():
    assert jsonl_error(OK, '{"index": 1,').startswith("line 2: invalid JSON: Expecting")
    assert jsonl_error("[1, 2]") == "line 1: expected an op (an object/map), got [1,2]"


def test_blank_lines_count_but_are_skipped():
    assert jsonl_error(OK, "", "  ", {**OK, "index": 1, "type": "?"}).startswith("line 4: ")


def test_bytes_lines_must_be_utf8():
    lines = [json.dumps(OK).encode(), b'{"index": 1, "type": "\xff"}']
    with pytest.raises(HistoryError, match=r"^line 2: not UTF-8 text"):
        list(iter_jsonl(lines))


def json_error(text: str) -> str:
    with pytest.raises(HistoryError) as e:
        loads(text, "json")
    return str(e.value)


def test_json_array_errors_name_the_line_each_op_starts_on():
    text = '[\n  {"index": 0, "process": 0, "type": "ok", "f": "poll"},\n  {\n    "index": 1,\n'
    text += '    "process": 0,\n    "type": "nope", "f": "poll"\n  }\n]\n'
    assert json_error(text) == (
        'line 3: field "type": expected one of invoke/ok/fail/info, got "nope"'
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"index": 0}', "line 1: expected a JSON array of ops"),
        (
            "[\n" + json.dumps(OK) + "\n" + json.dumps(OK) + "]",
            "line 3: invalid JSON: expected ',' or ']' after an op",
        ),
        ("[\n" + json.dumps(OK) + "\n] x", "line 3: invalid JSON: text after the array of ops"),
        ("[\n" + json.dumps(OK) + ",\n]", "line 3: invalid JSON: Expecting value (column 1)"),
        ('[\n  {"index": 0,\n  "type": }\n]', "line 3: invalid JSON: Expecting value (column 11)"),
        ("", "line 1: expected a JSON array of ops"),
    ],
)
def test_json_array_syntax_errors(text, message):
    assert json_error(text) == message


def test_an_empty_json_array_is_an_empty_history():
    assert loads(" [ ] \n", "json") == []


def test_load_names_the_file(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_text(json.dumps(OK) + "\n" + json.dumps({**OK, "index": 1, "type": "okk"}) + "\n")
    with pytest.raises(HistoryError) as e:
        load(path)
    assert str(e.value) == (
        f'{path}: line 2: field "type": expected one of invoke/ok/fail/info, got "okk"'
    )
    assert (e.value.line, e.value.field, e.value.path) == (2, "type", str(path))


def test_load_reports_encoding_errors_on_their_line(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_bytes(json.dumps(OK).encode() + b'\n{"type": "\xc3"}\n')
    with pytest.raises(HistoryError, match=r"h\.jsonl: line 2: not UTF-8 text"):
        load(path)


def test_load_rejects_unknown_suffixes_and_missing_files(tmp_path):
    with pytest.raises(HistoryError, match=r"unknown history format '\.txt'"):
        load(tmp_path / "h.txt")
    with pytest.raises(HistoryError, match=r"missing\.json: cannot read: No such file"):
        load(tmp_path / "missing.json")
