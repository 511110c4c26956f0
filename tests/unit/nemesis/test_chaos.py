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


class QuorumFiles:
    """Three running nodes whose ``quorum-state`` files tests write as KRaft would."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def state(self, node: int) -> str:
        return "running"

    def data_dir(self, node: int) -> Path:
        return self.root / str(node)

    def write(self, node: int, leader: int, epoch: int) -> None:
        d = self.data_dir(node) / "__cluster_metadata-0"
        d.mkdir(parents=True, exist_ok=True)
        (d / "quorum-state").write_text(json.dumps({"leaderId": leader, "leaderEpoch": epoch}))


def test_the_active_controller_is_waited_for_while_no_node_knows_it(tmp_path: Path) -> None:
    # After a rolling restart no node may know the quorum's leader yet (chaos seed 11's
    # crash-controller step failed on it): the step waits instead of failing.
    import threading

    from kmon.nemesis.base import FaultError
    from kmon.nemesis.rolling import active_controller

    nodes = QuorumFiles(tmp_path)
    nodes.write(1, -1, 4)  # an election in progress
    timer = threading.Timer(1.0, lambda: (nodes.write(2, 3, 5), nodes.write(1, 2, 3)))
    timer.start()
    assert active_controller(nodes, timeout=10) == 3  # type: ignore[arg-type]  # newest epoch
    with pytest.raises(FaultError, match=r"within 0\.5s"):
        active_controller(QuorumFiles(tmp_path / "none"), timeout=0.5)  # type: ignore[arg-type]


def test_a_leader_catching_up_its_high_watermark_is_leadership_moving() -> None:
    from confluent_kafka import KafkaError, KafkaException

    from kmon.nemesis.kafka import moving

    assert moving(KafkaException(KafkaError(KafkaError.OFFSET_NOT_AVAILABLE)))
    assert moving(KafkaException(KafkaError(KafkaError.FENCED_LEADER_EPOCH)))
    assert not moving(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))


def test_executor_kills_only_with_the_monitor_on_the_standalone_cluster() -> None:
    from kmon.nemesis.chaos import CLUSTER_KINDS

    assert not {s.kind for s in plan(ChaosSettings(seed=3))} & set(CLUSTER_KINDS)
    kinds = {s.kind for s in plan(ChaosSettings(seed=3, standalone=True))}
    assert set(CLUSTER_KINDS) <= kinds and set(SAFE_KINDS) <= kinds
    with pytest.raises(SettingError, match="standalone"):
        plan(ChaosSettings(kinds=("kill-executor",)))


class _OffsetsAdmin:
    """ListOffsets answers in turn: an exception, or an offset for every partition asked."""

    def __init__(self, *answers: object) -> None:
        self.answers = list(answers)
        self.metadata_asked = 0

    def list_offsets(self, request: dict, request_timeout: float) -> dict:
        from concurrent.futures import Future
        from types import SimpleNamespace

        answer = self.answers.pop(0)
        out = {}
        for tp in request:
            f: Future = Future()
            if isinstance(answer, BaseException):
                f.set_exception(answer)
            else:
                f.set_result(SimpleNamespace(offset=answer))
            out[tp] = f
        return out

    def list_topics(self, topic: str, timeout: float) -> None:
        self.metadata_asked += 1


def test_offsets_are_asked_again_while_leadership_moves_with_fresh_metadata() -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import OffsetSpec

    from kmon.nemesis.base import FaultError
    from kmon.nemesis.kafka import high_watermark, list_offsets

    fenced = KafkaException(KafkaError(KafkaError.FENCED_LEADER_EPOCH))
    admin = _OffsetsAdmin(fenced, -1001, 42)
    assert high_watermark(admin, "t", 0) == 42  # type: ignore[arg-type]
    assert admin.metadata_asked == 1  # the fenced answer brought fresh metadata
    denied = KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    with pytest.raises(FaultError, match="TOPIC_AUTHORIZATION_FAILED"):
        list_offsets(_OffsetsAdmin(denied, 1), [("t", 0)], OffsetSpec.latest())  # type: ignore[arg-type]
    never = _OffsetsAdmin(*[-1001] * 10)
    with pytest.raises(FaultError, match="no offset yet"):
        list_offsets(never, [("t", 0)], OffsetSpec.latest(), within=0.3)  # type: ignore[arg-type]
