"""The stage adapters against the offline checker: same verdicts, counted once, state bounded."""

from __future__ import annotations

import pytest

from kmon.checker import CheckConfig, Checker
from kmon.checker.anomaly import Anomaly
from kmon.checker.report import merge_anomalies
from kmon.history.fragment import Fragment
from kmon.streaming.keyfold import DEAD, KeyFold, timer_to_keep
from kmon.synth import SynthConfig, healthy
from tests.checker.helpers import history, poll, send
from tests.unit.streaming.cases import CASES
from tests.unit.streaming.online import SECOND, run_online, settings, verdicts


def _merged(evidence: list[dict]) -> dict:
    return merge_anomalies(Anomaly(e["anomaly"], e["record"]) for e in evidence
                           if e["anomaly"] != "unseen")


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("batch", [1, 3, 1000])
def test_each_case_gives_the_offline_verdicts(name: str, batch: int) -> None:
    anomaly, ops = CASES[name]
    offline = Checker(CheckConfig(cycles=False)).run(ops).errors
    online = run_online(ops, batch=batch)
    assert _merged(online["evidence"]) == offline
    assert anomaly in verdicts(online["evidence"])


def test_each_verdict_is_new_once_and_later_pieces_are_updates() -> None:
    # a third value at an inconsistent offset is a second piece of the same anomaly
    ops = history((0, "ok", "send", [send(1, "a", 3)]), (1, "ok", "poll", [poll({1: [(3, "b")]})]),
                  (2, "ok", "poll", [poll({1: [(3, "c")]})]))
    ev = run_online(ops, batch=2)["evidence"]
    pieces = [e for e in ev if e["anomaly"] == "inconsistent-offsets"]
    assert len(pieces) == 2
    first, second = pieces
    assert not first["update"] and first["verdict"] == first["id"]
    assert second["update"] and second["verdict"] == first["id"] and second["id"] != first["id"]


def test_evidence_records_carry_what_on_call_needs() -> None:
    ev = run_online(CASES["duplicate"][1])["evidence"]
    (e,) = [x for x in ev if x["anomaly"] == "duplicate"]
    assert e["key"] == 6 and e["probe"] == "p"
    assert e["offsets"] == [0, 25] and e["values"] == [26]
    assert e["decided_time"] > 0 and len(e["id"]) == 32
    lost = next(x for x in run_online(CASES["lost-write"][1])["evidence"]
                if x["anomaly"] == "lost-write")
    assert [o["index"] for o in lost["ops"]] == [lost["record"]["writer"], lost["record"]["reader"]]
    # an info writer's, decided by stage 2 from stage 1's facts, names its reader too
    lost = next(x for x in run_online(CASES["lost-write-info"][1])["evidence"]
                if x["anomaly"] == "lost-write")
    assert lost["record"]["reader"] == 3 and lost["record"]["max-read-offset"] == 1


def test_an_anomaly_found_mid_batch_is_stamped_by_the_fragment_that_revealed_it() -> None:
    # The second poll's read of 3 at offset 0 contradicts the first's; later fragments in the
    # same batch must not stand in as its decider.
    ops = history((0, "ok", "send", [send(1, 2, 0)]), (1, "ok", "poll", [poll({1: [(0, 2)]})]),
                  (1, "ok", "poll", [poll({1: [(0, 3)]})]),
                  (0, "ok", "send", [send(1, 4, 1)]), (0, "ok", "send", [send(1, 5, 2)]))
    decider = ops[5]  # the second poll's completion
    (e,) = [x for x in run_online(ops, batch=len(ops))["evidence"]
            if x["anomaly"] == "inconsistent-offsets"]
    assert e["decided_time"] == decider.time
    assert decider.index in [o["index"] for o in e["ops"]]
    assert ops[-1].index not in [o["index"] for o in e["ops"]]


def test_replayed_batch_makes_the_same_ids() -> None:
    ops = CASES["torn-transaction"][1]
    a = [e["id"] for e in run_online(ops, batch=2)["evidence"]]
    b = [e["id"] for e in run_online(ops, batch=2)["evidence"]]
    assert a == b and len(set(a)) == len(a)
    # The same in every process and release (a restarted monitor replays a batch): literal
    # ids, which a per-process hash (Python's hash(), a random salt) would change.
    assert a == ["2eef35d3f20cb95de5e9f5badd51f951", "ca212df902450773c5b3d23f469ad315"]


