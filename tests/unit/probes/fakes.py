"""Stand-ins shared by the probe's unit tests."""

from __future__ import annotations

TOPIC = "kmon-probe-t.0"


class OneTopicKeys:
    """The probe's key space as one topic with two partitions: key k is partition k."""

    version = 0

    def topic_partition(self, key: int) -> tuple[str, int]:
        return TOPIC, key

    def key(self, topic: str, partition: int) -> int | None:
        return partition if topic == TOPIC else None

    def readable_topics(self) -> list[str]:
        return [TOPIC]

    def readable_keys(self) -> list[int]:
        return [0, 1]
