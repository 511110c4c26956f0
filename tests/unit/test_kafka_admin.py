"""``kmon.kafka_admin.delete_topics``: a topic already gone counts as deleted, nothing else."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from kmon import kafka_admin


class Admin:
    """Answers each topic's deletion with the error given for it, or success."""

    def __init__(self, errors: dict[str, int]) -> None:
        self.errors = errors
        self.calls: list[tuple[list[str], float]] = []

    def delete_topics(self, names: list[str], request_timeout: float = 0) -> dict[str, Any]:
        self.calls.append((names, request_timeout))
        out: dict[str, Future] = {}
        for n in names:
            out[n] = Future()
            if n in self.errors:
                out[n].set_exception(KafkaException(KafkaError(self.errors[n])))
            else:
                out[n].set_result(None)
        return out


def test_a_topic_the_cluster_no_longer_knows_counts_as_deleted() -> None:
    admin = Admin({"b": KafkaError.UNKNOWN_TOPIC_OR_PART})
    kafka_admin.delete_topics(admin, {"b", "a"}, timeout=5)
    assert admin.calls == [(["a", "b"], 5)]


@pytest.mark.parametrize("code", [KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                  KafkaError.REQUEST_TIMED_OUT])
def test_any_other_error_is_raised(code: int) -> None:
    admin = Admin({"a": code})
    with pytest.raises(KafkaException) as e:
        kafka_admin.delete_topics(admin, ["a", "b"], timeout=5)
    assert e.value.args[0].code() == code


def test_no_topics_make_no_call() -> None:
    admin = Admin({})
    kafka_admin.delete_topics(admin, [], timeout=5)
    assert admin.calls == []
