"""Committed offsets (``kmon.checker.offsets``): example histories, online against offline, and a
model of the register that a consumer group's committed offset is."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kmon.checker import CheckConfig, Checker
from kmon.checker.anomaly import OFFSET_COMMIT_LOST, OFFSET_COMMIT_REREAD, OFFSET_COMMIT_SKIP
from kmon.checker.state import KeyState
from kmon.history.model import Op, OpMeta, Start

G = "probe-assign"
K = 7
S = 1_000_000_000


class History:
    """Ops by explicit times (seconds): each call adds an invoke and, unless ``ty`` is None,
    its completion."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def _op(self, p: int, ty: str, f: str, t: float, value: Any, meta: OpMeta | None) -> None:
        self.ops.append(Op(len(self.ops), int(t * S), p, ty, f, value, meta=meta))

    def commit(self, p: int, off: int, t0: float, t1: float, ty: str | None = "ok",
               key: Any = K) -> None:
        self._op(p, "invoke", "commit", t0, [("commit", key, off)], OpMeta(group=G))
        if ty is not None:
            self._op(p, ty, "commit", t1, [("commit", key, off)],
                     OpMeta(group=G, invoke_time=int(t0 * S)))

    def txn(self, p: int, off: int, t0: float, t1: float, ty: str = "ok") -> None:
        self._op(p, "invoke", "txn", t0, [("poll", None)], None)
        self._op(p, ty, "txn", t1, [("poll", {K: [(off - 1, off - 1)]}), ("commit", K, off)],
                 OpMeta(group=G, invoke_time=int(t0 * S)))

    def start(self, p: int, off: int | None, t0: float, t1: float,
              source: str = "committed") -> None:
        self._op(p, "invoke", "assign", t0, [K], None)
        self._op(p, "ok", "assign", t1, [K], OpMeta(group=G, starts={K: Start(off, source)},
                                                     invoke_time=int(t0 * S)))

    def poll(self, p: int, off: int, t0: float, t1: float) -> None:
        self._op(p, "invoke", "poll", t0, [("poll", None)], None)
        self._op(p, "ok", "poll", t1, [("poll", {K: [(off, off)]})],
                 OpMeta(invoke_time=int(t0 * S)))


def offline(h: History) -> list[tuple[str, Any]]:
    report = Checker(CheckConfig(cycles=False)).run(h.ops)
    return sorted((t, r["offset"]) for t, recs in report.errors.items()
                  if t.startswith("offset-commit") for r in recs)


def online(h: History, step: int = 3) -> list[tuple[str, Any]]:
    """The same history through the online fold: ``step`` ops at a time, the watermark one
    second behind the newest event, 5 s of grace."""
    checker = Checker(CheckConfig(cycles=False, grace_ns=5 * S, unseen_grace_ns=10 * S))
    found = []
    for i in range(0, len(h.ops), step):
        for op in h.ops[i:i + step]:
            checker.apply(op)
        checker.advance(max(op.time for op in h.ops[:i + step]) - S)
        found += checker.sink.anomalies
        checker.sink.clear()
    checker.advance(1 << 62)
    found += checker.sink.anomalies
    return sorted((a.type, a.record["offset"]) for a in found if a.type.startswith("offset"))


def both(h: History) -> list[tuple[str, Any]]:
    result = offline(h)
    for step in (1, 2, 5, 100):
        assert online(h, step) == result, step
    return result


# -- examples ------------------------------------------------------------------------------


def test_a_start_at_the_last_commit_is_fine():
    h = History()
    h.commit(1, 10, 1, 2)
    h.commit(1, 20, 3, 4)
    h.start(2, 20, 5, 6)
    assert both(h) == []


def test_a_lost_commit():
    h = History()
    h.commit(1, 10, 1, 2)
    h.start(2, None, 3, 4, source="reset")
    assert both(h) == [(OFFSET_COMMIT_LOST, None)]


def test_a_regressed_commit_rereads():
    h = History()
    h.commit(1, 80, 1, 2)
    h.commit(1, 120, 3, 5)
    h.start(2, 80, 9, 10)
    assert both(h) == [(OFFSET_COMMIT_REREAD, 80)]


def test_an_offset_nobody_committed_skips():
    h = History()
    h.commit(1, 80, 1, 2)
    h.start(2, 95, 9, 10)
    assert both(h) == [(OFFSET_COMMIT_SKIP, 95)]


