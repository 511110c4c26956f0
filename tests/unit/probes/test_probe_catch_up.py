"""A catch-up read (the probe's final read above all) reads every key to its end unless its
deadline passes: a key given up on leaves acknowledged values unread, which the checker must
call ``unseen`` though nothing was lost. CI once saw two such values after an unclean election
of ``__consumer_offsets`` on a cluster still settling."""

from __future__ import annotations

import io
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kmon.history import Op, iter_jsonl
from tests.unit.probes.fakes import FakeMessage, fake_process

LOG = {0: [100, 101], 1: [200, 201, 202, 203, 204]}  # partition -> values at 0, 1, ...


def _unavailable() -> KafkaException:
    return KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE))


class SettlingConsumer:
    """A consumer of ``LOG`` on a cluster that is still settling: partition 1's end cannot
    be looked up ``end_failures`` times, and the first ``poll_failures`` polls raise. Each
    poll returns one record per partition, so reading to the end takes several."""

    def __init__(self, end_failures: int = 0, poll_failures: int = 0) -> None:
        self.end_failures, self.poll_failures = end_failures, poll_failures
        self.at: dict[int, int] = {}

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[Any]:
        return [TopicPartition(tp.topic, tp.partition, 0) for tp in partitions]

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.at = {tp.partition: tp.offset for tp in partitions}

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float,
                              cached: bool) -> tuple[int, int]:
        if tp.partition == 1 and self.end_failures > 0:
            self.end_failures -= 1
            raise _unavailable()
        return 0, len(LOG[tp.partition])

    def consume(self, n: int, timeout: float) -> list[FakeMessage]:
        if self.poll_failures > 0:
            self.poll_failures -= 1
            raise _unavailable()
        out = []
        for p, at in self.at.items():
            if at < len(LOG[p]) and len(out) < n:
                out.append(FakeMessage(p, at, LOG[p][at]))
                self.at[p] = at + 1
        return out

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.at[tp.partition])
                for tp in partitions]

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> list[TopicPartition]:
        return offsets

    def close(self) -> None:
        pass


def catching_up(consumer: SettlingConsumer, timeout: float = 5.0) -> tuple[Any, list[Op]]:
    proc, history = fake_process()
    proc._new_consumer = lambda mode: consumer  # type: ignore[method-assign]
    done = proc.catch_up(timeout, lambda: False)
    return done, completions(history)


def completions(history: io.StringIO) -> list[Op]:
    return [o for o in iter_jsonl(history.getvalue().splitlines()) if o.type != "invoke"]


def values_read(ops: list[Op]) -> set[int]:
    return {v for o in ops if o.f == "poll" and o.type == "ok"
            for reads in o.value[0][1].values() for _, v in reads}


def test_every_key_is_read_to_its_end() -> None:
    done, ops = catching_up(SettlingConsumer())
    assert values_read(ops) == {*LOG[0], *LOG[1]}
    assert done.reached and done.short == [], done


def test_an_end_not_found_at_first_is_looked_up_again() -> None:
    """The old read left out a key whose end it could not look up, and stopped once the other
    keys were read: partition 1's last values went unread."""
    done, ops = catching_up(SettlingConsumer(end_failures=3))
    assert values_read(ops) == {*LOG[0], *LOG[1]}
    assert done.reached, done


def test_a_failed_poll_does_not_end_the_read() -> None:
    """The old read stopped at its first failed poll."""
    done, ops = catching_up(SettlingConsumer(poll_failures=2))
    assert [o.type for o in ops if o.f == "poll"][:2] == ["info", "info"]
    assert values_read(ops) == {*LOG[0], *LOG[1]}
    assert done.reached, done


def test_a_key_whose_end_is_never_found_is_reported_short() -> None:
    done, ops = catching_up(SettlingConsumer(end_failures=10**6), timeout=1.5)
    assert values_read(ops) >= set(LOG[0])
    assert not done.reached and done.short == [1], done


def test_nothing_to_read_is_reached_without_a_poll() -> None:
    consumer = SettlingConsumer()
    consumer.committed = lambda partitions, timeout: [  # type: ignore[method-assign]
        TopicPartition(tp.topic, tp.partition, len(LOG[tp.partition])) for tp in partitions]
    done, ops = catching_up(consumer)
    assert done.reached and done.polls == 0 and not [o for o in ops if o.f == "poll"], done

