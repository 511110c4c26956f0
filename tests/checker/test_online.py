"""The fold online: grace periods, compaction, serialized state, bounded memory."""

from __future__ import annotations

import pickle
from array import array

import pytest

from kmon.checker import CheckConfig, Checker
from kmon.checker.flags import OCCUPIED, READ_OK
from kmon.checker.realtime_lag import first_ack_after
from kmon.checker.state import CHUNK, INF, KeyState
from kmon.checker.state_format import TABLES
from kmon.history.model import Op
from kmon.synth import SynthConfig, healthy
from tests.checker import helpers
from tests.checker.helpers import check, history, poll, send

SECOND = 1_000_000_000


def _run_online(ops, grace: int, restart_every: int | None = None) -> Checker:
    checker = Checker(CheckConfig(cycles=False, grace_ns=grace, unseen_grace_ns=4 * grace))
    for n, op in enumerate(ops, 1):
        checker.apply(op)
        if n % 1_000 == 0:
            checker.advance(op.time - SECOND)
        if restart_every and n % restart_every == 0:
            # what a restart from a checkpoint does: every key's state through bytes
            checker.keys = {k: KeyState.from_bytes(st.to_bytes())
                            for k, st in checker.keys.items()}
    return checker


def test_healthy_run_online_has_no_anomaly_and_bounded_state():
    ops = list(healthy(60_000, SynthConfig(keys=8, processes=4, keys_per_process=4)))
    checker = _run_online(ops, grace=SECOND // 2)
    windows = [len(st.val) for st in checker.keys.values()]
    report = checker.finish()
    assert report.errors == {}
    # 60k events over 6 s of event time: each key's window covers about a grace period's worth
    # of offsets, not its whole log.
    logs = [st.base + len(st.val) for st in checker.keys.values()]
    assert all(st.compacted for st in checker.keys.values())
    assert max(windows) < max(logs) / 3, (windows, logs)


def test_compaction_keeps_the_value_index_fitted_to_the_window():
    # The index once kept the size of a key's largest window, tombstones and all: 2-4 cells a
    # value. Compaction now rebuilds it, so it holds at most two cells per value held.
    ops = list(healthy(60_000, SynthConfig(keys=8, processes=4, keys_per_process=4)))
    checker = _run_online(ops, grace=SECOND // 2)
    for st in checker.keys.values():
        held = sum(1 for f in st.flg if f & OCCUPIED)
        assert st.compacted and st.index.size() <= 2 * held + 16, (st.index.size(), held)
        assert st.index.used <= held, (st.index.used, held)  # no tombstones left behind


def test_restarts_through_serialized_state_change_nothing():
    ops = list(healthy(30_000, SynthConfig(keys=8, processes=4, keys_per_process=4)))
    # a lost write and an aborted read buried in the middle of a healthy run
    n = len(ops)
    faults = history(
        (90, "ok", "send", [send("f", 1, 0)]), (90, "ok", "send", [send("f", 2, 1)]),
        (90, "ok", "send", [send("f", 3, 2)]), (90, "fail", "send", [send("f", 9, 3)]),
        (91, "ok", "poll", [poll({"f": [(0, 1), (2, 3), (3, 9)]})]),
    )
    t0 = ops[n // 2].time
    for k, op in enumerate(faults):
        op.index = 10_000_000 + k
        op.time = t0 + k
    ops[n // 2:n // 2] = faults
    plain = _run_online(ops, grace=SECOND).finish()
    restarted = _run_online(ops, grace=SECOND, restart_every=997).finish()
    assert set(plain.errors) >= {"lost-write", "G1a"}
    assert plain.errors == restarted.errors


def test_state_round_trips_exactly():
    ops = list(healthy(5_000, SynthConfig(keys=4, processes=4, keys_per_process=2)))
    checker = _run_online(ops, grace=SECOND)
    for st in checker.keys.values():
        again = KeyState.from_bytes(st.to_bytes())
        assert again.to_bytes() == st.to_bytes()
        assert len(again.val) == len(st.val) and again.frontier == st.frontier


def test_absence_verdict_waits_for_the_grace_period():
    h = history((0, "ok", "send", [send(1, 1, 0)]), (0, "ok", "send", [send(1, 2, 1)]),
                (1, "ok", "poll", [poll({1: [(1, 2)]})]))
    checker = Checker(CheckConfig(cycles=False, grace_ns=100))
    for op in h:
        checker.apply(op)
    checker.advance(h[-1].time + 99)
    assert not [a for a in checker.sink.anomalies if a.type == "lost-write"]
    checker.advance(h[-1].time + 100)
    assert [a.type for a in checker.sink.anomalies].count("lost-write") == 1
    checker.advance(h[-1].time + 10_000)  # emitted once
    assert [a.type for a in checker.sink.anomalies].count("lost-write") == 1


def test_late_read_within_grace_cancels_the_verdict():
    h = history((0, "ok", "send", [send(1, 1, 0)]), (0, "ok", "send", [send(1, 2, 1)]),
                (1, "ok", "poll", [poll({1: [(1, 2)]})]), (2, "ok", "poll", [poll({1: [(0, 1)]})]))
    checker = Checker(CheckConfig(cycles=False, grace_ns=10_000))
    for op in h[:-2]:
        checker.apply(op)
    checker.advance(h[-3].time + 5_000)
    for op in h[-2:]:  # process 2's read of value 1 arrives late, within the grace period
        checker.apply(op)
    checker.advance(h[-1].time + 100_000)
    assert not checker.sink.anomalies


def _first_ack_scan(st: KeyState, pos: int) -> int:
    """``realtime_lag.first_ack_after`` by brute force: every occupied slot above ``pos``."""
    start = max(pos + 1 - st.base, 0)
    acks = [st.ack(i) for i in range(start, len(st.val)) if st.ack(i) and st.flg[i] & OCCUPIED]
    return min(acks, default=INF)


def test_lag_minima_stay_aligned_with_the_window_through_compaction():
    # The per-block and per-chunk minima that make lag queries cheap must shift with the
    # window when compaction drops chunks, or consumers get another offset's ack time.
    ops = list(healthy(40_000, SynthConfig(keys=4, processes=4, keys_per_process=4)))
    checker = Checker(CheckConfig(cycles=False, grace_ns=SECOND // 4,
                                  unseen_grace_ns=SECOND // 2))
    checked = 0
    for n, op in enumerate(ops, 1):
        checker.apply(op)
        if n % 500 == 0:
            checker.advance(op.time - SECOND // 10)
            for st in checker.keys.values():
                for pos in range(st.base - 1, st.last_revealed, 7):
                    assert first_ack_after(st, pos) == _first_ack_scan(st, pos), (st.key, pos)
                    checked += 1
    assert all(st.compacted for st in checker.keys.values()) and checked > 1_000


def _as_version_2(data: bytes) -> bytes:
    """A state serialized as the previous release did: flags as unsigned 16-bit ints with
    READ_OK in bit 15."""
    body = pickle.loads(data)
    arrays = dict(zip(TABLES, body["arrays"], strict=True))
    flags = array("h", arrays["flg"][1])
    old = array("H", [f & ~READ_OK | (1 << 15 if f & READ_OK else 0) for f in flags])
    arrays["flg"] = ("H", old.tobytes())
    body["v"] = 2
    body["arrays"] = tuple(arrays[name] for name in TABLES)
    body["scalars"] = body["scalars"][:-1]  # no twins count then
    return pickle.dumps(body, protocol=5)


def test_state_saved_by_the_previous_release_loads():
    # A monitor upgraded in place restarts from state stores written before the flags moved.
    ops = list(healthy(5_000, SynthConfig(keys=4, processes=4, keys_per_process=2)))
    checker = _run_online(ops, grace=SECOND)
    for st in checker.keys.values():
        assert any(f & READ_OK for f in st.flg)
        old = KeyState.from_bytes(_as_version_2(st.to_bytes()))
        assert old.twins == 1  # unknown then: verdicts look for twins
        old.twins = st.twins
        assert old.to_bytes() == st.to_bytes()


def test_writers_far_apart_in_op_indices_are_reported_exactly():
    # Writer indices are kept relative to the key's first writer in 32 bits; writers more than
    # 2**31 indices away are kept exactly on the side.
    far = 1 << 40
    h = history((0, "ok", "send", [send(1, 4, 0)]), (0, "fail", "send", [send(1, 5, 1)]),
                (1, "ok", "poll", [poll({1: [(0, 4), (1, 5)]})]))
    for later in h[2:]:
        later.index += far
    assert check(h).errors["G1a"] == [
        {"key": 1, "value": 5, "offset": 1, "writer": 3 + far, "reader": 5 + far}]


def test_far_writers_survive_serialization_compaction_and_the_previous_format():
    far = 1 << 40
    st = KeyState("k", compact=True)
    st.slot(0)
    st.slot(CHUNK)
    for i, op in ((0, 7), (1, 7 + far), (CHUNK, 9 + far)):
        st.set_writer(i, op)
    again = KeyState.from_bytes(st.to_bytes())
    assert [again.writer(i) for i in (0, 1, 2, CHUNK)] == [7, 7 + far, -1, 9 + far]
    # version 2 widened the whole window's writers to 64 bits instead
    body = pickle.loads(st.to_bytes())
    tables = dict(zip(TABLES, body["arrays"], strict=True))
    wide = [-(1 << 63) if st.writer(i) < 0 else st.writer(i) - 7 for i in range(len(st.val))]
    tables["wref"] = ("q", array("q", wide).tobytes())
    body.update(v=2, arrays=tuple(tables[name] for name in TABLES), scalars=body["scalars"][:-1])
    del body["wide_writers"]
    old = KeyState.from_bytes(pickle.dumps(body))
    assert [old.writer(i) for i in (0, 1, 2, CHUNK)] == [7, 7 + far, -1, 9 + far]
    again.drop_front(CHUNK)
    assert again.writer(0) == 9 + far and list(again.writers.wide) == [CHUNK]


def test_value_index_finds_values_across_16_bit_positions():
    # The value index keeps 16-bit positions (above 0x7FFF read back unsigned) until the window
    # outgrows them, then 32-bit ones. Values sent at offsets around both limits and read again
    # elsewhere must be found through it (a duplicate each), and survive serialization.
    offsets = [0, 1, 0x7FFF, 0x8000, 0xFFFE, 0xFFFF, 0x10000, 70_000]
    sends = [(0, "ok", "send", [send(1, 100 + n, off)]) for n, off in enumerate(offsets)]
    reads = [(1, "ok", "poll", [poll({1: [(off + 3, 100 + n)]})])
             for n, off in enumerate(offsets)]
    narrow, wide = history(*sends[:5], *reads[:5]), history(*sends, *reads)
    for h, width in ((narrow, "H"), (wide, "i")):
        checker = Checker(CheckConfig(cycles=False))
        for op in h:
            checker.apply(op)
        st = checker.keys[1]
        assert pickle.loads(st.to_bytes())["arrays"][-1][0] == width
        again = KeyState.from_bytes(st.to_bytes())
        assert again.to_bytes() == st.to_bytes()
        assert [again.find(100 + n) for n in range(len(h) // 4)] == offsets[:len(h) // 4]
        dups = checker.finish().errors["duplicate"]
        assert sorted((d["value"], d["offsets"]) for d in dups) == [
            (100 + n, [off, off + 3]) for n, off in enumerate(offsets[:len(h) // 4])]


def _deleted_under_a_lagging_reader(read_again_s: float) -> list[Op]:
    """600 values acked at offsets 0-599 over 6 s; a reader reads 0-99 at 7 s, then (the
    records at 100-199 deleted under it) 200-599 ``read_again_s`` later."""
    sends = [helpers.op(2 * i + 1, 0, "ok", "send", [send("k", i, i)], time=i * SECOND // 100)
             for i in range(600)]
    first = helpers.op(2_000, 1, "ok", "poll", [poll({"k": [(o, o) for o in range(100)]})],
                       time=7 * SECOND)
    again = helpers.op(2_002, 1, "ok", "poll",
                       [poll({"k": [(o, o) for o in range(200, 600)]})],
                       time=7 * SECOND + int(read_again_s * SECOND))
    return [*sends, first, again]


@pytest.mark.parametrize("read_again_s", [5.0, 9.0])
def test_a_reader_passing_values_after_their_unseen_verdict_makes_them_lost_writes(
        read_again_s: float) -> None:
    # A chaos run's lagging reader came back after the monitor had judged the deleted values
    # unseen (grace 60 s) and compacted them: 293 of 761 lost writes were never reported.
    # Kept for UNREAD_KEPT unseen grace periods (here 10 s), the later reads still judge them.
    ops = _deleted_under_a_lagging_reader(read_again_s)
    checker = Checker(CheckConfig(cycles=False, grace_ns=SECOND // 2, unseen_grace_ns=SECOND))
    for o in ops[:-1]:
        checker.apply(o)
        checker.advance(o.time)
    for t in range(ops[-2].time, ops[-1].time, SECOND // 10):  # the watermark moves on
        checker.advance(t)
    checker.apply(ops[-1])
    checker.advance(ops[-1].time + 60 * SECOND)
    lost = sorted(a.record["value"] for a in checker.sink.anomalies if a.type == "lost-write")
    offline = check(ops).errors["lost-write"]
    assert lost == sorted(r["value"] for r in offline) == list(range(100, 200))
