"""Online verdicts must not depend on the order in which different processes' op events
reach the monitor. Each probe process writes its events to one events partition, so the
monitor sees each process's events in order, but the processes interleave however their
partitions are read. Offline, ``kmon check`` folds the history in op order: it is the reference.

Found in a chaos run's unclean election (2026-11-26): two values acknowledged at one offset
(the old leader's, truncated, and the new leader's, read there); whichever event arrived first
held the offset's slot and the other became a loose record, so online a lost write was
reported or missed depending on arrival order, and a nonmonotonic send with it."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest

from kmon.history.model import Op
from tests.checker.helpers import check, history, poll, send
from tests.unit.streaming.online import run_online, verdicts

HOUR = 3_600 * 1_000_000_000  # a grace period no event time here reaches: verdicts at the end

K = "k"
# Process 1's value A got offset 5 from the old leader and was truncated by the unclean
# election; its next value E got offset 5 again from the new leader, and was read there.
UNCLEAN = history(
    (0, "ok", "send", [send(K, "X", 4)]),
    (1, "ok", "send", [send(K, "A", 5)]),
    (1, "ok", "send", [send(K, "E", 5)]),
    (2, "ok", "send", [send(K, "C", 6)]),
    (3, "ok", "poll", [poll({K: [(4, "X"), (5, "E"), (6, "C")]})]),
)


def _arrivals(ops: list[Op]) -> list[list[Op]]:
    """Every order of the ops that keeps each process's own order (each invoke stays just
    before its completion)."""
    pairs = [ops[i:i + 2] for i in range(0, len(ops), 2)]
    orders = []
    for perm in itertools.permutations(range(len(pairs))):
        processes = {pairs[i][0].process for i in perm}
        if all(_ascending([i for i in perm if pairs[i][0].process == p]) for p in processes):
            orders.append([o for i in perm for o in pairs[i]])
    return orders


def _ascending(xs: list[int]) -> bool:
    return xs == sorted(xs)


def _counts(by_type: dict[str, list[Any]]) -> Counter[str]:
    return Counter({t: len(v) for t, v in by_type.items()})


# Both of process 1's values truncated; the new leader's took their offsets and each was read
# just as the readers' frontier reached it: the offsets the frontier stood at are passed too.
AT_THE_FRONTIER = history(
    (1, "ok", "send", [send(K, "A", 5)]),
    (1, "ok", "send", [send(K, "B", 6)]),
    (2, "ok", "send", [send(K, "C", 5)]),
    (2, "ok", "send", [send(K, "D", 6)]),
    (3, "ok", "poll", [poll({K: [(5, "C")]})]),
    (3, "ok", "poll", [poll({K: [(6, "D")]})]),
    (3, "ok", "poll", [poll({K: [(7, "E")]})]),
)

CASES = {
    "unclean": (UNCLEAN, {"inconsistent-offsets": 1, "lost-write": 1, "nonmonotonic-send": 1},
                ["A"]),
    "at-the-frontier": (AT_THE_FRONTIER, {"inconsistent-offsets": 2, "lost-write": 2},
                        ["A", "B"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_unclean_elections_verdicts_do_not_depend_on_arrival_order(name: str) -> None:
    ops, expected, lost = CASES[name]
    offline = check(ops).errors
    assert _counts(offline) == Counter(expected)
    assert sorted(r["value"] for r in offline["lost-write"]) == lost
    orders = _arrivals(ops)
    assert len(orders) > 10
    for order in orders:
        online = verdicts(run_online(order, batch=1, grace=HOUR)["evidence"])
        seen = [(o.process, o.f, o.value) for o in order[1::2]]
        assert _counts(online) == _counts(offline), seen
        assert sorted(r["value"] for r in online["lost-write"]) == lost, seen
