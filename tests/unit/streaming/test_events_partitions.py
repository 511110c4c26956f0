"""The monitor reads each events partition as its own source: where each starts, and waiting
for the probes to create the topic (a fake admin client; the real cluster is in
tests/integration/test_monitor_watermark.py)."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from kmon.streaming import config, kafka
from kmon.streaming.monitor import starting_offsets_of


def _cfg(**extra: str) -> config.MonitorConfig:
    return config.from_mapping({"kafka.bootstrap.servers": "x:1", "checkpoint": "/tmp/ck",
                                "topics.events": "ev", **extra})


def test_earliest_and_latest_apply_to_every_partition() -> None:
    assert starting_offsets_of(_cfg(), 3) == "earliest"
    assert starting_offsets_of(_cfg(**{"starting.offsets": "latest"}), 0) == "latest"


def test_a_json_map_gives_each_source_its_partition_and_the_unnamed_ones_the_start() -> None:
    cfg = _cfg(**{"starting.offsets": json.dumps({"ev": {"0": 12, "1": -1}})})
    assert json.loads(starting_offsets_of(cfg, 0)) == {"ev": {"0": 12}}
    assert json.loads(starting_offsets_of(cfg, 1)) == {"ev": {"1": -1}}
    assert json.loads(starting_offsets_of(cfg, 2)) == {"ev": {"2": -2}}  # earliest


class _Admin:
    """list_topics() answers from a script: None (no such topic yet) or a partition count."""

    def __init__(self, *script: int | None) -> None:
        self.script = list(script)
        self.closed = False

    # Used in a with block, as the real client is (it is destroyed on leaving the block).
    def __enter__(self) -> _Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.closed = True

    def list_topics(self, timeout: float) -> Any:
        n = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        topics = {} if n is None else {
            "ev": SimpleNamespace(error=None, partitions=dict.fromkeys(range(n)))}
        return SimpleNamespace(topics=topics)


def test_the_monitor_waits_for_the_events_topic(monkeypatch: pytest.MonkeyPatch) -> None:
    admin = _Admin(None, None, 3)
    monkeypatch.setattr("confluent_kafka.admin.AdminClient", lambda conf: admin)
    monkeypatch.setattr(threading.Event, "wait", lambda self, t=None: self.is_set())
    assert kafka.events_partitions(_cfg()) == [0, 1, 2]
    assert admin.script == [3]
    assert admin.closed


def test_a_stop_ends_the_wait_and_one_look_does_not_wait(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("confluent_kafka.admin.AdminClient", lambda conf: _Admin(None))
    stop = threading.Event()
    stop.set()
    with pytest.raises(InterruptedError):
        kafka.events_partitions(_cfg(), stop)
    assert kafka.events_partitions(_cfg(), wait=False) == []


def test_a_checkpoint_resumes_only_one_source_per_partition_in_order() -> None:
    from kmon.streaming.monitor import sources_mismatch

    cfg = _cfg()
    one_each = ['{"ev":{"0":5}}', '{"ev":{"1":7}}']
    assert sources_mismatch(one_each, cfg, [0, 1]) == ""
    # Written before partition 2 was added; by the old single source over every partition;
    # for another topic; unreadable.
    for sources in (one_each, ['{"ev":{"0":5,"1":7}}'], ['{"other":{"0":5}}'], ["garbage"]):
        why = sources_mismatch(sources, cfg, [0, 1, 2] if sources is one_each else [0, 1])
        assert why.startswith("checkpoint: /tmp/ck") and "new checkpoint location" in why
