"""G0 and G1c."""

from tests.checker.helpers import check, history, poll, send


def test_g1c_write_read_cycle():
    h = history((0, "ok", "txn", [send("x", 1, 0), poll({"y": [(0, 2)]})]),
                (1, "ok", "txn", [send("y", 2, 0), poll({"x": [(0, 1)]})]))
    r = check(h)
    (cyc,) = r.errors["G1c"]
    assert cyc["cycle"] == [1, 3, 1] and {s["type"] for s in cyc["steps"]} == {"wr"}
    assert not r.valid


def test_no_cycle_when_reads_flow_one_way():
    h = history((0, "ok", "txn", [send("x", 1, 0)]),
                (1, "ok", "txn", [send("y", 2, 0), poll({"x": [(0, 1)]})]),
                (2, "ok", "poll", [poll({"y": [(0, 2)]})]))
    assert check(h).errors == {}


def test_g0_write_cycle_needs_ww_deps_and_is_allowed():
    # T1 wrote x before T2, T2 wrote y before T1: their writes interleave across partitions.
    h = history((0, "ok", "txn", [send("x", 1, 0), send("y", 4, 1)]),
                (1, "ok", "txn", [send("x", 2, 1), send("y", 3, 0)]),
                (2, "ok", "poll", [poll({"x": [(0, 1), (1, 2)], "y": [(0, 3), (1, 4)]})]))
    assert "G0" not in check(h).errors
    r = check(h, ww_deps=True)
    assert r.errors["G0"][0]["cycle"] in ([1, 3, 1], [3, 1, 3])
    assert r.valid


def test_g1c_through_a_write_write_edge():
    # T1 wrote x=1 before T2 wrote x=2, and T1 read T2's y: a cycle with ww and wr edges.
    h = history((1, "ok", "txn", [send("x", 2, 1), send("y", 5, 0)]),
                (0, "ok", "txn", [send("x", 1, 0), poll({"y": [(0, 5)]})]))
    assert "G1c" not in check(h).errors
    steps = check(h, ww_deps=True).errors["G1c"][0]["steps"]
    assert sorted(s["type"] for s in steps) == ["wr", "ww"]


def test_g1c_through_a_read_that_is_not_the_highest():
    # T2 read T1's x=1 and then T3's x=2; T1 read T2's y=5. The wr edge T1 -> T2 comes from a
    # read below T2's highest read of x.
    h = history((2, "ok", "send", [send("x", 2, 1)]),
                (0, "ok", "txn", [send("x", 1, 0), poll({"y": [(0, 5)]})]),
                (1, "ok", "txn", [send("y", 5, 0), poll({"x": [(0, 1), (1, 2)]})]))
    (cyc,) = check(h).errors["G1c"]
    assert sorted(cyc["cycle"][:-1]) == [3, 5]


def test_g1c_is_allowed_with_ww_deps():
    h = history((1, "ok", "txn", [send("x", 2, 1), send("y", 5, 0)]),
                (0, "ok", "txn", [send("x", 1, 0), poll({"y": [(0, 5)]})]),
                (2, "ok", "poll", [poll({"x": [(0, 1), (1, 2)]})]))
    r = check(h, ww_deps=True)
    assert "G1c" in r.errors and r.valid
    assert not check(h).errors