def test_racing_commits_may_leave_either():
    # Assign-mode consumers share a group without generations: the later-acknowledged commit
    # need not be the one that stays.
    h = History()
    h.commit(1, 120, 1, 5)
    h.commit(3, 80, 4, 6)
    h.start(2, 120, 9, 10)
    h.start(4, 80, 9, 10)
    assert both(h) == []


def test_a_commit_acknowledged_after_another_began_replaces_it_only_if_it_began_later():
    h = History()
    h.commit(1, 120, 1, 2)
    h.commit(3, 80, 3, 4)  # began after 120's ended: 120 is gone
    h.start(2, 120, 9, 10)
    assert both(h) == [(OFFSET_COMMIT_SKIP, 120)]


def test_a_failed_commit_explains_nothing_an_info_commit_explains():
    h = History()
    h.commit(1, 80, 1, 2)
    h.commit(1, 120, 3, 4, ty="fail")
    h.start(2, 120, 9, 10)
    assert both(h) == [(OFFSET_COMMIT_SKIP, 120)]
    h = History()
    h.commit(1, 80, 1, 2)
    h.commit(1, 120, 3, 4, ty="info")
    h.start(2, 120, 9, 10)
    assert both(h) == []


def test_a_commit_never_completed_may_have_landed():
    h = History()  # (its process was killed: the invoke is all there is)
    h.commit(1, 80, 1, 2)
    h.commit(1, 120, 3, 4, ty=None)
    h.start(2, 120, 9, 10)
    assert both(h) == []


def test_an_in_doubt_commit_lands_within_its_window_or_never():
    h = History()
    h.commit(1, 80, 1, 2, ty="info")
    h.commit(3, 90, 200, 201)  # began long after 80 could last land
    h.start(2, 80, 300, 301)
    assert both(h) == [(OFFSET_COMMIT_REREAD, 80)]


def test_before_any_acknowledged_commit_anything_goes():
    # The group may hold an offset committed before the history began (a restarted probe).
    h = History()
    h.commit(1, 80, 5, 10)
    h.start(2, 33, 4, 6)
    h.start(3, None, 4, 6, source="reset")
    assert both(h) == []


def test_transactional_commits_count_if_the_transaction_commits():
    h = History()
    h.txn(1, 50, 1, 2)
    h.txn(1, 60, 3, 4, ty="fail")  # aborted: the offset stays at 50
    h.start(2, 50, 9, 10)
    assert both(h) == []
    h = History()
    h.txn(1, 50, 1, 2)
    h.start(2, 60, 9, 10)
    assert both(h) == [(OFFSET_COMMIT_SKIP, 60)]


def test_a_transaction_completing_after_the_start_that_read_its_offsets_explains_it():
    # Its offsets are known from its completion only; the start waits for it (SETTLE_NS).
    h = History()
    h.commit(1, 8, 1, 2)
    h.start(2, 9, 5.0, 5.2)
    h.txn(3, 9, 4.9, 5.25)
    assert both(h) == []
    h = History()
    h.commit(1, 8, 1, 2)
    h.start(2, 9, 5.0, 5.2)
    h.txn(3, 9, 4.9, 20.0)  # a commit call that hung: the transaction committed meanwhile
    assert both(h) == []


def test_a_client_positioned_start_is_judged_by_its_first_read():
    # librdkafka 2.16 restarting a re-assigned partition at the log start although an offset
    # is committed (tests/integration/test_probe_start_offsets.py, start_positions=client).
    h = History()
    h.commit(1, 20, 1, 2)
    h.start(2, None, 3, 4, source="client")
    h.poll(2, 0, 5, 6)
    assert both(h) == [(OFFSET_COMMIT_REREAD, 0)]
    h = History()
    h.commit(1, 20, 1, 2)
    h.start(2, None, 3, 4, source="client")
    h.poll(2, 21, 5, 6)  # past a transaction marker at 20: not judged
    assert both(h) == []


def test_a_restored_start_is_not_judged():
    h = History()
    h.commit(1, 20, 1, 2)
    h.start(2, 5, 3, 4, source="restored")
    assert both(h) == []


def test_evidence_names_group_committer_and_reader():
    h = History()
    h.commit(1, 80, 1, 2)
    h.commit(1, 120, 3, 5)
    h.start(2, 80, 9, 10)
    [record] = Checker(CheckConfig(cycles=False)).run(h.ops).errors[OFFSET_COMMIT_REREAD]
    assert record == {"key": K, "group": G, "offset": 80, "expected": [120], "writer": 3,
                      "reader": 5, "process": 2, "source": "committed"}


