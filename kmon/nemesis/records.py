"""DeleteRecords ahead of the consumers: acknowledged data removed before anyone read it.

Like the KAFKA-17062 retention bug (remote-storage failures make the broker delete segments
that were never meant to go), but on demand: the admin API's DeleteRecords moves a partition's
log start offset up to its high watermark, so every record not yet read is gone for good. A
consumer that comes back for them gets OFFSET_OUT_OF_RANGE, resets to the new log start and
reads on from there: the deleted values are acknowledged, never read, and later values are
read, which is exactly the checker's ``lost-write``.

"Ahead of the consumers" is measured, not assumed: each deletion records, per partition, how
many of the deleted records lay above the highest offset any consumer group had committed
(``unread``). Consumers that do not commit (assign-only) count as having read nothing.

Deleted records stay deleted: ``stop`` only ends the repetitions (``interval``).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from kmon.env import SettingError
from kmon.nemesis.base import Fault, FaultError, check_duration, check_positive_int
from kmon.nemesis.kafka import list_offsets
from kmon.nemesis.targets import check_partition, check_topic

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

    from kmon.local.cluster import LocalCluster

_TIMEOUT = 15.0


class DeleteRecords(Fault):
    """Delete records up to the high watermark (minus ``keep``) on probe partitions.

    Partitions: ``topic`` with explicit ``partitions``, or ``topic`` / ``topic_prefix`` (every
    topic starting with it, e.g. the probe's ``kmon-probe-<name>``) with the ``count``
    partitions that have the most unread records at start (None: every partition; the most
    unread are those of the consumer groups, and a share group's position is not asked:
    librdkafka has no DescribeShareGroupOffsets). ``interval``: repeat the deletion
    every so many seconds until stop (None: once, at start).
    """

    kind = "delete-records"

    def __init__(
        self,
        cluster: LocalCluster,
        topic: str | None = None,
        topic_prefix: str | None = None,
        partitions: list[int] | None = None,
        count: int | None = 1,
        interval: float | None = None,
        keep: int = 0,
    ) -> None:
        if (topic is None) == (topic_prefix is None):
            raise SettingError("delete-records: give either topic or topic_prefix")
        if topic is not None:
            check_topic(topic)
        if topic_prefix is not None:
            check_topic(topic_prefix, "topic_prefix")
        if partitions is not None:
            if topic is None:
                raise SettingError("partitions: only with a single topic")
            if not partitions:
                raise SettingError("partitions: give at least one, or leave unset")
            for p in partitions:
                check_partition(p, "partitions")
        if count is not None:
            check_positive_int("count", count, minimum=1)
        check_duration("interval", interval, allow_none=True)
        if interval is not None and interval < 0.1:
            raise SettingError(f"interval: at least 0.1 s, got {interval!r}")
        check_positive_int("keep", keep)
        self.cluster = cluster
        self.topic = topic
        self.topic_prefix = topic_prefix
        self.partitions = list(partitions) if partitions is not None else None
        self.count = count
        self.interval = interval
        self.keep = keep
        self.chosen: list[TopicPartition] = []
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._thread_error: str | None = None
        super().__init__()

    def params(self) -> dict[str, Any]:
        return {
            "topic": self.topic, "topic_prefix": self.topic_prefix,
            "partitions": self.partitions, "count": self.count, "interval": self.interval,
            "keep": self.keep,
        }

    # --- choosing partitions ---------------------------------------------------------------

    def _candidates(self, admin: AdminClient) -> list[TopicPartition]:
        metadata = admin.list_topics(timeout=_TIMEOUT)
        if self.topic is not None:
            if self.topic not in metadata.topics or metadata.topics[self.topic].error:
                raise FaultError(f"no topic {self.topic}")
            topics = [self.topic]
        else:
            assert self.topic_prefix is not None
            topics = sorted(t for t in metadata.topics if t.startswith(self.topic_prefix))
            if not topics:
                raise FaultError(f"no topic starts with {self.topic_prefix!r}")
        out = []
        for name in topics:
            have = sorted(metadata.topics[name].partitions)
            wanted = self.partitions if self.partitions is not None else have
            for p in wanted:
                if p not in have:
                    raise FaultError(f"topic {name} has no partition {p}")
                out.append(TopicPartition(name, p))
        return out

    def _choose(self, admin: AdminClient) -> list[TopicPartition]:
        candidates = self._candidates(admin)
        if self.partitions is not None or self.count is None:
            return candidates
        ends = _offsets(admin, candidates, OffsetSpec.latest())
        committed = _max_committed(self.cluster, admin, candidates, self.topic_prefix)
        by_unread = sorted(
            candidates,
            key=lambda tp: (ends[_key(tp)] - max(committed.get(_key(tp), 0), 0), ends[_key(tp)]),
            reverse=True,
        )
        return by_unread[: self.count]

    # --- deleting ------------------------------------------------------------------------

    def _delete_once(self, admin: AdminClient) -> dict[str, dict[str, int]]:
        starts = _offsets(admin, self.chosen, OffsetSpec.earliest())
        ends = _offsets(admin, self.chosen, OffsetSpec.latest())
        committed = _max_committed(self.cluster, admin, self.chosen, self.topic_prefix)
        requests = [
            TopicPartition(tp.topic, tp.partition, max(ends[_key(tp)] - self.keep, 0))
            for tp in self.chosen
        ]
        futures = admin.delete_records(requests, request_timeout=_TIMEOUT)
        round_ = {}
        for tp in self.chosen:
            key = _key(tp)
            future = next(f for r, f in futures.items() if _key(r) == key)
            try:
                low = future.result(_TIMEOUT + 5).low_watermark
            except KafkaException as exc:
                raise FaultError(f"DeleteRecords on {tp.topic}/{tp.partition}: {exc}") from None
            before, read_to = starts[key], committed.get(key, -1)
            round_[f"{tp.topic}/{tp.partition}"] = {
                "log_start_before": before,
                "log_start_after": low,
                "deleted": max(low - before, 0),
                "max_committed": read_to,
                "unread": max(low - max(before, read_to), 0),
            }
        return round_

    def _account(self, round_: dict[str, dict[str, int]]) -> None:
        info = self.record.info
        info["rounds"] = info.get("rounds", 0) + 1
        info["deleted"] = info.get("deleted", 0) + sum(r["deleted"] for r in round_.values())
        info["unread"] = info.get("unread", 0) + sum(r["unread"] for r in round_.values())
        per = info.setdefault("per_partition", {})
        for name, r in round_.items():
            acc = per.setdefault(name, {"deleted": 0, "unread": 0, "log_start": 0})
            acc["deleted"] += r["deleted"]
            acc["unread"] += r["unread"]
            acc["log_start"] = r["log_start_after"]
        self.mark(
            f"deleted {sum(r['deleted'] for r in round_.values())} records "
            f"({sum(r['unread'] for r in round_.values())} unread) on {', '.join(round_)}"
        )

    def _start(self) -> None:
        with self.cluster.admin() as admin:
            self.chosen = self._choose(admin)
            self.record.info["partitions"] = [f"{tp.topic}/{tp.partition}" for tp in self.chosen]
            self._account(self._delete_once(admin))
        if self.interval is not None:
            self._stopping.clear()
            self._thread = threading.Thread(
                target=self._repeat, name="kmon-delete-records", daemon=True
            )
            self._thread.start()

    def _repeat(self) -> None:
        assert self.interval is not None
        while not self._stopping.wait(self.interval):
            # A client per round, gone before the wait: none idles through other faults.
            try:
                with self.cluster.admin() as admin:
                    self._account(self._delete_once(admin))
            except (FaultError, KafkaException, TimeoutError) as exc:
                # Only the text: the exception's traceback would keep the round's frames.
                self._thread_error = str(exc) or type(exc).__name__
                self.mark(f"deletion failed: {self._thread_error}")

    def _stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(_TIMEOUT * 3)
            self._thread = None
        if self._thread_error is not None:
            self.record.info["last_error"] = self._thread_error


def _key(tp: TopicPartition) -> tuple[str, int]:
    return (tp.topic, tp.partition)


def _offsets(
    admin: AdminClient, tps: list[TopicPartition], spec: OffsetSpec
) -> dict[tuple[str, int], int]:
    """Each partition's offset at ``spec``, asked again while leadership moves for at most
    3 x ``_TIMEOUT`` (a rolling restart's OFFSET_NOT_AVAILABLE, seed 11)."""
    return list_offsets(admin, [_key(tp) for tp in tps], spec, within=3 * _TIMEOUT)


def _max_committed(cluster: LocalCluster, admin: AdminClient, tps: list[TopicPartition],
                   group_prefix: str | None) -> dict[tuple[str, int], int]:
    """The highest committed offset of any consumer group (starting with ``group_prefix``,
    when given: the probe's groups are ``<topic prefix>-<mode>``), per partition (absent:
    none).

    Asked through a consumer of each group (OffsetFetch from its group coordinator), not the
    admin API's ListConsumerGroupOffsets: librdkafka 2.16.0 aborts the whole process when an
    admin request to a group coordinator times out and the coordinator's answer comes later
    (a paused or restarted broker): ``rd_kafka_admin_coord_response_parse`` ->
    ``rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0' failed`` on
    librdkafka's main thread (tests/integration/test_librdkafka_admin_coord.py). It killed the
    test process under the matrix's fault rows."""
    try:
        groups = admin.list_consumer_groups(request_timeout=_TIMEOUT).result(_TIMEOUT + 5)
    except KafkaException as exc:
        raise FaultError(f"ListGroups: {exc}") from None
    wanted = {_key(tp) for tp in tps}
    out: dict[tuple[str, int], int] = {}
    for listing in groups.valid:
        if group_prefix is not None and not listing.group_id.startswith(group_prefix):
            continue
        for tp in _committed(cluster, listing.group_id, sorted(wanted)):
            if tp.offset >= 0 and _key(tp) in wanted:
                out[_key(tp)] = max(out.get(_key(tp), -1), tp.offset)
    return out


def _committed(cluster: LocalCluster, group: str, keys: list[tuple[str, int]],
               ) -> list[TopicPartition]:
    """``group``'s committed offsets of ``keys`` ([] when its coordinator does not answer:
    a group that vanished, a coordinator down)."""
    from confluent_kafka import Consumer

    consumer = Consumer(cluster.client_config(**{"group.id": group,
                                                 "enable.auto.commit": False}))
    try:
        return consumer.committed([TopicPartition(t, p) for t, p in keys], timeout=_TIMEOUT)
    except KafkaException:
        return []
    finally:
        consumer.close()  # never subscribed: no group to leave
