"""torn-transaction (KAFKA-17754)."""

from kmon.checker.anomaly import TORN_TRANSACTION
from kmon.checker.sink import Sink, TxnFact
from kmon.checker.torn import TxnStage
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


# -- online memory of the transaction stage ------------------------------------------------

_S = 1_000_000_000


def _halves_apart(stage: TxnStage, gap_s: int, writer: int = 7) -> list:
    """A txn's visible half at t=0 and its invisible half ``gap_s`` later (readers of its other
    key lagging), the stage's clock moving with the facts; the torn verdicts it gave."""
    sink = Sink()
    stage.apply(TxnFact("visible", writer, "a", 1, 10, "ok", 0), sink)
    stage.advance(0)
    for t in range(1, gap_s):  # other writers' facts move the clock on in the meantime
        stage.apply(TxnFact("visible", 1000 + t, "c", t, t, "ok", t * _S), sink)
        stage.advance(t * _S)
    stage.apply(TxnFact("invisible", writer, "b", 2, 20, "ok", gap_s * _S), sink)
    return [a for a in sink.anomalies if a.type == TORN_TRANSACTION]


def test_torn_halves_decided_minutes_apart_are_found_within_the_retention() -> None:
    assert _halves_apart(TxnStage(grace_ns=5 * _S, retain_ns=300 * _S), gap_s=120)


def test_the_stage_forgets_writers_past_its_retention() -> None:
    # Two grace periods only (no retention given): the visible half is gone when the other
    # half comes 2 minutes later. This is the bound; kmon check still finds it offline.
    assert not _halves_apart(TxnStage(grace_ns=5 * _S), gap_s=120)
    assert _halves_apart(TxnStage(grace_ns=None), gap_s=120)


def test_the_stage_keeps_at_most_max_writers_oldest_forgotten_first() -> None:
    stage = TxnStage(grace_ns=5 * _S, retain_ns=3600 * _S, max_writers=50)
    assert len(stage.txns) == 0
    assert not _halves_apart(stage, gap_s=120)  # writer 7 was the oldest of 120
    assert len(stage.txns) <= 51
    assert 1119 in stage.txns and 1001 not in stage.txns


def test_invisible_writes_saved_before_the_reader_was_kept_still_report_lost() -> None:
    # Stage-2 state written before invisible writes carried the reader and the highest read
    # offset has 4-field rows: their lost-write records name neither.
    from kmon.checker.torn import TxnState, judge, write_of

    ts = TxnState()
    ts.visible = [write_of(["a", 1, 10])]
    ts.invisible = [write_of(["b", 2, 20, "info"])]
    sink = Sink()
    judge(7, ts, sink)
    lost = [a.record for a in sink.anomalies if a.type == "lost-write"]
    assert lost == [{"key": "b", "value": 2, "offset": 20, "writer": 7}]
    assert ts.invisible[0].row() == ["b", 2, 20, "info", -1, -1]