def test_the_state_round_trips_with_pending_verdicts():
    checker = Checker(CheckConfig(cycles=False, grace_ns=5 * S, unseen_grace_ns=10 * S))
    h = History()
    h.commit(1, 80, 1, 2)
    h.commit(1, 120, 3, 5)
    h.commit(3, 130, 6, 7, ty=None)
    h.start(2, 80, 9, 10)
    h.start(4, None, 9, 10, source="client")
    for op in h.ops:
        checker.apply(op)
    before = checker.keys[K]
    after = KeyState.from_bytes(before.to_bytes())
    assert after.groups[G].rows() == before.groups[G].rows()


# -- bounded -------------------------------------------------------------------------------


def test_writes_kept_stay_bounded_while_commits_go_on():
    checker = Checker(CheckConfig(cycles=False, grace_ns=5 * S, unseen_grace_ns=10 * S))
    h = History()
    t = 1.0
    sizes = []
    for n in range(3000):  # ten commits a second for five minutes, a start every 10 s
        h.commit(n % 4, n, t, t + 0.05)
        if n % 100 == 0:
            h.start(9, n, t + 0.06, t + 0.08)
        t += 0.1
        if n % 50 == 49:
            for op in h.ops:
                checker.apply(op)
            h.ops.clear()
            checker.advance(int(t * S) - S)
            sizes.append(len(checker.keys[K].groups[G].writes))
    assert checker.sink.anomalies == []
    # about grace + SETTLE_NS + KEPT_NS (95 s) of commits, whatever the run's length
    assert max(sizes[-10:]) <= 1024
    assert max(sizes[-10:]) == max(sizes[len(sizes) // 2:])


# -- the register model ----------------------------------------------------------------------


def _register_history(seed: int, lie: bool) -> tuple[History, bool]:
    """Processes committing offsets and looking them up, each op taking effect at a random
    point of its interval, in that order: a linearizable register. With ``lie``, one lookup
    after everything settled returns a value the register cannot hold then; the second item
    says whether a lie was told."""
    rng = random.Random(seed)
    events = []  # (effect time, kind, process, t0, t1, offset, outcome)
    clock = {p: 0.0 for p in range(4)}
    for _ in range(rng.randint(1, 25)):
        p = rng.randrange(4)
        t0 = clock[p] + rng.uniform(0.01, 2)
        t1 = t0 + rng.uniform(0.01, 3)
        clock[p] = t1
        kind = "lookup" if rng.random() < 0.3 else "commit"
        outcome = rng.choice(("ok", "ok", "ok", "fail", "info")) if kind == "commit" else "ok"
        events.append((rng.uniform(t0, t1), kind, p, t0, t1, rng.randrange(5) * 10, outcome))
    register: int | None = None  # the state before the history: unknown to the checker
    ops = []
    for _effect, kind, p, t0, t1, off, outcome in sorted(events):
        if kind == "commit":
            if outcome != "fail":
                register = off
            ops.append((t0, "commit", p, t0, t1, off, outcome))
        else:
            ops.append((t0, "lookup", p, t0, t1, register, outcome))
    told = False
    if lie:
        settled = max(t1 for _, _, _, _, t1, _, _ in ops) + 200
        acked = [o for o in ops if o[1] == "commit" and o[6] == "ok"]
        if acked and register is not None:
            ops.append((settled, "lookup", 9, settled, settled + 1, register + 5, "ok"))
            told = True
    h = History()
    for _, kind, p, t0, t1, off, outcome in sorted(ops, key=lambda o: o[0]):
        if kind == "commit":
            h.commit(p, off, t0, t1, outcome)
        else:
            h.start(p, off, t0, t1, "committed" if off is not None else "reset")
    h.ops.sort(key=lambda op: (op.time, op.index))
    for i, op in enumerate(h.ops):
        op.index = i
    return h, told


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_a_linearizable_register_is_never_flagged(seed: int):
    h, _ = _register_history(seed, lie=False)
    assert both(h) == []


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_a_value_the_register_cannot_hold_is_always_flagged(seed: int):
    h, told = _register_history(seed, lie=True)
    found = both(h)
    assert len(found) == (1 if told else 0)
