"""``replay.with_placements``: every key an op touches is placed, commit mops' keys too."""

from __future__ import annotations

from kmon.history import KeyPlacement, Op, OpMeta
from kmon.history.model import commit, poll, send
from kmon.streaming.replay import with_placements


def test_every_touched_key_is_placed_commits_included() -> None:
    ops = [
        Op(0, 1, 0, "ok", "txn", [send(1, 5, 0), poll({2: [(0, 6)]}), commit(3, 4)]),
        Op(1, 2, 0, "ok", "commit", [commit(4, 9)], meta=OpMeta(probe="p", group="g")),
        Op(2, 3, 0, "info", "crash", None),
    ]
    placed = list(with_placements(ops, "t", leader=2))
    assert [sorted(op.meta.placements) for op in placed[:2]] == [[1, 2, 3], [4]]
    assert placed[1].meta.placements[4] == KeyPlacement("t", 4, 2)
    assert placed[1].meta.group == "g"  # the rest of the meta is kept
    assert placed[2] is ops[2]
