"""A deposed group coordinator's stale offsets told from its broker-log trail.

The log lines and times are those of the fresh-clone run of 2026-11-29 in which the short chaos
test failed on an ``offset-commit-reread`` (broker 1 paused 05:05:13.87-22.39)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kmon.nemesis.chaos_run import ProbeSlot, _judge_slot, explain_known
from kmon.nemesis.deposed_coordinator import (
    Window,
    explain,
    explain_with,
    group_partition,
    windows,
)

GROUP = "kmon-ch-525e80-proxied-assign"  # in __consumer_offsets-1 of 3 partitions
LOADED_1 = ("[2026-11-29 05:05:00,604] INFO [GroupCoordinator id=1] Finished loading of metadata "
            "from __consumer_offsets-1 with epoch 2 in 231ms where 66ms was spent in the "
            "scheduler. Loaded 250 records which total to 33000 bytes.")
LOADED_2 = ("[2026-11-29 05:05:19,869] INFO [GroupCoordinator id=2] Finished loading of metadata "
            "from __consumer_offsets-1 with epoch 3 in 41ms where 1ms was spent in the "
            "scheduler. Loaded 276 records which total to 36864 bytes. "
            "(org.apache.kafka.coordinator.common.runtime.CoordinatorRuntime)")
UNLOADED_1 = ("[2026-11-29 05:05:22,532] INFO [GroupCoordinator id=1] Finished unloading metadata "
              "for __consumer_offsets-1 with epoch OptionalInt[3]. "
              "(org.apache.kafka.coordinator.common.runtime.CoordinatorRuntime)")


def at(clock: str) -> float:
    """05:05:SS.fff on the run's day as epoch seconds (the brokers log local time)."""
    return datetime.strptime(f"2026-11-29 05:05:{clock}", "%Y-%m-%d %H:%M:%S.%f").timestamp()


def op(index: int, done: str, invoked: str | None = None) -> Any:
    return SimpleNamespace(index=index, time=int(at(done) * 1e9),
                           meta=SimpleNamespace(invoke_time=int(at(invoked or done) * 1e9),
                                                placements={}))


def reread(group: str = GROUP) -> dict[str, Any]:
    return {"key": 7, "group": group, "offset": 30, "expected": [36], "writer": 895,
            "reader": 898, "process": 5, "source": "committed"}


def test_the_group_partition_is_kafkas() -> None:
    # Java's String.hashCode (UTF-16 units), Kafka's Utils.abs (MIN_VALUE -> 0); values
    # printed by jshell
    assert group_partition(GROUP, 2**31 - 1) == 185906251
    assert group_partition(GROUP, 3) == 1
    assert group_partition("polygenelubricants", 50) == 0  # hashCode() == Integer.MIN_VALUE
    assert group_partition("g\U0001F600x", 2**31 - 1) == 58028462  # a surrogate pair


def test_a_window_is_two_brokers_holding_one_epoch_of_the_partition() -> None:
    found = windows([LOADED_1, LOADED_2, "some other line", UNLOADED_1])
    assert found == [Window(1, 3, old=1, new=2, start=at("19.869"), end=at("22.532"))]


def test_no_window_without_the_old_brokers_unload_or_from_the_new_one_alone() -> None:
    assert windows([LOADED_1, LOADED_2]) == []  # the old one was killed: it logs no unload
    own = UNLOADED_1.replace("id=1", "id=2")
    assert windows([LOADED_2, own]) == []  # a broker unloading what it loaded itself
    earlier = UNLOADED_1.replace("05:05:22,532", "05:05:19,000")
    assert windows([LOADED_2, earlier]) == []  # unloaded before the new one loaded


def test_a_recurring_epoch_pairs_with_its_latest_load() -> None:
    # the suite formats clusters again: epoch 3 of an earlier cluster, long before
    old_cluster = LOADED_2.replace("05:05:19,869", "04:10:00,000").replace("id=2", "id=3")
    found = windows([old_cluster, LOADED_2, UNLOADED_1])
    assert [(w.new, w.start) for w in found] == [(2, at("19.869"))]


WINDOW = Window(1, 3, old=1, new=2, start=at("19.869"), end=at("22.532"))


def test_a_reread_inside_the_window_is_explained() -> None:
    ops = [op(895, "20.790", "19.772"), op(898, "22.389", "20.792")]
    found = explain_with(ops, [reread()], [WINDOW], partitions=3)
    assert found.counts == {"offset-commit-reread": 1}
    assert found.trails[0]["old-coordinator"] == 1 and found.trails[0]["epoch"] == 3


def test_a_reread_the_window_does_not_explain_stays() -> None:
    def counts(writer: Any, reader: Any, record: dict[str, Any] | None = None) -> dict:
        return explain_with([writer, reader], [record or reread()], [WINDOW], 3).counts

    # the commit was acknowledged before the new coordinator held the group
    assert counts(op(895, "19.500"), op(898, "22.389", "20.792")) == {}
    # the lookup was sent after the old coordinator let the group go
    assert counts(op(895, "20.790"), op(898, "23.900", "22.600")) == {}
    # answered well after the unload: not the old coordinator's answer
    assert counts(op(895, "20.790"), op(898, "24.000", "20.792")) == {}
    # another group, in another __consumer_offsets partition
    other = "g1"
    assert group_partition(other, 3) != 1
    assert counts(op(895, "20.790"), op(898, "22.389", "20.792"), reread(other)) == {}


def brokers(tmp_path: Path, lines: dict[int, list[str]]) -> list[Path]:
    """Broker directories laid out as the local cluster lays them."""
    dirs = []
    for node, text in lines.items():
        d = tmp_path / f"broker-{node}"
        (d / "data").mkdir(parents=True)
        (d / "server.log").write_text("\n".join(text) + "\n")
        (d / "server.properties").write_text(f"node.id={node}\n"
                                             "offsets.topic.num.partitions=3\n")
        dirs.append(d / "data")
    return dirs


def test_a_chaos_run_passes_a_safe_probe_for_the_reread_the_logs_explain(
        tmp_path: Path) -> None:
    dirs = brokers(tmp_path, {1: [LOADED_1, UNLOADED_1], 2: [LOADED_2], 3: []})
    ops = [op(895, "20.790"), op(898, "22.389", "20.792")]
    errors = {"offset-commit-reread": [reread()]}
    assert explain(ops, errors, dirs).counts == {"offset-commit-reread": 1}
    known = explain_known(ops, errors, dirs)
    assert known.counts == {"offset-commit-reread": 1}
    slot = ProbeSlot("proxied", "proxied", "t-proxied")
    slot.ids.append("p1")
    seen = {"p1": {"offset-commit-reread": 1}}
    assert _judge_slot(slot, seen, seen, {"p1": known}) == []
    twice = {"p1": {"offset-commit-reread": 2}}
    assert _judge_slot(slot, twice, twice, {"p1": known}) == [
        "false alarm from the monitor on p1 (proxied): {'offset-commit-reread': 1}",
        "kmon check finds {'offset-commit-reread': 1} in p1 (proxied)"]