def test_healthy_synthetic_run_has_no_verdict_and_bounded_state() -> None:
    ops = list(healthy(20_000, SynthConfig(keys=8, processes=4, keys_per_process=4)))
    out = run_online(ops, batch=500, grace=SECOND // 4, delay=SECOND // 10)
    assert verdicts(out["evidence"]) == {}
    # Bounded: the largest key's serialized state over the second 10,000 events stays within
    # a quarter of its size over the first (it levels off near 14 kB), where state that kept
    # what was read and decided would double.
    sizes = out["state_bytes"]
    half = len(sizes) // 2
    assert max(sizes[half:]) <= 1.25 * max(sizes[:half]), sizes


def test_unseen_verdict_after_the_unseen_grace() -> None:
    ops = history((0, "ok", "send", [send(1, 1, 0)]))
    ev = run_online(ops, unseen=5 * SECOND)["evidence"]
    assert [(e["anomaly"], e["record"]["value"]) for e in ev] == [("unseen", 1)]


def test_a_fragment_the_fold_rejects_becomes_a_dead_letter() -> None:
    kf = KeyFold("p", 1, settings())
    bad = Fragment(1, 5, 0, "ok", "poll", 10, 10, reads=[("x", 1)])  # an offset that is no int
    good = Fragment(1, 6, 0, "ok", "send", 11, 11, sends=[(7, 0)], n_writes=1)
    rows = kf.batch([bad, good], None, 0)
    dead = [r for r in rows if r["kind"] == DEAD]
    assert len(dead) == 1 and dead[0]["atype"] == "fold-error"
    assert kf.st.frontier == -1 and kf.st.last_revealed == 0  # the good one was folded


def test_timers_follow_deadlines() -> None:
    ops = history((0, "ok", "send", [send(1, 1, 0)]), (0, "ok", "send", [send(1, 2, 1)]),
                  (1, "ok", "poll", [poll({1: [(1, 2)]})]))
    kf = KeyFold("p", 1, settings(grace=SECOND))
    frags = [fr for op in ops if op.type != "invoke" for fr in _split(op)]
    kf.batch(frags, None, 0)
    deadline = ops[-1].time + SECOND  # the lost write of 1 is due then
    due = kf.next_timer_ms(0)
    assert due is not None and due * 1_000_000 <= deadline + 1_000_000
    found = []
    for _ in range(5):  # each timer fires, advances, and sets the next
        # state survives the round trip the processor makes every micro-batch
        kf = KeyFold.from_bytes("p", kf.to_bytes(), settings(grace=SECOND))
        wm = due * 1_000_000
        found += [r for r in kf.wake(wm) if r["kind"] == "anomaly"]
        due = kf.next_timer_ms(wm)
        if found:
            break
    assert [r["atype"] for r in found] == ["lost-write"]


def _split(op):
    from kmon.history.fragment import split

    return split(op)


def test_stage2_keeps_writers_until_stage1_could_have_decided_them() -> None:
    # One micro-batch covers a torn transaction and, 30 s of event time later, busy healthy
    # traffic (a restart with a backlog). Stage 2 must not forget the writer, whose invisible
    # write stage 1 decides only in a later batch, because other facts carry later times.
    _, torn = CASES["torn-transaction"]
    busy = list(healthy(4_000, SynthConfig(keys=4, processes=2, keys_per_process=2)))
    for n, op in enumerate(busy):
        op.index, op.time = 1_000 + n, 30 * SECOND + op.time
    ops = torn + busy
    out = run_online(ops, batch=len(ops) // 2, grace=SECOND, delay=SECOND // 10)
    assert "torn-transaction" in verdicts(out["evidence"])


@pytest.mark.parametrize(("old", "new", "wm_ms", "kept"), [
    (None, 5_000, 1_000, 5_000),  # no timer yet: register what is needed
    (3_000, 5_000, 1_000, 3_000),  # ahead of the watermark and earlier: keep, fires early
    (5_000, 5_000, 1_000, 5_000),
    (7_000, 5_000, 1_000, 5_000),  # later than needed: move it earlier
    (1_000, 5_000, 1_000, 5_000),  # the watermark has reached it: replace
    (3_000, None, 1_000, None),  # nothing left to settle: remove
])
def test_a_timer_is_kept_while_it_is_ahead_and_no_later_than_needed(
        old: int | None, new: int | None, wm_ms: int, kept: int | None) -> None:
    assert timer_to_keep(old, new, wm_ms * 1_000_000) == kept


def _spark_like(ops: list, keep: bool) -> tuple[list[tuple[int, str]], int]:
    """One key, one op per micro-batch then idle batches, timers fired as Spark fires them
    (when the watermark passes them; the fired timer is gone). Returns (batch, verdict) pairs
    and the number of timer calls (register + delete) made."""
    s = settings(grace=2 * SECOND)
    data, calls, found = None, 0, []
    frags = [fr for op in ops if op.type != "invoke" for fr in _split(op)]
    for b in range(40):
        wm = b * SECOND // 2  # the watermark moves half a second per batch
        kf = KeyFold("p", 1, s) if data is None else KeyFold.from_bytes("p", data, s)
        out = kf.batch([frags[b]], None, wm) if b < len(frags) else []
        if kf.timer_ms is not None and kf.timer_ms * 1_000_000 <= wm:
            out += kf.wake(wm)  # Spark removed the fired timer (wake forgets it)
        found += [(b, r["atype"]) for r in out if r["kind"] == "anomaly"]
        new = kf.next_timer_ms(wm)
        new = timer_to_keep(kf.timer_ms, new, wm) if keep else new
        calls += (new != kf.timer_ms) * ((kf.timer_ms is not None) + (new is not None))
        kf.timer_ms = new  # as the processor's _save: the timer travels in the state
        data = kf.to_bytes()
    return found, calls


def test_keeping_timers_decides_in_the_same_batch_with_fewer_timer_calls() -> None:
    # A key fed one send per batch, then a poll that skips all but the last value, then
    # nothing: the lost writes' verdict is due after the last batch with data, from a timer.
    ops = history(*[(0, "ok", "send", [send(1, 10 + n, n)]) for n in range(9)],
                  (1, "ok", "poll", [poll({1: [(8, 18)]})]))
    for n, op in enumerate(ops):
        op.time = n * SECOND // 2  # one op per batch, at the batch's time
    moved, moved_calls = _spark_like(ops, keep=False)
    kept, kept_calls = _spark_like(ops, keep=True)
    assert moved and {a for _, a in moved} == {"lost-write"}
    assert min(b for b, _ in moved) > len(ops)  # decided by a timer, not by a batch of data
    assert kept == moved
    assert kept_calls < moved_calls


def _with_copies(ops: list, every: int, lag: int) -> list:
    """``ops`` with every ``every``-th completion sent again ``lag`` ops later (same index and
    time): what the events topic held after broker failovers (an idempotent producer's resend
    under a new epoch)."""
    out = list(ops)
    copies = [op for i, op in enumerate(ops) if op.type != "invoke" and i % every == 0]
    for op in reversed(copies):
        out.insert(min(len(out), out.index(op) + lag + 1), op)
    return out


@pytest.mark.parametrize("lag", [0, 3, 40])
@pytest.mark.parametrize("batch", [1, 7, 1000])
def test_an_op_event_delivered_twice_is_folded_once(lag: int, batch: int) -> None:
    ops = list(healthy(600, SynthConfig(keys=3, processes=3, keys_per_process=2)))
    once = run_online(ops, batch=batch)
    twice = run_online(_with_copies(ops, 5, lag), batch=batch)
    assert verdicts(twice["evidence"]) == verdicts(once["evidence"]) == {}


def test_a_copy_of_an_anomalous_op_is_not_a_second_verdict() -> None:
    anomaly, ops = CASES["duplicate"]
    once = run_online(ops, batch=2)
    twice = run_online(_with_copies(ops, 1, 1), batch=2)
    assert verdicts(twice["evidence"]) == verdicts(once["evidence"])
    assert anomaly in verdicts(once["evidence"])
