"""Jepsen's history.edn: the real op shapes of the Kafka/Redpanda queue workload, and its errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from kmon.history import HistoryError, KeyPlacement, Op, OpMeta, Rebalance, load, loads
from kmon.history.edn import BATCH, iter_edn
from kmon.history.model import Start, commit, poll, send

# Hand-written in the shape of a Jepsen queue-workload history.edn (one op map per line, keys in
# Jepsen's print order, a record tag, a rebalance log, nemesis ops with sets, a Jepsen abort error
# map, an info send with :error :timeout, a crash).
EXCERPT = (Path(__file__).parent / "data" / "jepsen_queue_excerpt.edn").read_text()

EXPECTED = [
    Op(0, 1200, 0, "invoke", "assign", [3, 4], meta=OpMeta(seek_to_beginning=True)),
    Op(1, 1900, 0, "ok", "assign", [3, 4], meta=OpMeta(seek_to_beginning=True)),
    Op(2, 2100, 1, "invoke", "send", [send(3, 20), send(4, 21)]),
    Op(3, 2500, 1, "ok", "send", [send(3, 20, 11), send(4, 21, 7)]),
    Op(4, 2600, 0, "invoke", "poll", [poll()]),
    Op(
        5,
        3100,
        0,
        "ok",
        "poll",
        [poll({3: [(11, 20)], 4: []})],
        rebalance_log=(Rebalance("revoked", (4,)), Rebalance("assigned", (3,))),
    ),
    Op(
        6, 3300, "nemesis", "info", "start-partition", ["isolated", {"n1": frozenset({"n2", "n3"})}]
    ),
    Op(7, 3400, 2, "invoke", "txn", [send(3, 22), poll(), send(4, 23)]),
    Op(
        8,
        3900,
        2,
        "fail",
        "txn",
        [send(3, 22, 12), poll({}), send(4, 23)],
        meta=OpMeta(
            deliberate_abort=True,
            error='{"type":"abort","abort-ok?":true,"definite?":true,'
            '"body-error":{"type":"intentional-abort"}}',
        ),
    ),
    Op(9, 4000, 1, "invoke", "send", [send(3, 24)]),
    Op(10, 9000, 1, "info", "send", [send(3, 24)], meta=OpMeta(error="timeout")),
    Op(11, 9100, 5, "invoke", "crash", None),
    Op(12, 9200, 5, "info", "crash", None),
    Op(13, 9300, 6, "invoke", "subscribe", [3, 4]),
]


def test_jepsen_queue_history_excerpt():
    assert loads(EXCERPT, "edn") == EXPECTED


def test_load_dispatches_edn_by_suffix(tmp_path):
    path = tmp_path / "history.edn"
    path.write_text(EXCERPT)
    assert load(path) == EXPECTED


def test_a_single_vector_of_ops_reads_the_same():
    assert loads("[" + EXCERPT + "]\n", "edn") == EXPECTED
    assert loads("[\n" + EXCERPT.replace("\n", ",\n") + "]", "edn") == EXPECTED


def test_pretty_printed_multi_line_ops_with_comments_read_the_same():
    text = EXCERPT.replace(", :", ",\n  :")
    text = "; a Jepsen history\n" + text.replace("{:index 4,", "; poll next\n{:index 4,")
    assert loads(text, "edn") == EXPECTED


def test_keywords_become_strings_and_string_keys_stay_strings():
    text = (
        "{:type :ok, :process 0, :f :txn,"
        ' :value [[:send :x [0 :a]] [:poll {:x [[0 :a]], "56" [[4 5]]}]]}'
    )
    (op,) = loads(text, "edn")
    assert op.value == [send("x", "a", 0), poll({"x": [(0, "a")], "56": [(4, 5)]})]
    assert op.index == 0  # no :index: dense from 0


def test_strings_with_brackets_chars_and_escapes_do_not_confuse_the_scanner():
    text = (
        '{:index 0, :type :info, :process :nemesis, :f :note, :value ["]} \\" ;" \\] \\{]}\n'
        '{:index 1, :type :info, :process :nemesis, :f :note, :value "multi\nline"}\n'
    )
    ops = loads(text, "edn")
    assert [op.value for op in ops] == [[']} " ;', "]", "{"], "multi\nline"]


def test_probe_extras_in_edn():
    text = (
        '{:index 0, :type :ok, :process 1, :f :send, :value [[:send 3 [0 1]]], :probe "p",'
        ' :transactional-id "t-1", :txn-seq 4, :deliberate-abort true,'
        ' :placements [{:key 3, :topic "kmon", :partition 2, :leader 1, :leader-epoch 7}]}'
    )
    assert loads(text, "edn")[0].meta == OpMeta(
        probe="p",
        transactional_id="t-1",
        txn_seq=4,
        deliberate_abort=True,
        placements={3: KeyPlacement("kmon", 2, 1, 7)},
    )


def test_commit_ops_group_and_starts_in_edn():
    # Jepsen has none of these; kmon reads them in the same shapes as JSON, keywords or not.
    text = (
        '{:index 0, :type :ok, :process 1, :f :commit, :value [[:commit 3 12] [:commit "k" 0]],'
        ' :probe "p", :group "g"}\n'
        '{:index 1, :type :ok, :process 1, :f :txn, :value [[:send 3 [0 1]] [:commit 3 13]]}\n'
        '{:index 2, :type :ok, :process 1, :f :assign, :value [3 "k"], :group "g",'
        ' :starts [{:key 3, :offset 12, :source "committed"} {:key "k", :offset nil,'
        ' :source :client}]}'
    )
    ops = loads(text, "edn")
    assert ops[0].value == [commit(3, 12), commit("k", 0)]
    assert ops[0].meta == OpMeta(probe="p", group="g")
    assert ops[1].commits() == [(3, 13)]
    assert ops[2].meta == OpMeta(group="g", starts={3: Start(12, "committed"),
                                                    "k": Start(None, "client")})


def many(n: int) -> list[str]:
    return [
        f"{{:index {i}, :type :invoke, :process 0, :f :poll, :value [[:poll]]}}" for i in range(n)
    ]


def test_more_ops_than_one_batch_stream_in_order():
    ops = list(iter_edn(line + "\n" for line in many(2 * BATCH + 3)))
    assert [op.index for op in ops] == list(range(2 * BATCH + 3))


def edn_error(text: str) -> str:
    with pytest.raises(HistoryError) as e:
        loads(text, "edn")
    return str(e.value)


def test_a_syntax_error_deep_in_a_later_batch_names_its_line():
    lines = many(3 * BATCH)
    lines[BATCH + 40] = "{:index 999, :type :ok :process}"  # odd number of map terms
    assert edn_error("\n".join(lines)).startswith(f"line {BATCH + 41}: invalid EDN")


def test_field_errors_name_the_line_in_edn():
    lines = many(3)
    lines[2] = "{:index 2, :type :okk, :process 0, :f :poll}"
    assert edn_error("\n".join(lines)) == (
        'line 3: field "type": expected one of invoke/ok/fail/info, got "okk"'
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "{:index 0}\n#unknown/tag {:a 1}\n",
            "line 2: invalid EDN: Don't know how to handle tag #unknown/tag",
        ),
        (
            "{:index 0, :type :ok, :process 0, :f :poll}\n{:index 1,\n :type",
            "line 2: invalid EDN: EOF Reached",
        ),
        ("{:index 0, :type :ok, :process 0, :f :poll}\n}\n", "line 2: unbalanced closing bracket"),
        ("[{:index 0, :type :ok, :process 0, :f :poll}\n", "line 1: unterminated vector of ops"),
        (
            "[{:index 0, :type :ok, :process 0, :f :poll}]\n{:index 1}",
            "line 2: text after the vector of ops",
        ),
        ("42\n", "line 1: expected an op (an object/map), got 42"),
        (
            "42 {:index 0, :type :ok, :process 0, :f :poll}\n",
            "line 1: expected one op map, found 2 values",
        ),
        (
            '{:index 0, :type :ok, :process 0, :f :poll, :value "open',
            "line 1: invalid EDN: Illegal character",
        ),
    ],
)
def test_edn_syntax_errors(text, message):
    assert edn_error(text).startswith(message)  # the parser's own words follow


def test_bytes_lines_are_decoded_as_utf8():
    assert list(iter_edn([b'{:type :ok, :process 0, :f :note, :value "\xc3\xa9"}'])) == [
        Op(0, 0, 0, "ok", "note", "\u00e9")
    ]
