"""Model-based tests: a model Kafka beside the checker, after Confluent's tiered-storage tests.

A ``RuleBasedStateMachine`` drives an in-memory model of partitions and clients: sends (some
completing only after polls already saw them), transactions that commit or abort with the
consumer rewinding after an abort, sends of unknown outcome, assigns, rebalances that move a
consumer back, and crashes. Each run injects at most one kind of fault, chosen up front:

    drop      an acknowledged record vanishes (lost write)
    expose    an aborted transaction's record becomes visible (aborted read)
    duplicate an acknowledged record appears again at a later offset
    conflict  a poll returns a different value at an offset already read
    tear      a committed transaction loses one of its records (torn transaction)
    skip      a consumer jumps over a visible record in a poll

A run whose rules never injected its fault (their conditions unmet: no aborted record to
expose, no multi-key commit to tear, no three visible records to skip...) injects it at the end
the way the rule would, and a record that vanished gets a healthy write after it, so that every
run that chose a fault has it injected and detectable (``--hypothesis-show-statistics`` counts
runs per fault, injected mid-run or at the end, and whether the checker found it).

Invariants after every step: the checker, fed the history so far, has reported nothing a
healthy run could not. At the end, after every key is read in full: a fault-free run yields no
anomaly at all; a faulty run yields exactly the fault's anomalies (its primary type, about the
injected values, and only the types the fault implies). Finally the same history, reordered
across processes and checked online with a grace period, gives the same verdicts.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from kmon.checker import CheckConfig, Checker
from kmon.history.model import Op, Rebalance

KEYS = (0, 1, 2)
PROCESSES = (0, 1, 2)
FAULTS = (None, "drop", "expose", "duplicate", "conflict", "tear", "skip")

# What each fault may legitimately show up as, besides its primary anomaly.
IMPLIED = {
    None: set(),
    # a vanished record is skipped by every poll that reads past it
    "drop": {"lost-write", "poll-skip", "int-poll-skip"},
    # once visible, the aborted record was skipped by consumers that passed it while invisible
    "expose": {"G1a", "torn-transaction", "poll-skip", "int-poll-skip"},
    "duplicate": {"duplicate"},
    "conflict": {"inconsistent-offsets"},
    "tear": {"torn-transaction", "lost-write", "poll-skip", "int-poll-skip"},
    "skip": {"poll-skip", "int-poll-skip"},
}
PRIMARY = {"drop": "lost-write", "expose": "G1a", "duplicate": "duplicate",
           "conflict": "inconsistent-offsets", "tear": "torn-transaction", "skip": None}


class Record:
    __slots__ = ("offset", "value", "visible")

    def __init__(self, offset: int, value: int | None, visible: bool) -> None:
        self.offset, self.value, self.visible = offset, value, visible


class KafkaModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.logs: dict[int, list[Record]] = {k: [] for k in KEYS}
        self.next_offset = dict.fromkeys(KEYS, 0)
        self.pos = {p: dict.fromkeys(KEYS, 0) for p in PROCESSES}  # index into the log
        self.history: list[Op] = []
        self.time = 0
        self.seq = 0
        self.pending: list[Op] = []  # completions to emit later (ack after the poll saw it)
        self.fault: str | None = None
        self.injected: set[int] = set()  # values the fault is about
        self.live = dict.fromkeys(PROCESSES, 0)  # process generation (crash -> new id)
        self.checker = Checker(CheckConfig(cycles=False))
        self.fed = 0

    # -- plumbing -------------------------------------------------------------------------
    def pid(self, p: int) -> int:
        return p + 10 * self.live[p]

    def emit(self, p: int, type: str, f: str, value: object, rebalance: tuple = ()) -> Op:
        op = Op(index=len(self.history), time=self.time, process=self.pid(p), type=type, f=f,
                value=value, rebalance_log=rebalance)
        self.time += 1_000
        self.history.append(op)
        return op

    def defer(self, p: int, type: str, f: str, value: object) -> None:
        self.pending.append(Op(index=-1, time=0, process=self.pid(p), type=type, f=f,
                               value=value))

    def flush(self, p: int | None = None) -> None:
        keep = []
        for op in self.pending:
            if p is None or op.process == self.pid(p):
                op.index, op.time = len(self.history), self.time
                self.time += 1_000
                self.history.append(op)
            else:
                keep.append(op)
        self.pending = keep

    def value(self) -> int:
        self.seq += 1
        return self.seq

    def append(self, k: int, v: int | None, visible: bool) -> int:
        off = self.next_offset[k]
        self.logs[k].append(Record(off, v, visible))
        self.next_offset[k] += 1
        return off

    def read(self, p: int, k: int, limit: int, skip: bool = False) -> list[tuple[int, int]]:
        log, i, got = self.logs[k], self.pos[p][k], []
        visible = [n for n in range(i, len(log)) if log[n].visible]
        if skip and limit >= 2 and len(visible) >= 3:
            # the consumer reads one record, jumps over the next, and reads the one after
            first, jumped, after = visible[:3]
            self.injected.add(log[jumped].value)
            self.pos[p][k] = after + 1
            return [(log[first].offset, log[first].value), (log[after].offset, log[after].value)]
        while i < len(log) and len(got) < limit:
            r = log[i]
            i += 1
            if r.visible:
                got.append((r.offset, r.value))
        self.pos[p][k] = i
        return got

    # -- healthy behaviour ----------------------------------------------------------------
    @initialize(fault=st.sampled_from(FAULTS))
    def choose_fault(self, fault: str | None) -> None:
        self.fault = fault

    @rule(p=st.sampled_from(PROCESSES), k=st.sampled_from(KEYS), late=st.booleans(),
          outcome=st.sampled_from(["ok", "ok", "ok", "info-landed", "info-lost"]))
    def send(self, p: int, k: int, late: bool, outcome: str) -> None:
        self.flush(p)
        v = self.value()
        self.emit(p, "invoke", "send", [("send", k, v, None)])
        if outcome == "info-lost":
            self.emit(p, "info", "send", [("send", k, v, None)])
            self.crash(p)
            return
        off = self.append(k, v, visible=True)
        if outcome == "info-landed":
            self.emit(p, "info", "send", [("send", k, v, None)])
            self.crash(p)
            return
        done = [("send", k, v, off)]
        if late:
            self.defer(p, "ok", "send", done)
        else:
            self.emit(p, "ok", "send", done)

    @rule(p=st.sampled_from(PROCESSES), ks=st.sets(st.sampled_from(KEYS), min_size=1),
          abort=st.booleans(), poll_first=st.booleans())
    def txn(self, p: int, ks: set[int], abort: bool, poll_first: bool) -> None:
        self.flush(p)
        ks = sorted(ks)
        vals = [self.value() for _ in ks]
        self.emit(p, "invoke", "txn", [("send", k, v, None) for k, v in zip(ks, vals, strict=True)]
                  + [("poll", None)])
        start = dict(self.pos[p])
        reads = {k: self.read(p, k, 3) for k in KEYS} if poll_first else {}
        sends = [("send", k, v, self.append(k, v, visible=not abort))
                 for k, v in zip(ks, vals, strict=True)]
        for k in ks:
            self.append(k, None, visible=False)  # commit / abort marker
        if abort:
            self.pos[p] = start  # rewind to the transaction's first polled offsets
        elif self.fault == "tear" and len(ks) > 1 and not self.injected:
            rec = next(r for r in self.logs[ks[-1]] if r.value == vals[-1])
            rec.visible = False
            self.injected.update(vals)
        self.emit(p, "fail" if abort else "ok", "txn",
                  [*sends, ("poll", {k: r for k, r in reads.items() if r})])

    @rule(p=st.sampled_from(PROCESSES), limit=st.integers(1, 4), skip=st.booleans())
    def poll(self, p: int, limit: int, skip: bool) -> None:
        self.flush(p)
        self.emit(p, "invoke", "poll", [("poll", None)])
        skipping = skip and self.fault == "skip"
        reads = {k: self.read(p, k, limit, skip=skipping) for k in KEYS}
        self.emit(p, "ok", "poll", [("poll", {k: r for k, r in reads.items() if r})])

    @rule(p=st.sampled_from(PROCESSES), k=st.sampled_from(KEYS), back=st.integers(0, 5))
    def rebalance(self, p: int, k: int, back: int) -> None:
        """A rebalance moves the consumer back to an earlier (committed) position."""
        self.flush(p)
        self.pos[p][k] = max(0, self.pos[p][k] - back)
        self.emit(p, "invoke", "poll", [("poll", None)])
        got = self.read(p, k, 2)
        self.emit(p, "ok", "poll", [("poll", {k: got} if got else {})],
                  rebalance=(Rebalance("assigned", (k,)),))

    @rule(p=st.sampled_from(PROCESSES), k=st.sampled_from(KEYS))
    def assign_from_start(self, p: int, k: int) -> None:
        self.flush(p)
        self.emit(p, "invoke", "assign", list(KEYS))
        self.pos[p] = dict.fromkeys(KEYS, 0)
        self.emit(p, "ok", "assign", list(KEYS))

    @rule(p=st.sampled_from(PROCESSES))
    def crash(self, p: int) -> None:
        self.flush(p)
        self.emit(p, "invoke", "crash", None)
        self.emit(p, "info", "crash", None)
        self.live[p] += 1
        self.pos[p] = dict.fromkeys(KEYS, 0)

    # -- faults ---------------------------------------------------------------------------
    @precondition(lambda self: self.fault == "drop")
    @rule(k=st.sampled_from(KEYS), p=st.sampled_from(PROCESSES))
    def drop_acked(self, k: int, p: int) -> None:
        self.flush(p)
        v = self.value()
        self.emit(p, "invoke", "send", [("send", k, v, None)])
        off = self.append(k, v, visible=False)  # acknowledged, then gone
        self.emit(p, "ok", "send", [("send", k, v, off)])
        self.injected.add(v)

    def aborted_records(self) -> list[Record]:
        return [r for k in KEYS for r in self.logs[k]
                if r.value is not None and not r.visible and r.value not in self.injected]

    @precondition(lambda self: self.fault == "expose" and self.aborted_records())
    @rule(p=st.sampled_from(PROCESSES))
    def expose_aborted(self, p: int) -> None:
        for k in KEYS:
            for r in self.logs[k]:
                if r.value is not None and not r.visible and r.value not in self.injected:
                    r.visible = True  # an aborted record becomes readable
                    self.injected.add(r.value)
                    return

    @precondition(lambda self: self.fault == "duplicate" and any(self.logs.values()))
    @rule(k=st.sampled_from(KEYS))
    def duplicate_record(self, k: int) -> None:
        acked = [r for r in self.logs[k] if r.visible and r.value not in self.injected]
        if acked:
            v = acked[0].value
            self.append(k, v, visible=True)
            self.injected.add(v)

    @precondition(lambda self: self.fault == "conflict" and any(self.logs.values()))
    @rule(p=st.sampled_from(PROCESSES), k=st.sampled_from(KEYS))
    def conflicting_poll(self, p: int, k: int) -> None:
        self.flush(p)
        seen = [r for r in self.logs[k] if r.visible]
        if seen:
            # a one-off reader (its own process) gets a different value at a read offset
            bogus = 1_000_000 + self.value()
            reader = 1000 + self.value()
            for type, value in (("invoke", [("poll", None)]),
                                ("ok", [("poll", {k: [(seen[0].offset, bogus)]})])):
                self.history.append(Op(index=len(self.history), time=self.time, process=reader,
                                       type=type, f="poll", value=value))
                self.time += 1_000
            self.injected.add(bogus)

    # -- invariants -----------------------------------------------------------------------
    @invariant()
    def no_false_alarm_so_far(self) -> None:
        """Whatever the fault, nothing outside what it implies is ever reported."""
        for op in self.history[self.fed:]:
            self.checker.apply(op)
        self.fed = len(self.history)
        found = {a.type for a in self.checker.sink.anomalies}
        assert found <= IMPLIED[self.fault], (self.fault, found)

    # -- steering: every fault chosen is injected, and detectable ---------------------------
    @precondition(lambda self: self.fault is not None and not self.injected)
    @rule()
    def inject_fault(self) -> None:
        self.inject_now()

    def inject_now(self) -> None:
        """The fault, made to happen: the steps that meet its rule's conditions, then the rule
        (left to the rules alone, two runs in three that chose a fault never met them). A rule
        of its own mid-run, and at the end of a run that has not injected it yet."""
        p, k = 0, 0
        if self.fault == "drop":
            self.drop_acked(k, p)
        elif self.fault == "expose":
            self.txn(p, {k}, abort=True, poll_first=False)
            self.expose_aborted(p)
        elif self.fault == "duplicate":
            self.send(p, k, late=False, outcome="ok")
            self.duplicate_record(k)
        elif self.fault == "conflict":
            self.send(p, k, late=False, outcome="ok")
            self.conflicting_poll(p, k)
        elif self.fault == "tear":
            self.txn(p, set(KEYS), abort=False, poll_first=False)
        elif self.fault == "skip":
            for _ in range(3):
                self.send(p, k, late=False, outcome="ok")
            self.crash(p)  # a fresh consumer, from the start of every key
            self.poll(p, 4, True)

    def write_past_hidden(self) -> None:
        """A record that vanished is provably lost only once readers go past it: a healthy
        write after it on its key, for the final reads to cross it."""
        for k in KEYS:
            log = self.logs[k]
            hidden = [r for r in log if r.value in self.injected and not r.visible]
            if hidden and not any(q.visible and q.offset > hidden[-1].offset for q in log):
                self.send(0, k, late=False, outcome="ok")

    def teardown(self) -> None:
        self.flush()
        injected = "mid-run" if self.injected else "no"
        if self.fault is not None and not self.injected:
            self.inject_now()
            injected = "at-end" if self.injected else "no"
        self.write_past_hidden()
        for p in PROCESSES:  # final reads: a fresh consumer reads every key in full
            self.crash(p)
            self.assign_from_start(p, 0)
            while True:
                before = dict(self.pos[p])
                self.poll(p, 4, False)
                if self.pos[p] == before:
                    break
        report = Checker(CheckConfig()).run(self.history)
        found = set(report.errors)
        assert found <= IMPLIED[self.fault], (self.fault, report.errors)
        if self.fault is None:
            assert report.errors == {} and report.valid
            assert sum(report.unseen_counts.values()) == 0
        primary = PRIMARY[self.fault] if self.fault else None
        detected = bool(found & ({primary} if primary else IMPLIED[self.fault]))
        event(f"fault={self.fault} injected={injected} detected={detected}")
        if self.fault is not None:
            # Steered: every fault is injected, in a way the checker can see.
            assert self.injected, f"fault {self.fault} was never injected"
            if primary:
                assert self._primary_expected(primary), (self.fault, "not detectable")
                assert primary in found, (self.fault, report.errors)
        for recs in report.errors.values():
            for r in recs:
                assert _about(r) & self.injected, (self.fault, r, self.injected)
        if self.fault == "skip" and self.injected:
            assert found & {"poll-skip", "int-poll-skip"}
        _same_online(self.history, report)

    def _primary_expected(self, primary: str) -> bool:
        """Did the fault actually happen in a way the checker can see?"""
        if primary in ("lost-write", "torn-transaction"):
            # only when readers went past an injected, invisible record
            return any(
                r.value in self.injected and not r.visible
                and any(q.visible and q.offset > r.offset for q in self.logs[k])
                for k in KEYS for r in self.logs[k])
        return bool(self.injected)


def _about(r: dict) -> set:
    """Every value an anomaly record mentions."""
    vals = set()
    for f in ("value", "values", "skipped"):
        x = r.get(f)
        if isinstance(x, list):
            vals.update(x)
        elif x is not None:
            vals.add(x)
    for f in ("visible", "invisible"):
        for item in r.get(f, ()):
            vals.add(item[1])
    return vals


def _same_online(history: list[Op], offline) -> None:
    """Reorder across processes (per-process order kept), check online: same verdicts."""
    rng = random.Random(len(history))
    queues: dict = {}
    for op in history:
        queues.setdefault(op.process, []).append(op)
    order = []
    while queues:
        p = rng.choice(sorted(queues))
        order.append(queues[p].pop(0))
        if not queues[p]:
            del queues[p]
    grace = 10**15
    online = Checker(CheckConfig(cycles=False, grace_ns=grace))
    for n, op in enumerate(order):
        online.apply(op)
        if n % 7 == 0:
            online.advance(op.time - grace)
    report = online.finish()
    assert _shape(report.errors) == _shape(offline.errors), (report.errors, offline.errors)


def _shape(errors: dict) -> dict:
    """Order-independent summary of a report's errors: per type, the values involved."""
    out = {}
    for t, recs in errors.items():
        if t in ("poll-skip", "nonmonotonic-poll", "nonmonotonic-send", "int-poll-skip",
                 "int-nonmonotonic-poll"):
            continue  # reordering changes which ops the checker pairs, not what it finds
        out[t] = sorted(sorted(map(str, _about(r))) for r in recs)
    return out


TestKafkaModel = KafkaModel.TestCase
TestKafkaModel.settings = settings(
    max_examples=400, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
