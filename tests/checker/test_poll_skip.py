"""poll-skip, nonmonotonic-poll, int-poll-skip, int-nonmonotonic-poll, and their exemptions."""

from tests.checker.helpers import check, history, op, poll, send

WRITES = [(0, "ok", "send", [send(1, v, o)]) for o, v in enumerate("abcde")]
# Another consumer reads everything, so only the order checks under test can fire.
READ_ALL = (9, "ok", "poll", [poll({1: list(enumerate("abcde"))})])


def test_successive_polls_in_order():
    h = history(
        *WRITES,
        (1, "ok", "poll", [poll({1: [(0, "a"), (1, "b")]})]),
        (1, "ok", "poll", [poll({1: [(2, "c")]})]),
    )
    assert check(h).errors == {}


def test_skip_between_polls():
    h = history(
        *WRITES,
        (1, "ok", "poll", [poll({1: [(0, "a")]})]),
        (1, "ok", "poll", [poll({1: [(3, "d"), (4, "e")]})]),
        (2, "ok", "poll", [poll({1: [(0, "a"), (1, "b"), (2, "c")]})]),
    )
    r = check(h)
    assert r.errors == {
        "poll-skip": [
            {
                "key": 1,
                "process": 1,
                "ops": [11, 13],
                "offsets": [0, 3],
                "values": ["a", "d"],
                "skipped": ["b", "c"],
                "delta": 3,
            }
        ]
    }


def test_gap_without_values_is_not_a_skip():
    # Offsets 1-2 hold a transaction marker and an aborted record: invisible, not skipped.
    h = history(
        (0, "ok", "send", [send(1, "a", 0)]),
        (0, "fail", "send", [send(1, "x", 2)]),
        (0, "ok", "send", [send(1, "b", 3)]),
        (1, "ok", "poll", [poll({1: [(0, "a")]})]),
        (1, "ok", "poll", [poll({1: [(3, "b")]})]),
    )
    assert check(h).errors == {}


def test_backwards_and_repeated_polls():
    h = history(
        *WRITES,
        (1, "ok", "poll", [poll({1: [(2, "c")]})]),
        (1, "ok", "poll", [poll({1: [(2, "c")]})]),
        (1, "ok", "poll", [poll({1: [(0, "a"), (1, "b")]})]),
    )
    errs = check(h).errors["nonmonotonic-poll"]
    assert [(e["offsets"], e["delta"]) for e in errs] == [([2, 2], 0), ([2, 0], -2)]


def test_rebalance_or_assign_exempts():
    h = history(
        *WRITES,
        READ_ALL,
        (1, "ok", "poll", [poll({1: [(2, "c")]})]),
        (1, "ok", "assign", [1]),
        (1, "ok", "poll", [poll({1: [(0, "a")]})]),
    )
    h.append(op(len(h), 1, "invoke", "poll", [poll()]))
    h.append(op(len(h), 1, "ok", "poll", [poll({1: [(4, "e")]})], rebalance=[1]))
    assert check(h).errors == {}


def test_aborted_polls_do_not_advance_the_position():
    # The client rewinds after an abort (KAFKA-17582), so the next committed poll repeats.
    h = history(
        *WRITES,
        (1, "ok", "txn", [poll({1: [(0, "a")]})]),
        (1, "fail", "txn", [poll({1: [(1, "b"), (2, "c")]})]),
        (1, "ok", "txn", [poll({1: [(1, "b"), (2, "c"), (3, "d")]})]),
    )
    assert check(h).errors == {}


def test_consumer_that_did_not_rewind_after_abort():
    # KAFKA-17582: after an aborted transaction polled 12-17 the consumer carried on at 18,
    # so those records were never consumed by a committed transaction.
    writes = [(0, "ok", "send", [send("t", 100 + o, o)]) for o in range(10, 20)]
    h = history(
        *writes,
        (1, "ok", "txn", [poll({"t": [(10, 110), (11, 111)]})]),
        (1, "fail", "txn", [poll({"t": [(12, 112), (14, 114), (15, 115), (17, 117)]})]),
        (1, "ok", "txn", [poll({"t": [(18, 118), (19, 119)]})]),
    )
    errs = check(h).errors
    assert errs["poll-skip"][0]["skipped"] == [112, 113, 114, 115, 116, 117]
    # ... and the aborted transaction itself skipped twice
    assert [e["skipped"] for e in errs["int-poll-skip"]] == [[113], [116]]


def test_skip_within_one_poll():
    h = history(*WRITES, (1, "ok", "poll", [poll({1: [(0, "a"), (2, "c")]})]))
    assert check(h).errors["int-poll-skip"] == [
        {"key": 1, "op": 11, "offsets": [0, 2], "values": ["a", "c"], "skipped": ["b"], "delta": 2}
    ]


def test_backwards_within_one_poll():
    h = history(*WRITES, (1, "ok", "poll", [poll({1: [(3, "d")]}), poll({1: [(1, "b")]})]))
    assert check(h).errors["int-nonmonotonic-poll"] == [
        {"key": 1, "op": 11, "offsets": [3, 1], "values": ["d", "b"], "delta": -2}
    ]


