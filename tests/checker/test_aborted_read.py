"""G1a and precommitted-read."""

from tests.checker.helpers import check, history, poll, send


def test_committed_value_read_is_fine():
    h = history((0, "ok", "txn", [send(1, 5, 0)]), (1, "ok", "poll", [poll({1: [(0, 5)]})]))
    assert check(h).errors == {}


def test_failed_write_read_by_a_committed_poll():
    h = history((0, "fail", "send", [send(1, 5, 0)]), (1, "ok", "poll", [poll({1: [(0, 5)]})]))
    assert check(h).errors["G1a"] == [
        {"key": 1, "value": 5, "offset": 0, "writer": 1, "reader": 3}]


def test_failed_write_read_by_an_aborted_poll_counts_too():
    h = history((0, "fail", "send", [send(1, 5, None)]),
                (1, "fail", "txn", [poll({1: [(0, 5)]})]))
    assert [e["reader"] for e in check(h).errors["G1a"]] == [3]


def test_read_before_writer_outcome_waits_for_it():
    # The poll's completion lands before the aborted transaction's does.
    h = history((1, "ok", "poll", [poll({1: [(0, 5)]})]),
                (0, "fail", "txn", [send(1, 5, 0), send(2, 6, 0)]))
    errs = check(h).errors["G1a"]
    assert [(e["value"], e["writer"], e["reader"]) for e in errs] == [(5, 3, 1)]


def test_info_writer_read_is_not_an_aborted_read():
    h = history((0, "info", "send", [send(1, 5, None)]), (1, "ok", "poll", [poll({1: [(0, 5)]})]))
    assert "G1a" not in check(h).errors


def test_g1a_reported_once_per_reading_op():
    # Like Jepsen: one record per op that read the aborted value (Bufstream: fifteen pollers
    # read 424); one op reading it in two polls is one aborted read.
    h = history((0, "fail", "send", [send(1, 5, 0)]),
                (1, "ok", "poll", [poll({1: [(0, 5)]})]),
                (2, "ok", "txn", [poll({1: [(0, 5)]}), poll({1: [(0, 5)]})]))
    assert [e["reader"] for e in check(h).errors["G1a"]] == [3, 5]


def test_transaction_reading_its_own_write():
    h = history((0, "ok", "txn", [send(1, 5, 0), poll({1: [(0, 5)]})]))
    assert check(h).errors == {
        "precommitted-read": [{"key": 1, "op": 1, "value": 5, "values": [5]}]}


def test_aborted_transaction_reading_its_own_write_is_precommitted_not_g1a():
    h = history((0, "fail", "txn", [send(1, 5, 0), poll({1: [(0, 5)]})]))
    assert set(check(h).errors) == {"precommitted-read"}


def test_read_isolation_policy():
    h = history((0, "fail", "send", [send(1, 5, 0)]), (1, "ok", "poll", [poll({1: [(0, 5)]})]))
    assert not check(h).valid
    assert check(h, isolation="read_uncommitted").valid
