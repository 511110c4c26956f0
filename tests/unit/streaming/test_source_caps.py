"""Each events partition's source caps a batch in proportion to its backlog at start, so that
partitions of unequal volume cover the same event time per batch through a backlog."""

from __future__ import annotations

import json

from kmon.streaming import config
from kmon.streaming.monitor import events_backlogs, source_caps

CAP = 200_000


def _cfg(**settings: str) -> config.MonitorConfig:
    return config.from_mapping({"kafka.bootstrap.servers": "k:9092", "checkpoint": "/tmp/ck",
                                "topics.events": "ev", **settings})


def test_a_backlog_is_split_in_proportion() -> None:
    # The bench's events: its 16 processes hash onto 4 partitions as 19/31/19/31%.
    backlogs = {0: 1_127_096, 1: 1_873_572, 2: 1_124_934, 3: 1_874_426}
    caps = source_caps(CAP, backlogs)
    total = sum(backlogs.values())
    for p, b in backlogs.items():  # each covers the same share of its backlog per batch
        assert abs(caps[p] / b - CAP / total) < 1e-5
    assert CAP <= sum(caps.values()) < CAP + len(caps)


def test_under_one_batch_of_backlog_the_split_follows_the_events_held() -> None:
    # the events each partition holds are its share of the traffic: a backlog that builds
    # later, while the monitor runs, builds in that proportion
    held = {0: 1_000_000, 1: 3_000_000}
    assert source_caps(CAP, {0: 150_000, 1: 10}, held) == {0: 50_000, 1: 150_000}
    # nothing held (a new topic) or not known: an even share each
    assert source_caps(CAP, {0: 0, 1: 0, 2: 0}, {0: 0, 1: 0, 2: 0}) == dict.fromkeys(
        range(3), 66_667)
    assert source_caps(CAP, {0: 150_000, 1: 10}) == {0: 100_000, 1: 100_000}


def test_a_partition_with_little_backlog_keeps_half_an_even_share() -> None:
    caps = source_caps(CAP, {0: 5, 1: 3_000_000, 2: 1_000_000, 3: 1_000_000})
    assert caps[0] == CAP // 8  # the others share the rest of the cap in proportion
    assert caps[1] == 105_000 and caps[2] == caps[3] == 35_000
    # each one under the floor gets it, however many rounds that takes; never over the cap
    # (1 was over its floor until 0 took its own out of the cap)
    caps = source_caps(CAP, {0: 0, 1: 300_000, 2: 1_000_000, 3: 1_000_000})
    assert caps == {0: CAP // 8, 1: CAP // 8, 2: 75_000, 3: 75_000}


def test_backlogs_count_from_the_checkpoint_offsets() -> None:
    ranges = {0: (0, 1_000), 1: (500, 2_000)}
    resumed = [json.dumps({"ev": {"0": 400}}), json.dumps({"ev": {"1": 300}})]
    # partition 1's checkpoint offset is below its first (retention deleted events): from there
    assert events_backlogs(_cfg(), ranges, resumed) == {0: 600, 1: 1_500}


def test_a_new_checkpoint_counts_from_its_starting_offsets() -> None:
    ranges = {0: (0, 1_000), 1: (500, 2_000)}
    assert events_backlogs(_cfg(), ranges, None) == {0: 1_000, 1: 1_500}
    assert events_backlogs(_cfg(**{"starting.offsets": "latest"}), ranges, None) == {0: 0, 1: 0}
    named = json.dumps({"ev": {"0": 900, "1": -1}})
    assert events_backlogs(_cfg(**{"starting.offsets": named}), ranges, None) == {0: 100, 1: 0}


def test_an_unreadable_checkpoint_line_counts_from_the_first_offset() -> None:
    assert events_backlogs(_cfg(), {0: (10, 50)}, ["not json"]) == {0: 40}
