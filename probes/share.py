"""Share consumers (KIP-932): a probe mode whose processes consume as one share group.

Each share process owns a ``ShareConsumer`` in explicit acknowledgement mode, subscribed to
every readable probe topic, and loops over two ops (``kmon.history.model``):

- ``share-poll``: one ``("share-read", key, records)`` per readable key, ``records`` the
  ``(offset, value, delivery_count)`` the poll returned for it (``[]`` none; unknown, ``None``,
  when the poll raised: it is then ``info`` and the process starts over with a new consumer).
- ``ack``: one ``("ack", key, offset, outcome)`` per record the poll returned, ACCEPT, RELEASE
  or REJECT by the configured shares, invoked *before* ``acknowledge()`` (librdkafka may send
  acknowledgements with its next fetch), completed by ``commit_sync``: ``ok`` when every
  partition succeeded, ``info`` otherwise (the broker may have applied some).

Every poll's records are acknowledged before the next poll, so a share process never holds a
record between ops: closing its consumer (a crash op, a new subscription) releases nothing the
history does not show. A stall (``share.stall_share``) holds a poll's records past the lock
before acknowledging them, so the group delivers them to another consumer meanwhile; an idle
stretch (``share.idle_share``) stops polling as long, holding nothing (librdkafka 2.16 keeps
fetching meanwhile: docs/share-groups.md).

The group's settings that the checker's share rules depend on (the lock and the delivery
limit) are set, or checked, at start: ``configure_group``.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from confluent_kafka import (
    AcknowledgeType,
    KafkaError,
    KafkaException,
    Message,
    ShareConsumer,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from kmon.history.model import ACCEPT, REJECT, RELEASE, ack, share_read
from kmon.probes import clients as C
from kmon.probes.config import ConfigError, ProbeConfig
from kmon.probes.outcome import INFO, OK
from kmon.probes.process import Process, decode_value

if TYPE_CHECKING:
    import random

    from kmon.probes.workload import Workload

log = logging.getLogger("kmon.probes")

ACK_TYPES = {ACCEPT: AcknowledgeType.ACCEPT, RELEASE: AcknowledgeType.RELEASE,
             REJECT: AcknowledgeType.REJECT}
# Beyond the lock, a stall waits this much longer: the lock has surely expired at the broker.
STALL_MARGIN_S = 2.0


def share_group(cfg: ProbeConfig) -> str:
    return f"{cfg.topic_prefix}-share"


def group_settings(cfg: ProbeConfig) -> dict[str, str]:
    """The share group's configs the probe relies on (names as in Kafka's group configs)."""
    return {
        # Records written before the group's first poll are delivered too: share-lost needs
        # the group to start at the log start.
        "share.auto.offset.reset": "earliest",
        "share.record.lock.duration.ms": str(round(cfg.share_lock * 1000)),
        "share.delivery.count.limit": str(cfg.share_delivery_limit),
        # Share groups read uncommitted by default: the probe's consumers' level instead, the
        # one the checker judges (a read_committed history would show aborted reads, G1a).
        "share.isolation.level": C.identity(cfg).isolation,
    }


# The probe setting each group config comes from, named when the group disagrees.
SETTING_OF = {"share.record.lock.duration.ms": "share.lock",
              "share.delivery.count.limit": "share.delivery_limit"}


def configure_group(admin: AdminClient, cfg: ProbeConfig, timeout: float = 30.0) -> None:
    """Set the share group's configs (``share.configure_group``), then check that the group
    has them; a ConfigError naming the setting when it does not."""
    group, want = share_group(cfg), group_settings(cfg)
    if cfg.share_configure_group:
        try:
            alter_group(admin, group, want, timeout)
        except KafkaException as e:
            raise ConfigError("share.configure_group", f"cannot set share group {group}'s configs "
                              f"{want}: {e}") from None
    have = configs_once(admin, group, want, timeout if cfg.share_configure_group else 0,
                        timeout)
    for name, value in want.items():
        if have.get(name) != value:
            raise ConfigError(SETTING_OF.get(name, "share.configure_group"),
                              f"share group {group} has {name}={have.get(name)}, the probe "
                              f"needs {value}")


def alter_group(admin: AdminClient, group: str, configs: dict[str, str],
                timeout: float) -> None:
    """Set a group's ``configs`` (incrementally: its other configs stay)."""
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
               for k, v in configs.items()]
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    for f in admin.incremental_alter_configs([res]).values():
        f.result(timeout)


def configs_once(admin: AdminClient, group: str, want: dict[str, str], within: float,
                 timeout: float = 30.0) -> dict[str, str]:
    """The group's configs, described again for up to ``within`` seconds until they include
    ``want``: a broker's view of an altered config may lag the controller's for a moment."""
    deadline = time.monotonic() + within
    while True:
        have = describe_group(admin, group, timeout)
        if all(have.get(k) == v for k, v in want.items()) or time.monotonic() >= deadline:
            return have
        time.sleep(0.5)


def describe_group(admin: AdminClient, group: str, timeout: float) -> dict[str, str]:
    res = ConfigResource(ResourceType.GROUP, group)
    out: dict[str, str] = {}
    for f in admin.describe_configs([res]).values():
        for name, entry in f.result(timeout).items():
            out[name] = entry.value
    return out


