"""lost-write, with ok and info writers."""

from tests.checker.helpers import check, history, poll, send


def test_everything_read_is_not_lost():
    h = history((0, "ok", "send", [send(1, 1, 0)]), (0, "ok", "send", [send(1, 2, 1)]),
                (1, "ok", "poll", [poll({1: [(0, 1)]})]), (2, "ok", "poll", [poll({1: [(1, 2)]})]))
    assert check(h).errors == {}


def test_tail_not_read_yet_is_unseen_not_lost():
    h = history((0, "ok", "send", [send(1, 1, 0)]), (0, "ok", "send", [send(1, 2, 1)]),
                (1, "ok", "poll", [poll({1: [(0, 1)]})]))
    r = check(h)
    assert r.errors == {} and r.unseen_counts == {1: 1} and r.unseen_messages == {1: [2]}


def test_bufstream_lost_transaction_write():
    # Bufstream 0.1.2 #4: a committed transaction's write of 141 at offset 274 vanished;
    # every poller went from 273 straight to 277.
    h = history(
        (7, "ok", "send", [send(11, 48, 83), send(5, 141, 274)]),
        (3, "ok", "poll", [poll({5: [(272, 140), (273, 142), (277, 144), (278, 145)]})]),
        (4, "ok", "poll", [poll({5: [(273, 142), (277, 144)]})]),
        (5, "ok", "poll", [poll({11: [(83, 48)]})]),
    )
    lost = check(h).errors["lost-write"]
    assert [(e["key"], e["value"], e["offset"], e["writer"]) for e in lost] == [(5, 141, 274, 1)]


def test_ack_arriving_after_readers_passed():
    h = history((1, "ok", "poll", [poll({1: [(0, 1), (2, 3)]})]),
                (0, "ok", "send", [send(1, 2, 1)]))
    assert [e["value"] for e in check(h).errors["lost-write"]] == [2]


def test_failed_and_info_writes_are_never_lost():
    h = history((0, "fail", "send", [send(1, 2, 1)]), (0, "info", "send", [send(1, 4, 3)]),
                (1, "ok", "poll", [poll({1: [(0, 1), (2, 3), (5, 6)]})]))
    assert check(h).errors == {}


def test_info_writer_proven_committed_by_another_read():
    # The client never learned the transaction's fate, but one of its writes was read: it
    # committed, so its other write, which readers went past, was lost.
    h = history(
        (0, "info", "txn", [send(1, 10, 1), send(2, 20, 1)]),
        (1, "ok", "poll", [poll({1: [(0, 9), (1, 10)]})]),
        (2, "ok", "poll", [poll({2: [(0, 19), (2, 21)]})]),
    )
    r = check(h)
    # like an ok writer's record: the poll that went past the value, and how far it read
    assert r.errors["lost-write"] == [
        {"key": 2, "value": 20, "offset": 1, "writer": 1, "reader": 5, "max-read-offset": 2}
    ]
    assert "torn-transaction" in r.errors


def test_info_writer_never_read_is_not_lost():
    h = history((0, "info", "txn", [send(1, 10, 1), send(2, 20, 1)]),
                (2, "ok", "poll", [poll({1: [(0, 9), (2, 11)], 2: [(0, 19), (2, 21)]})]))
    assert check(h).errors == {}


def test_value_read_only_by_an_aborted_transaction_was_never_consumed():
    # Like Jepsen: only committed (ok) polls consume. Process 2's transaction read 2, then
    # aborted; every committed reader went past it.
    h = history((0, "ok", "send", [send(1, 1, 0)]), (0, "ok", "send", [send(1, 2, 1)]),
                (0, "ok", "send", [send(1, 3, 2)]),
                (2, "fail", "txn", [poll({1: [(1, 2)]})]),
                (1, "ok", "poll", [poll({1: [(0, 1), (2, 3)]})]))
    assert [e["value"] for e in check(h).errors["lost-write"]] == [2]


def test_a_value_read_by_a_transaction_whose_commit_timed_out_was_consumed():
    # Chaos seed 12, safe probe: process 2's transaction read 2 (at 1) and timed out at its
    # commit (info); its offset commit landed, so the next consumer started at 2 and read 3.
    # The poll returned 2 all the same (read_committed: it was committed): not lost, not
    # unseen, and its writer's transaction not torn.
    h = history((0, "ok", "txn", [send(1, 1, 0), send(2, 7, 0)]),
                (0, "ok", "txn", [send(1, 2, 1), send(2, 8, 1)]),
                (0, "ok", "send", [send(1, 3, 2)]),
                (1, "ok", "poll", [poll({1: [(0, 1)], 2: [(0, 7), (1, 8)]})]),
                (2, "info", "txn", [poll({1: [(1, 2)]}), send(2, 9, 2)]),
                (3, "ok", "poll", [poll({1: [(2, 3)], 2: [(2, 9)]})]))
    r = check(h)
    assert r.errors == {} and r.unseen_messages == {}


def test_aborted_reads_past_a_value_do_not_make_it_lost():
    # How far consumers got is measured by committed polls only.
    h = history((0, "ok", "send", [send(1, 1, 0)]), (0, "ok", "send", [send(1, 2, 1)]),
                (2, "fail", "txn", [poll({1: [(1, 2)]})]))
    r = check(h)
    assert "lost-write" not in r.errors and r.unseen_messages == {1: [1, 2]}


def test_info_transaction_write_placed_only_by_an_aborted_poll_is_lost_once_proven():
    # 8's ack had no offset; an aborted poll read it at 3 (its place in the log, as Jepsen's
    # version order has it). Its transaction committed (9 read), readers went past 3: lost.
    h = history(
        (0, "info", "txn", [send(1, 8, None), send(0, 9, None)]),
        (1, "ok", "send", [send(1, 14, 7)]),
        (2, "fail", "poll", [poll({1: [(3, 8)]})]),
        (3, "ok", "poll", [poll({0: [(5, 9)], 1: [(7, 14)]})]),
    )
    r = check(h)
    assert [(e["key"], e["value"], e["offset"], e["writer"]) for e in r.errors["lost-write"]] == [
        (1, 8, 3, 1)]
    assert not r.valid
