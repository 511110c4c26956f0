"""The whole checker in one process: every key's fold, the transaction stage, the cycle search.

``kmon check`` runs this over a history file; tests and benchmarks use it directly. The online
monitor runs the same pieces spread over Spark (per-key folds and the transaction stage keyed
by writer), fed with fragments split the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, cast

from kmon.checker import fold, offsets, realtime_lag
from kmon.checker.anomaly import (
    INT_NONMONOTONIC_POLL,
    INT_NONMONOTONIC_SEND,
    NONMONOTONIC_POLL,
    NONMONOTONIC_SEND,
    Anomaly,
)
from kmon.checker.cycles import Graph, add_edge, find_cycles
from kmon.checker.policy import allowed_anomalies, invalidating
from kmon.checker.poll_skip import count_versions
from kmon.checker.report import Report, merge_anomalies
from kmon.checker.send_order import in_version_order
from kmon.checker.share import ShareSettings
from kmon.checker.sink import Sink
from kmon.checker.state import KeyState
from kmon.checker.torn import TxnStage
from kmon.checker.unseen import unseen_values
from kmon.checker.values import EMPTY
from kmon.history.fragment import Fragment, note_leaders, split_fields, split_invoke
from kmon.history.model import MOP_FS, OP_FS, TICK_PROCESS, Op

# Final copies of the op model's constants: compiled code reads these directly, where a name
# imported from an interpreted module is a dict lookup at every use.
_OP_FS: Final = frozenset(OP_FS)
_TICK_PROCESS: Final[object] = TICK_PROCESS
_BACKWARDS: Final = frozenset((NONMONOTONIC_POLL, NONMONOTONIC_SEND, INT_NONMONOTONIC_POLL,
                                INT_NONMONOTONIC_SEND))
# ``apply`` tests ``f in MOP_FS`` as string comparisons: they must name the same fs.
assert frozenset(("send", "poll", "txn")) == MOP_FS


@dataclass(frozen=True, slots=True)
class CheckConfig:
    ww_deps: bool = False  # infer write-write dependencies from log order (for G0/G1c)
    isolation: str = "read_committed"  # what the consumers were configured with
    grace_ns: int | None = None  # None: offline, decide absence at the end of the history
    unseen_grace_ns: int | None = None
    # Online: how long the transaction stage keeps a writer (at least two grace periods).
    txn_retention_ns: int | None = None
    collect_lags: bool = True
    cycles: bool = True  # search G0/G1c (offline only: keeps every op's highest reads)
    # Share groups (KIP-932; ``share``): the group's share.record.lock.duration.ms and
    # share.delivery.count.limit (Kafka's defaults), and the clock skew allowed between probes
    # and brokers.
    share_lock_ns: int = 30_000_000_000
    share_delivery_limit: int = 5
    share_skew_ns: int = 1_000_000_000

    def fold_config(self) -> fold.FoldConfig:
        shares = ShareSettings(self.share_lock_ns, self.share_delivery_limit, self.share_skew_ns)
        return fold.FoldConfig(self.grace_ns, self.unseen_grace_ns, self.collect_lags,
                               share_settings=shares)


class Checker:
    """Feed ops in history order with ``apply``; ``finish`` returns the report."""

    def __init__(self, config: CheckConfig | None = None) -> None:
        self.config = config or CheckConfig()
        allowed_anomalies(self.config.isolation)  # fail fast on a bad isolation level
        self.fold_config = self.config.fold_config()
        # Online-style runs (a grace period) keep millisecond ack times, offline exact ones.
        self.compact = self.config.grace_ns is not None
        self.keys: dict[Any, KeyState] = {}
        self.txns = TxnStage(self.config.grace_ns, self.config.txn_retention_ns)
        self.sink = Sink()
        self.invoked_at: dict[Any, int] = {}  # process -> time of its pending invocation
        self.tracked: dict[Any, set[Any]] = {}  # process -> keys it consumes (for lag)
        # (reader op, key, value) of every read by an ok or info op: write-read edges
        self.reads: set[tuple[int, Any, Any]] = set()
        self.ops = 0
        self.last_time = 0  # the history's latest time: the share groups' end (``finish``)
        self.workload_ops = 0  # send/poll/txn ops: a history without any is not a test

    def key_state(self, key: Any) -> KeyState:
        st = self.keys.get(key)
        if st is None:
            st = self.keys[key] = KeyState(key, compact=self.compact)
        return st

    def apply(self, op: Op) -> None:
        # The op's fields are read once. (The op model is compiled too, so these are loads; when
        # it was interpreted, each read cost about 165 instructions.)
        f, ty, process = op.f, op.type, op.process
        # The time stays boxed (it is an int), read through Any: an invoke stores it as is, where
        # unboxing it and boxing it again allocated an int per invoke.
        t: Any = cast(Any, op).time
        # (The clock-tick test is ``model.is_clock_tick``, inline: a call into interpreted code
        # cost more than the rest of an invoke's bookkeeping. String comparisons decide the
        # workload ops before any set lookup.)
        mop = f == "send" or f == "poll" or f == "txn"  # f in MOP_FS
        if not (mop or f in _OP_FS) or (ty == "invoke" and process == _TICK_PROCESS):
            return  # nemesis and other non-client ops; the monitor's clock ticks
        self.ops += 1
        if mop:
            self.workload_ops += 1
        if t > self.last_time:
            self.last_time = t
        if ty == "invoke":
            self.invoked_at[process] = t
            if f == "commit" or f == "share-poll" or f == "ack":
                self._commit_invoked(op)
            return
        invoke_time = self.invoked_at.get(process)  # (pop with a default is a method call)
        if invoke_time is None:
            invoke_time = t
        else:
            del self.invoked_at[process]
        meta = op.meta
        if meta is not None and meta.invoke_time is not None:
            invoke_time = meta.invoke_time  # what the online monitor uses too
        if f == "crash":
            self._crash(process)
            return
        if (f == "assign" or f == "subscribe") and ty != "fail":
            self._reassigned(process, op.value)
        value = op.value
        if meta is not None and meta.group is not None:
            frags = split_fields(op.index, process, ty, f, t, value, op.rebalance_log,
                                 invoke_time, meta.group, meta.starts)
            if f == "share-poll" and meta.placements:
                note_leaders(frags, {k: pl.leader for k, pl in meta.placements.items()})
        else:
            frags = split_fields(op.index, process, ty, f, t, value, op.rebalance_log,
                                 invoke_time)
        sink, cfg, keys = self.sink, self.fold_config, self.keys
        for fr in frags:
            st = keys.get(fr.key)
            if st is None:
                st = keys[fr.key] = KeyState(fr.key, compact=self.compact)
            fold.apply(st, fr, cfg, sink)
        if sink.facts:
            self._route_facts()
        if self.config.collect_lags and ty == "ok" and f != "send":
            self._lag_of_tracked(process, f, value, frags, invoke_time)
        if self.config.cycles and ty != "fail" and mop:
            for k, pairs in op.reads().items():
                for _, v in pairs:
                    self.reads.add((op.index, k, v))

    def _commit_invoked(self, op: Op) -> None:
        """An offset commit, share poll or acknowledgement in flight: it may take effect from
        now on (``offsets``, ``share``)."""
        group = op.meta.group if op.meta is not None else None
        for fr in split_invoke(op.index, op.process, op.f, op.time, op.value, group):
            fold.apply(self.key_state(fr.key), fr, self.fold_config, self.sink)

    def _route_facts(self) -> None:
        if self.sink.facts:
            facts = list(self.sink.facts)
            self.sink.facts.clear()
            for fact in facts:
                self.txns.apply(fact, self.sink)

    def _lag_of_tracked(
        self, p: Any, f: str, value: Any, frags: list[Fragment], at: Any
    ) -> None:
        """Sample lag on keys the process consumes that this ok op did not touch.

        A process tracks the keys of its last assign (none after a subscribe), plus every key
        an ok poll or txn op of it touched, like Jepsen. (Probes list every assigned key in each
        poll, empty or not, so online the fragments carry these.)

        ``at`` is the invocation time (an int), boxed as ``apply`` holds it (without a meta,
        the invoke's own object): unboxing it and boxing it again for the samples allocated.
        """
        if f == "assign" or f == "subscribe":
            self.tracked[p] = set(value or ()) if f == "assign" else set()
            return
        if f != "poll" and f != "txn":
            return
        tracked = self.tracked.get(p)
        if tracked is None:
            tracked = self.tracked[p] = set()
        touched = {fr.key for fr in frags}
        lags, keys = self.sink.lags, self.keys
        for k in tracked:
            if k in touched:
                continue  # sampled by the fold
            st = keys.get(k)
            if st is None:
                lags.append((at, p, k, 0))
                continue
            pp = st.procs.get(p)
            pos = -1 if pp is None else pp.lag_pos
            if pos >= st.last_revealed:
                lags.append((at, p, k, 0))
            else:
                realtime_lag.sample(st, pos, at, p, self.sink)
        tracked.update(touched)  # always: even a no-op update may resize, reordering samples

    def _reassigned(self, process: Any, keys: Any) -> None:
        """Like Jepsen, a process keeps its poll and send positions only on the keys its new
        assignment covers (and those a covering assign clears: ``fold.apply``). Offline only:
        the monitor's per-key folds never see an assign of other keys."""
        covered = set(keys or ())
        for k, st in self.keys.items():
            pp = st.procs.get(process)
            if pp is not None and k not in covered:
                pp.poll_off = None
                pp.send_off = None

    def _crash(self, process: Any) -> None:
        """A crashed client's replacement consumer starts afresh: forget its positions."""
        for st in self.keys.values():
            st.procs.pop(process, None)
            if st.groups:
                offsets.crashed(st.groups, process)
        self.tracked.pop(process, None)

    def advance(self, watermark: int) -> None:
        for st in self.keys.values():
            fold.advance(st, watermark, self.fold_config, self.sink)
        self._route_facts()
        self.txns.advance(watermark)

    def run(self, ops: Iterable[Op]) -> Report:
        for op in ops:
            self.apply(op)
        return self.finish()

    def finish(self) -> Report:
        for st in self.keys.values():
            fold.finish(st, self.sink, self.fold_config, self.last_time)
        self._route_facts()
        anomalies = list(self.sink.anomalies)
        if not self.compact:
            self._settle_backward_steps(anomalies)
        if self.config.cycles:
            anomalies.extend(find_cycles(self._graph()))
        errors = merge_anomalies(anomalies)
        counts, messages = {}, {}
        for k, st in self.keys.items():
            vals = [v for v, _ in unseen_values(st)]
            if vals or st.unseen_decided:
                counts[k] = len(vals) + st.unseen_decided
                messages[k] = vals
        reason = None
        if self.workload_ops == 0:
            reason = "no send, poll or txn operations: nothing was tested"
        judged = list(errors) + (["unseen"] if any(counts.values()) else [])
        valid = reason is None and not invalidating(judged, self.config.isolation,
                                                    self.config.ww_deps)
        stats = {"ops": self.ops, "keys": len(self.keys),
                 "late-observations": sum(st.late for st in self.keys.values())}
        return Report(valid, errors, counts, messages, list(self.sink.lags),
                      self.config.isolation, reason, stats, self.config.ww_deps)

    def _settle_backward_steps(self, anomalies: list[Anomaly]) -> None:
        """Offline, the nonmonotonic records as the whole history has them (Jepsen's): ``delta``
        in the final version order, not in the part known when the step was found (values
        read or acknowledged later between its offsets count too), and a send compared with an
        info send whose value never entered the version order is no step. Online the window
        has moved on: records stand as emitted."""
        drop = []
        for a in anomalies:
            if a.type not in _BACKWARDS:
                continue
            st = self.keys.get(a.record["key"])
            first, second = a.record["offsets"]
            if st is None or second > first:
                continue
            if a.type == NONMONOTONIC_SEND and not in_version_order(st, first,
                                                                     a.record["values"][0]):
                drop.append(a)  # an info send nobody ever read: no order (between_ops)
            a.record["delta"] = -count_versions(st, second, first)
        for a in drop:
            anomalies.remove(a)

    def _graph(self) -> Graph:
        g: Graph = {}
        for reader, key, value in self.reads:
            st = self.keys[key]
            w = st.writer_of(st.code(value))
            if w.op >= 0 and w.completed() and not w.failed():
                add_edge(g, w.op, reader, "wr", key, value)
        if self.config.ww_deps:
            for key, st in self.keys.items():
                _ww_edges(g, key, st)
        return g


def _ww_edges(g: Graph, key: Any, st: KeyState) -> None:
    prev = -1
    for i in range(len(st.val)):
        if not st.in_version_order(i) or st.val[i] == EMPTY:
            continue
        writer = st.writer(i) if st.completed(i) and not st.writer_failed(i) else -1
        if writer >= 0 and prev >= 0:
            add_edge(g, prev, writer, "ww", key, st.value(st.val[i]))
        if writer >= 0:
            prev = writer

