"""fold.py's inlined common cases (a fresh ok send placed at an untouched offset, a read where
its send put it) leave the same state and findings as the general path they shortcut
(``version_order.place_send`` / ``place_read`` and ``aborted_read``'s judging).

Histories are drawn to reach both paths and their edges: few offsets (conflicts, duplicates,
values read before their ack), sends of every outcome, with and without offsets,
transactions writing several values, reads of values never sent.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kmon.checker import CheckConfig, Checker
from kmon.checker.fold import FoldConfig
from kmon.history.model import Op
from tests.checker.helpers import op as make_op
from tests.checker.helpers import poll, send

KEYS = (0, 1)
SECOND = 1_000_000_000


@st.composite
def histories(draw: st.DrawFn) -> list[Op]:
    ops: list[Op] = []
    sent: list[tuple[Any, Any]] = []  # (key, value) of every send so far
    t = draw(st.integers(0, 3))  # the first completion may come at time 0
    for _ in range(draw(st.integers(1, 30))):
        process = draw(st.integers(0, 2))
        f = draw(st.sampled_from(("send", "send", "poll", "poll", "txn")))
        ty = draw(st.sampled_from(("ok", "ok", "ok", "info", "fail")))
        mops = []
        for _ in range(draw(st.integers(1, 3 if f == "txn" else 1))):
            if f == "send" or (f == "txn" and draw(st.booleans())):
                k = draw(st.sampled_from(KEYS))
                v = draw(st.one_of(st.integers(0, 10**6), st.sampled_from(("a", "b", "c"))))
                off = draw(st.one_of(st.none(), st.integers(0, 12)))
                sent.append((k, v))
                mops.append(send(k, v, off))
            else:
                reads: dict[Any, list[tuple[int, Any]]] = {}
                for _ in range(draw(st.integers(0, 3))):
                    if sent and draw(st.integers(0, 3)):
                        k, v = draw(st.sampled_from(sent))
                    else:
                        k, v = draw(st.sampled_from(KEYS)), draw(st.integers(0, 20))
                    reads.setdefault(k, []).append((draw(st.integers(0, 12)), v))
                mops.append(poll(reads))
        if f == "txn" and not any(m[0] == "send" for m in mops) and len(mops) == 1:
            f = "poll"
        invoke = [("send", m[1], m[2], None) if m[0] == "send" else ("poll", None) for m in mops]
        ops.append(make_op(len(ops), process, "invoke", f, invoke, time=t))
        t += draw(st.integers(0, 3)) * SECOND // 4
        ops.append(make_op(len(ops), process, ty, f, mops, time=t))
    return ops


def _run(ops: list[Op], inline: bool, grace: int | None) -> tuple[Checker, Any]:
    checker = Checker(CheckConfig(cycles=False, grace_ns=grace,
                                  unseen_grace_ns=None if grace is None else 2 * grace))
    cfg = checker.fold_config
    checker.fold_config = FoldConfig(cfg.grace_ns, cfg.unseen_grace_ns, cfg.collect_lags,
                                     inline=inline)
    for n, o in enumerate(ops, 1):
        checker.apply(o)
        if grace is not None and n % 5 == 0:
            checker.advance(o.time - SECOND)
    states = {k: st_.to_bytes() for k, st_ in checker.keys.items()}
    sink = checker.sink
    found = ([(a.type, a.record) for a in sink.anomalies],
             [(f.kind, f.writer, f.key, f.value, f.offset, f.outcome, f.time, f.reader,
               f.max_read) for f in sink.facts],
             list(sink.lags), list(sink.e2e), list(sink.unseen))
    return checker, (states, found)


@settings(max_examples=400)
@given(histories(), st.sampled_from((None, SECOND)))
def test_the_inlined_paths_leave_the_general_paths_state(ops: list[Op], grace: int | None
                                                         ) -> None:
    fast, fast_state = _run(ops, inline=True, grace=grace)
    general, general_state = _run(ops, inline=False, grace=grace)
    assert fast_state == general_state
    assert fast.finish().errors == general.finish().errors