class ShareProcess(Process):
    """One share consumer of the probe's share group, as a logical process (``Process``:
    its op recording, placements and respawn; none of its consumer-group clients)."""

    def __init__(self, slot: int, wl: Workload, rng: random.Random) -> None:
        super().__init__(slot, wl, rng)
        self.share_keys: list[int] = []  # every key of the subscribed topics

    def _client_id(self, kind: str) -> str:
        return f"kmon-probe-{self.cfg.name}-share{self.slot}-{self.pid}-{kind}"

    def step(self) -> None:
        """One share poll and the acknowledgement of what it returned."""
        if self.needs_crash() or self.rng.random() < self.cfg.crash_share:
            self.crash()
            return
        self.refresh_leaders()
        stale = self.consumer is None or self.keys_version != self.keys.version
        if stale and not self._subscribe():
            return
        msgs = self.share_poll()
        if msgs is None:
            return
        if msgs and self.rng.random() < self.cfg.share_stall_share:
            self.wl.stopping.wait(self.cfg.share_lock + STALL_MARGIN_S)
        self.acknowledge(msgs)
        if self.rng.random() < self.cfg.share_idle_share:
            # A consumer that stops polling for longer than a lock, holding nothing.
            self.wl.stopping.wait(self.cfg.share_lock + STALL_MARGIN_S)

    def _subscribe(self) -> bool:
        """A share consumer subscribed to every readable topic (a new one after a crash).

        Not an op: a share poll lists the keys it may acquire records of."""
        topics = self.keys.readable_topics()
        if not topics:
            return False
        try:
            if self.consumer is None:
                self.group = share_group(self.cfg)
                self.consumer = ShareConsumer(C.share_consumer_config(
                    self.cfg, self._client_id("s"), self.group, error_cb=self.wl.count_error))
            self.consumer.subscribe(topics)
        except (KafkaException, RuntimeError) as e:
            self.wl.count_error(e)
            self.respawn()
            return False
        self.subscribed = list(topics)
        subscribed = set(topics)  # (the readable keys may have moved on since)
        self.share_keys = [k for k in self.keys.readable_keys()
                           if self.keys.topic_partition(k)[0] in subscribed]
        self.keys_version = self.keys.version
        return True

    def share_poll(self) -> list[Message] | None:
        """A ``share-poll`` op; the records it returned, None if it raised (info)."""
        keys, group = list(self.share_keys), self.group
        self._invoke("share-poll", [share_read(k) for k in keys], group=group)
        try:
            batch = self.consumer.poll(self.cfg.share_poll_timeout)
        except (KafkaException, RuntimeError) as e:
            self._error(e)
            self._complete(INFO, [share_read(k) for k in keys], keys, group=group)
            return None
        msgs: list[Message] = []
        records: dict[int, list[tuple[int, Any, int]]] = {k: [] for k in keys}
        for m in batch or ():
            if m.error() is not None:
                if m.error().code() != KafkaError._PARTITION_EOF:
                    self._error(m.error())
                continue
            k = self.keys.key(m.topic(), m.partition())
            if k is None:
                continue
            msgs.append(m)
            records.setdefault(k, []).append(
                (m.offset(), decode_value(m.value()), m.delivery_count()))
            epoch = m.leader_epoch()
            if epoch is not None and epoch >= 0:
                self.epochs[k] = epoch
        self._complete(OK, [share_read(k, rs) for k, rs in records.items()], list(records),
                       group=group)
        return msgs

    def acknowledge(self, msgs: list[Message]) -> None:
        """An ``ack`` op for every record of the last poll, by the seeded outcome mix."""
        if not msgs or self.consumer is None:
            return
        consumer, group = self.consumer, self.group
        outcomes = [self._outcome() for _ in msgs]
        keyed = [(self.keys.key(m.topic(), m.partition()), m) for m in msgs]
        mops = [ack(k, m.offset(), o) for (k, m), o in zip(keyed, outcomes, strict=True)]
        touched = list(dict.fromkeys(k for k, _ in keyed))
        self._invoke("ack", mops, group=group)
        try:
            for m, o in zip(msgs, outcomes, strict=True):
                consumer.acknowledge(m, ACK_TYPES[o])
            done = C.bounded(lambda: consumer.commit_sync(self.cfg.op_timeout),
                             timeout=self.cfg.op_timeout + self.cfg.close_timeout,
                             name="commit_sync")
        except C.Hung as e:
            self.consumer = None  # unsafe to close under the call: abandoned
            self.wl.abandoned_clients.append(consumer)
            self._error(e)
            self._complete(INFO, mops, touched, group=group)
            return
        except (KafkaException, RuntimeError) as e:
            self._error(e)
            self._complete(INFO, mops, touched, respawn=False, group=group)
            return
        outcome = self._commit_outcome(done, {(m.topic(), m.partition()) for m in msgs})
        self._complete(outcome, mops, touched, respawn=False, group=group)

    def _outcome(self) -> str:
        r = self.rng.random()
        if r < self.cfg.share_reject_share:
            return REJECT
        if r < self.cfg.share_reject_share + self.cfg.share_release_share:
            return RELEASE
        return ACCEPT

    def _commit_outcome(self, done: Any, sent: set[tuple[str, int]]) -> str:
        """``ok`` when every partition acknowledged reports success; else ``info``."""
        results = {(tp.topic, tp.partition): err for tp, err in (done or {}).items()}
        ok = True
        for tp in sent:
            err = results.get(tp, "no result")
            if err is not None:
                self._error(err)
                ok = False
        return OK if ok else INFO

    def close_clients(self) -> None:
        super().close_clients()
        self.share_keys = []


def run_share(proc: ShareProcess, wl: Workload) -> None:
    """A share process's loop until the workload stops."""
    while not wl.stopping.is_set():
        started = time.monotonic()
        try:
            proc.step()
        except Exception:
            log.exception("share process %d failed", proc.pid)
            wl.recorder.complete_abandoned_process(proc.pid, "probe error")
            proc.respawn()
        # An op that returned at once (no topics yet, an error) does not spin.
        wl.stopping.wait(max(0.0, 0.05 - (time.monotonic() - started)))
    proc.close_clients()
