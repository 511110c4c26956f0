"""report.merge_key: which records are pieces of one anomaly (the online monitor counts by it)."""

from kmon.checker.anomaly import Anomaly
from kmon.checker.report import merge_anomalies, merge_key


def test_pieces_of_one_anomaly_share_a_key():
    a = Anomaly("inconsistent-offsets", {"key": 3, "offset": 7, "values": [1, 2]})
    b = Anomaly("inconsistent-offsets", {"key": 3, "offset": 7, "values": [1, 5]})
    assert merge_key(a) == merge_key(b) == ("inconsistent-offsets", 3, 7)
    # ... exactly the records merge_anomalies merges into one
    assert len(merge_anomalies([a, b])["inconsistent-offsets"]) == 1


def test_different_anomalies_differ():
    a = Anomaly("lost-write", {"key": 1, "value": 4, "offset": 4})
    b = Anomaly("duplicate", {"key": 1, "value": 4, "offsets": [4, 9], "count": 2})
    c = Anomaly("lost-write", {"key": 2, "value": 4, "offset": 4})
    assert len({merge_key(a), merge_key(b), merge_key(c)}) == 3


def test_torn_transactions_merge_by_writer():
    a = Anomaly("torn-transaction", {"key": 2, "writer": 9, "visible": [[1, 1, 0]],
                                     "invisible": [[2, 2, 0]]})
    b = Anomaly("torn-transaction", {"key": 2, "writer": 9, "visible": [[1, 1, 0]],
                                     "invisible": [[2, 2, 0], [3, 3, 0]]})
    assert merge_key(a) == merge_key(b) == ("torn-transaction", 9)


def test_reads_merge_by_reading_op():
    a = Anomaly("G1a", {"key": 1, "value": 2, "offset": 0, "reader": 7})
    b = Anomaly("G1a", {"key": 1, "value": 2, "offset": 0, "reader": 8})
    assert merge_key(a) == ("G1a", 1, 2, 7) != merge_key(b)
    p = Anomaly("precommitted-read", {"key": 1, "op": 3, "values": [2]})
    assert merge_key(p) == ("precommitted-read", 1, 3)


def test_types_without_pieces_have_no_key():
    assert merge_key(Anomaly("nonmonotonic-poll", {"key": 1, "op": 3, "offsets": [5, 2]})) is None
    assert merge_key(Anomaly("G0", {"cycle": [1, 2]})) is None
