"""torn-transaction (KAFKA-17754)."""

from tests.checker.helpers import check, history, poll, send


def test_atomic_transaction_fully_visible():
    h = history((0, "ok", "txn", [send(1, 1, 0), send(2, 2, 0)]),
                (1, "ok", "poll", [poll({1: [(0, 1)], 2: [(0, 2)]})]))
    assert check(h).errors == {}


def test_aborted_transaction_fully_invisible():
    h = history((0, "fail", "txn", [send(1, 1, 0), send(2, 2, 0)]),
                (1, "ok", "poll", [poll({1: [(2, 3)], 2: [(2, 4)]})]))
    assert check(h).errors == {}


def test_kafka_17754_torn_aborted_transaction():
    # Bufstream 0.1.3-rc.9 / KAFKA-17754: process 76 aborted this transaction on purpose, but a
    # delayed commit of an earlier transaction committed its first half: 424 became visible to
    # fifteen pollers, while 926 and 927 on key 17 never did.
    h = history(
        (76, "fail", "txn", [send(5, 424, 653), send(17, 926, 1360), poll({}),
                             send(17, 927, 1382)]),
        *[(p, "ok", "poll", [poll({5: [(652, 423), (653, 424)]})]) for p in range(10, 13)],
        (20, "ok", "poll", [poll({17: [(1359, 925), (1361, 928), (1383, 929)]})]),
    )
    r = check(h)
    assert r.errors["torn-transaction"] == [{
        "key": 17, "writer": 1, "visible": [[5, 424, 653]],
        "invisible": [[17, 926, 1360], [17, 927, 1382]]}]
    assert [(e["value"], e["reader"]) for e in r.errors["G1a"]] == [(424, 3), (424, 5), (424, 7)]


def test_committed_transaction_half_lost():
    h = history((0, "ok", "txn", [send(1, 1, 0), send(2, 2, 0)]),
                (1, "ok", "poll", [poll({1: [(0, 1)], 2: [(1, 3)]})]))
    r = check(h)
    assert {"torn-transaction", "lost-write"} <= set(r.errors)


def test_unknown_offset_cannot_prove_invisibility():
    h = history((0, "fail", "txn", [send(1, 1, 0), send(2, 2, None)]),
                (1, "ok", "poll", [poll({1: [(0, 1)], 2: [(5, 3)]})]))
    assert "torn-transaction" not in check(h).errors
