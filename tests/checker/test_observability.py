"""unseen and realtime-lag."""

from tests.checker.helpers import check, op, poll, send


def test_jepsen_realtime_lag_example():
    ops = [op(0, 0, "invoke", "send", [send("x", "a")], time=0),
           op(1, 0, "ok", "send", [send("x", "a", 0)], time=1),
           op(2, 1, "invoke", "poll", [poll()], time=1),
           op(3, 1, "ok", "poll", [poll({"x": [(0, "a")]})], time=2),
           op(4, 0, "invoke", "send", [send("x", "b")], time=2),
           op(5, 0, "ok", "send", [send("x", "b", 1)], time=3),
           op(6, 1, "invoke", "poll", [poll()], time=4),
           op(7, 1, "ok", "poll", [poll({"x": []})], time=5)]
    r = check(ops)
    assert r.lags == [(1, 1, "x", 0), (4, 1, "x", 1)]
    assert r.to_json()["worst-realtime-lag"] == {"time": 4, "process": 1, "key": "x", "lag": 1}


def test_assigned_key_without_records_still_lags():
    ops = [op(0, 0, "invoke", "send", [send("x", "a")], time=0),
           op(1, 0, "ok", "send", [send("x", "a", 0)], time=10),
           op(2, 1, "invoke", "assign", ["x"], time=11),
           op(3, 1, "ok", "assign", ["x"], time=12),
           op(4, 1, "invoke", "poll", [poll()], time=50),
           op(5, 1, "ok", "poll", [poll({})], time=51)]
    assert [s[3] for s in check(ops).lags] == [40]


def test_unseen_counts_and_messages():
    ops = [op(0, 0, "invoke", "send", [send(1, "a")]), op(1, 0, "ok", "send", [send(1, "a", 0)]),
           op(2, 0, "invoke", "send", [send(2, "b")]), op(3, 0, "ok", "send", [send(2, "b", None)]),
           op(4, 0, "invoke", "send", [send(2, "c")]), op(5, 0, "ok", "send", [send(2, "c", 1)]),
           op(6, 1, "invoke", "poll", [poll()]), op(7, 1, "ok", "poll", [poll({2: [(1, "c")]})])]
    j = check(ops).to_json()
    assert j["unseen"] == {"counts": {"1": 1, "2": 1}, "messages": {"1": ["a"], "2": ["b"]}}
    # Like Jepsen: acknowledged values no committed poll ever returned leave the history
    # unproven, hence invalid.
    assert j["valid"] is False and j["errors"] == {}


def test_offsets_revealed_by_a_poll_before_their_ack_count_for_lag():
    # Like Jepsen: offset 1 is known to exist once any ok op returned it (t=10), not only once
    # its send is acknowledged (t=30).
    ops = [op(0, 0, "invoke", "send", [send("x", "a")], time=0),
           op(1, 0, "ok", "send", [send("x", "a", 0)], time=1),
           op(2, 1, "invoke", "poll", [poll()], time=2),
           op(3, 1, "ok", "poll", [poll({"x": [(0, "a")]})], time=3),
           op(4, 0, "invoke", "send", [send("x", "b")], time=4),
           op(5, 2, "invoke", "poll", [poll()], time=5),
           op(6, 2, "ok", "poll", [poll({"x": [(0, "a"), (1, "b")]})], time=10),
           op(7, 1, "invoke", "poll", [poll()], time=20),
           op(8, 1, "ok", "poll", [poll({"x": []})], time=21),
           op(9, 0, "ok", "send", [send("x", "b", 1)], time=30)]
    lags = {(s[0], s[1]): s[3] for s in check(ops).lags}
    assert lags[(20, 1)] == 10
