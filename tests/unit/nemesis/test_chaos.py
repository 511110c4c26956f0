"""The chaos schedule and its verdicts, without a cluster."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from kmon.env import SettingError
from kmon.nemesis.chaos import LOSSY_KINDS, SAFE_KINDS, ChaosSettings, plan
from kmon.nemesis.chaos_run import ProbeSlot, _judge_slot, _serious, committed_offsets


def test_the_same_seed_plays_the_same_schedule() -> None:
    a, b = plan(ChaosSettings(minutes=30, seed=7)), plan(ChaosSettings(minutes=30, seed=7))
    assert a == b and len(a) > 20
    assert a != plan(ChaosSettings(minutes=30, seed=8))


def test_a_schedule_fits_its_minutes_and_draws_every_safe_kind() -> None:
    steps = plan(ChaosSettings(minutes=30, seed=3))
    assert all(s.at < 30 * 60 for s in steps)
    assert [s.n for s in steps] == list(range(len(steps)))
    assert all(s.at < t.at for s, t in itertools.pairwise(steps))
    assert {s.kind for s in steps} == set(SAFE_KINDS)


def test_lossy_kinds_only_with_lossy() -> None:
    assert not {s.kind for s in plan(ChaosSettings(seed=3))} & set(LOSSY_KINDS)
    assert {s.kind for s in plan(ChaosSettings(seed=3, lossy=True))} & set(LOSSY_KINDS)
    with pytest.raises(SettingError, match="lossy"):
        plan(ChaosSettings(kinds=("delete-records",)))
    with pytest.raises(SettingError, match="unknown"):
        plan(ChaosSettings(kinds=("meteor",)))


def test_kafkas_normal_types_are_no_false_alarm() -> None:
    assert _serious({"G0": 3, "int-send-skip": 1, "G1c": 1, "lost-write": 0}) == {}
    assert _serious({"duplicate": 1}) == {"duplicate": 1}


def test_a_safe_probe_judged_on_both_sides() -> None:
    slot = ProbeSlot("safe", "safe", "x", ids=["x.a", "x.b"], killed=["x.a"])
    assert _judge_slot(slot, {"x.a": {"unseen": 4}}, {"x.a": {"unseen": 4}}) == []
    bad = _judge_slot(slot, {"x.b": {"unseen": 1}}, {"x.b": {"lost-write": 1}})
    assert bad == ["false alarm from the monitor on x.b (safe): {'unseen': 1}",
                   "kmon check finds {'lost-write': 1} in x.b (safe)"]


def test_a_lossy_probe_must_have_every_proven_loss_reported() -> None:
    slot = ProbeSlot("lagging", "lagging-readers", "y", ids=["y.a"])
    assert _judge_slot(slot, {"y.a": {"lost-write": 5}}, {"y.a": {"lost-write": 5}}) == []
    assert _judge_slot(slot, {"y.a": {"lost-write": 4}}, {"y.a": {"lost-write": 5}}) == [
        "lagging: the monitor reported 4 lost-write, kmon check finds 5"]


def _batch(keys: Path, batch: int, offsets: dict[int, int], committed: bool) -> None:
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}'
    sources = [json.dumps({"kmon-events": {str(p): o}}) for p, o in offsets.items()]
    (keys / "offsets" / str(batch)).write_text("\n".join(["v1", meta, *sources]))
    if committed:
        (keys / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_committed_offsets_are_the_newest_committed_batchs(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    (keys / "offsets").mkdir(parents=True)
    (keys / "commits").mkdir()
    assert committed_offsets(tmp_path) == {}
    _batch(keys, 9, {0: 10, 1: 12}, committed=True)
    _batch(keys, 10, {0: 20, 1: 15}, committed=True)
    _batch(keys, 11, {0: 30, 1: 31}, committed=False)  # planned, not yet committed
    (keys / "commits" / ".10.crc").write_text("")
    assert committed_offsets(tmp_path) == {0: 20, 1: 15}
