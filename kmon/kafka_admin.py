"""Admin calls whose outcome Kafka's answers blur, shared by the probe and the local cluster."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from kmon.probes.outcome import kafka_error


def delete_topics(admin: Any, names: Iterable[str], timeout: float) -> None:
    """Delete ``names`` and wait for the answers. A topic the cluster no longer knows counts as
    deleted: a DeleteTopics that the controller applied but could not answer before losing its
    leadership is retried by the client against the new controller, which answers
    UNKNOWN_TOPIC_OR_PART for the topic the first attempt removed (seen in a fresh clone's run:
    the controller stalled 2 s on the deletion and an election followed). Any other error
    raises ``KafkaException``."""
    names = sorted(set(names))
    if not names:
        return
    for fut in admin.delete_topics(names, request_timeout=timeout).values():
        try:
            fut.result(timeout + 10)
        except KafkaException as e:
            err = kafka_error(e)
            if err is None or err.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise
