"""nonmonotonic-send, int-nonmonotonic-send, int-send-skip."""

from tests.checker.helpers import check, history, poll, send


def test_sends_in_order_with_others_interleaved():
    h = history(
        (0, "ok", "send", [send(1, 1, 0)]),
        (1, "ok", "send", [send(1, 2, 1)]),
        (0, "ok", "send", [send(1, 3, 2)]),
    )
    assert check(h).errors == {}


def test_process_sends_going_backwards():
    h = history((0, "ok", "send", [send(1, 1, 5)]), (0, "ok", "send", [send(1, 2, 4)]))
    assert check(h).errors["nonmonotonic-send"] == [
        {"key": 1, "process": 0, "ops": [1, 3], "offsets": [5, 4], "values": [1, 2], "delta": -1}
    ]


def test_failed_sends_do_not_set_the_position():
    h = history((0, "fail", "send", [send(1, 1, 5)]), (0, "ok", "send", [send(1, 2, 4)]))
    assert check(h).errors == {}


def test_backwards_within_one_transaction():
    h = history((0, "ok", "txn", [send(1, 1, 5), send(1, 2, 5)]))
    assert set(check(h).errors) == {"int-nonmonotonic-send", "inconsistent-offsets"}


def test_interleaved_transaction_writes_are_allowed():
    h = history(
        (0, "ok", "txn", [send(1, 1, 0), send(1, 3, 2)]),
        (1, "ok", "send", [send(1, 2, 1)]),
        (2, "ok", "poll", [poll({1: [(0, 1), (1, 2), (2, 3)]})]),
    )
    r = check(h)
    assert r.errors["int-send-skip"][0]["skipped"] == [2]
    assert r.valid  # Kafka does not isolate transactions' writes from each other


def test_unknown_outcome_send_leaves_the_position_unknown():
    h = history((0, "ok", "send", [send(1, 1, 5)]), (0, "info", "send", [send(1, 2, None)]),
                (0, "ok", "send", [send(1, 3, 4)]))
    assert "nonmonotonic-send" not in check(h).errors


def test_aborted_transaction_sends_are_not_checked_for_order():
    # Their values are not in the version order, as in Jepsen.
    h = history((0, "fail", "txn", [send(1, 1, 5), send(1, 2, 3)]))
    assert check(h).errors == {}


def test_an_unread_info_send_proves_no_order():
    # Its value may never have been written (Jepsen: not in the version order, no check).
    h = history((0, "info", "send", [send(1, "a", 5)]), (0, "ok", "send", [send(1, "b", 4)]),
                (1, "ok", "poll", [poll({1: [(4, "b")]})]))
    assert "nonmonotonic-send" not in check(h).errors


def test_a_read_info_send_does():
    # Read at its offset, before or after the next send: it happened there.
    for read_first in (True, False):
        pairs = [(0, "info", "send", [send(1, "a", 5)]), (0, "ok", "send", [send(1, "b", 4)])]
        read = (1, "ok", "poll", [poll({1: [(4, "b"), (5, "a")]})])
        pairs.insert(1 if read_first else 2, read)
        errs = check(history(*pairs)).errors["nonmonotonic-send"]
        assert [(e["offsets"], e["delta"]) for e in errs] == [([5, 4], -1)], read_first


def test_an_assign_elsewhere_drops_the_send_position():
    # Jepsen's rule for sends too: only the keys the new assignment covers keep a position.
    h = history((0, "ok", "send", [send(1, "a", 5)]), (0, "ok", "assign", [2]),
                (0, "ok", "send", [send(1, "b", 4)]))
    assert "nonmonotonic-send" not in check(h).errors
    covered = history((0, "ok", "send", [send(1, "a", 5)]), (0, "ok", "assign", [1]),
                      (0, "ok", "send", [send(1, "b", 4)]))
    assert "nonmonotonic-send" in check(covered).errors


def test_send_delta_counts_values_learned_after_the_step():
    h = history((0, "ok", "send", [send(1, "a", 5)]), (0, "ok", "send", [send(1, "c", 3)]),
                (1, "ok", "send", [send(1, "b", 4)]))
    errs = check(h).errors["nonmonotonic-send"]
    assert [(e["offsets"], e["delta"]) for e in errs] == [([5, 3], -2)]