def test_an_assign_exempts_where_the_next_poll_starts_not_a_rewind_after_it():
    # From healthy probe runs: librdkafka restarted a re-assigned partition from the log start
    # after its first records (offsets 3, 4 here), silently. The assign exempts the jump to
    # 3; going back to 0 inside the poll, or in the next one, is still reported.
    h = history(
        *WRITES, READ_ALL,
        (1, "ok", "poll", [poll({1: [(0, "a"), (1, "b")]})]),
        (1, "ok", "assign", [1]),
        (1, "ok", "poll", [poll({1: [(3, "d"), (4, "e"), (0, "a"), (1, "b")]})]),
        (2, "ok", "assign", [1]),
        (2, "ok", "poll", [poll({1: [(3, "d"), (4, "e")]})]),
        (2, "ok", "poll", [poll({1: [(0, "a"), (1, "b")]})]),
    )
    errs = check(h).errors
    assert [(e["op"], e["offsets"]) for e in errs["int-nonmonotonic-poll"]] == [(17, [4, 0])]
    assert [(e["ops"], e["offsets"]) for e in errs["nonmonotonic-poll"]] == [([21, 23], [4, 0])]


def test_rebalance_during_op_exempts_its_internal_reads():
    h = history(*WRITES, READ_ALL)
    h.append(op(len(h), 1, "invoke", "poll", [poll()]))
    h.append(op(len(h), 1, "ok", "poll", [poll({1: [(3, "d"), (0, "a")]})], rebalance=[1]))
    assert check(h).errors == {}


def test_skip_revealed_by_a_late_acknowledgement():
    # The skipped value's send completes only after the polls went past it.
    h = history(
        (0, "ok", "send", [send(1, "a", 0)]),
        (0, "ok", "send", [send(1, "c", 2)]),
        (1, "ok", "poll", [poll({1: [(0, "a")]})]),
        (1, "ok", "poll", [poll({1: [(2, "c")]})]),
        (2, "ok", "send", [send(1, "b", 1)]),
    )
    errs = check(h).errors["poll-skip"]
    assert [(e["ops"], e["skipped"], e["delta"]) for e in errs] == [([5, 7], ["b"], 2)]


def test_skip_within_one_poll_revealed_late():
    h = history(
        (1, "ok", "poll", [poll({1: [(0, "a"), (2, "c")]})]), (0, "ok", "send", [send(1, "b", 1)])
    )
    assert check(h).errors["int-poll-skip"] == [
        {"key": 1, "op": 1, "offsets": [0, 2], "values": ["a", "c"], "skipped": ["b"], "delta": 2}
    ]


def test_rebalance_after_the_reads_also_exempts_the_next_poll():
    # Found by the probe: the rebalance logged during op 5 (revoke then assign) may have come
    # after its read, so the consumer legitimately restarts from the committed offset 0.
    h = [op(0, 1, "invoke", "subscribe", [7]), op(1, 1, "ok", "subscribe", [7]),
         op(2, 0, "invoke", "send", [send(7, 10)]), op(3, 0, "ok", "send", [send(7, 10, 0)]),
         op(4, 1, "invoke", "txn", [poll(), poll()]),
         op(5, 1, "ok", "txn", [poll({7: [(0, 10)]}), poll({7: []})], rebalance=[7]),
         op(6, 1, "invoke", "poll", [poll()]), op(7, 1, "ok", "poll", [poll({7: [(0, 10)]})])]
    assert check(h).errors == {}


def test_aborted_poll_is_compared_with_the_last_committed_position():
    # Like Jepsen: every completion is checked against the last ok poll's position.
    h = history(*WRITES, READ_ALL, (1, "ok", "poll", [poll({1: [(0, "a")]})]),
                (1, "fail", "txn", [poll({1: [(2, "c")]})]))
    (e,) = check(h).errors["poll-skip"]
    assert e["skipped"] == ["b"] and e["ops"] == [13, 15]


def test_a_failed_assign_changes_no_position():
    # As in Jepsen: the assignment did not happen, so going back is still going back.
    h = history(
        *WRITES,
        READ_ALL,
        (1, "ok", "poll", [poll({1: [(2, "c")]})]),
        (1, "fail", "assign", [1]),
        (1, "ok", "poll", [poll({1: [(0, "a")]})]),
    )
    assert [e["ops"] for e in check(h).errors["nonmonotonic-poll"]] == [[13, 17]]


def test_an_assign_or_subscribe_elsewhere_drops_the_position():
    # As in Jepsen, a process keeps positions only on keys its new assignment covers; a
    # subscription to another topic may well bring this partition back from anywhere.
    for f in ("assign", "subscribe"):
        h = history(
            *WRITES,
            READ_ALL,
            (1, "ok", "poll", [poll({1: [(2, "c")]})]),
            (1, "ok", f, [2]),
            (1, "ok", "poll", [poll({1: [(0, "a")]})]),
        )
        assert check(h).errors == {}, f


def test_delta_counts_values_learned_after_the_step():
    # Offset 1's value is acknowledged only after the backwards poll: Jepsen's delta is in
    # the final version order, so it counts (offline; online the record stands as emitted).
    h = history(
        (0, "ok", "send", [send(1, "a", 0)]),
        (0, "ok", "send", [send(1, "c", 2)]),
        (1, "ok", "poll", [poll({1: [(2, "c")]})]),
        (1, "ok", "poll", [poll({1: [(0, "a")]})]),
        (0, "ok", "send", [send(1, "b", 1)]),
        (2, "ok", "poll", [poll({1: [(0, "a"), (1, "b"), (2, "c")]})]),
        (3, "ok", "poll", [poll({1: [(2, "c"), (0, "a")]})]),
    )
    r = check(h)
    assert [(e["offsets"], e["delta"]) for e in r.errors["nonmonotonic-poll"]] == [([2, 0], -2)]
    assert [(e["offsets"], e["delta"]) for e in r.errors["int-nonmonotonic-poll"]] == [
        ([2, 0], -2)]
