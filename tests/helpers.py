"""Small Kafka client helpers for tests: produce with acks=all and read a topic back whole."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NoReturn

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from kmon import env


def missing_tool(what: str, how: str = "run `make setup`") -> NoReturn:
    """Fail the test: a tool the set-up installs is not installed.

    The suite's one policy: whatever `make setup` installs (promtool, prometheus, helm,
    kubeconform and their schemas, chromium, toxiproxy-server, the test extras) is required, and
    its absence is an error under `make test`, `make unit` and CI, never a skip: a skip turned a
    whole module green on a machine without set-up. A skip is only for what the suite cannot
    install (an external cluster under KMON_BOOTSTRAP, a build installed uncompiled).
    """
    pytest.fail(f"{what} not installed: {how}", pytrace=False)


def suite_stack() -> tuple[Path, int]:
    """Home and port base of the suite's own local stack: beside `kmon run`'s, not on it."""
    return env.kmon_home() / "test", env.port_base() + env.PORT_SPAN // 2


def produce_acked(
    bootstrap: str, topic: str, values: Iterable[str], timeout: float = 90.0
) -> list[tuple[int, int]]:
    """Produce ``values`` (round-robin keys over partitions); fail unless every one is acked.

    Returns the (partition, offset) of each acked record, in the order of ``values``.
    """
    values = list(values)
    acked: dict[str, tuple[int, int]] = {}
    errors: list[str] = []

    def report(err: KafkaError | None, msg: object) -> None:
        if err is not None:
            errors.append(f"{msg.value()!r}: {err}")  # type: ignore[attr-defined]
        else:
            acked[msg.value().decode()] = (msg.partition(), msg.offset())  # type: ignore[attr-defined]

    producer = Producer({
        "bootstrap.servers": bootstrap,
        "acks": "all",  # the write must be on every in-sync replica before it counts
        "enable.idempotence": True,  # retries after a broker loss must not duplicate
        "message.timeout.ms": int(timeout * 1000),  # give a failover time, but not forever
    })
    for value in values:
        producer.produce(topic, key=value.encode(), value=value.encode(), on_delivery=report)
        producer.poll(0)
    remaining = producer.flush(timeout + 5)
    assert not errors, f"{len(errors)} writes failed, e.g. {errors[:3]}"
    assert remaining == 0 and len(acked) == len(values), (
        f"{len(values) - len(acked)} of {len(values)} writes unacknowledged"
    )
    return [acked[v] for v in values]


def read_all(bootstrap: str, topic: str, expected: int, timeout: float = 60.0) -> list[str]:
    """Read ``topic`` from the start until ``expected`` records arrived (or ``timeout``)."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"test-{uuid.uuid4().hex[:8]}",  # required, though offsets are never used
        "enable.auto.commit": False,  # reads are assigned and from the start, nothing to commit
        "auto.offset.reset": "earliest",
    })
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        values: list[str] = []
        deadline = time.monotonic() + timeout
        while len(values) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            values.append(msg.value().decode())
        return values
    finally:
        consumer.close()


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout`` seconds.

    For states the cluster reaches eventually (metadata propagating to every broker): the
    bound is generous and only stops a hung test, it asserts nothing about speed.
    """
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"still not true after {timeout:.0f}s: {what}"
        time.sleep(0.2)


def leave_time_wait(port: int) -> None:
    """Leave ``port`` in TIME_WAIT as a closed server leaves it (its side closed first): what
    the suite's servers on ephemeral ports leave behind for a minute."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", port))
        server.listen()
        with socket.create_connection(("127.0.0.1", port)):
            accepted, _ = server.accept()
            accepted.close()
