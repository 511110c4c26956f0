"""Unclean leader election: a leader with writes no follower has dies, and a follower with a
shorter log takes over. Acknowledged records vanish and their offsets are handed out again.

The local cluster runs three combined broker+controller nodes, so two of them must stay up for
the controller quorum to elect anyone. Pausing both followers of a 3-replica partition would
stop the quorum instead; the victim is therefore a partition with **two** replicas (the probe's
``unclean`` preset creates its topics with ``replication_factor=2``), and the third node is
the tiebreaker voter. On partition ``tp`` with leader L and follower F:

1. The topic gets ``unclean.leader.election.enable=true`` and ``min.insync.replicas=1`` (the
   originals are journaled and restored at stop). With min.insync.replicas at 2, Kafka 4's
   eligible leader replicas (KIP-966) keep F eligible instead: the high watermark stops while
   the ISR is L alone, and F's takeover is then a clean election that loses only records no
   consumer could read yet. At 1 the high watermark follows L, consumers read what will vanish,
   and F's takeover is a real unclean election.
2. F is paused (SIGSTOP) and, after ``broker.session.timeout.ms``, fenced and dropped from the
   ISR. From the pause on, every record L acknowledges at ``acks=1`` is on L alone.
3. After ``lag`` more seconds L is killed (SIGKILL) and F resumed at once. The controller
   fences L and, the ISR holding only the dead L, elects F uncleanly (an ElectLeaders(UNCLEAN)
   request nudges it if the controller's periodic check is slow).
4. F leads with the shorter log; new writes take the lost records' offsets.
5. At stop L starts again, truncates its log to F's (the acknowledged records are now gone
   from every replica) and rejoins the ISR; the topic settings are restored.

How much was lost is measured, not assumed: L's log end is read from its segment files after
the kill, F's log end after the election; ``info["truncated"]`` is the difference and
``info["lost_offsets"]`` the range.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import ElectionType, KafkaException, TopicPartition

from kmon.env import SettingError
from kmon.local.ports import BROKER_IDS
from kmon.nemesis import segments
from kmon.nemesis.base import Fault, FaultError, check_duration, wait_for
from kmon.nemesis.kafka import (
    TIMEOUT,
    Journal,
    admin_on,
    high_watermark,
    running_admin,
    set_topic_configs,
    start_broker,
    topic_configs,
)
from kmon.nemesis.targets import check_partition, check_topic

if TYPE_CHECKING:
    from kmon.local.cluster import LocalCluster, PartitionState

CONFIGS = ("unclean.leader.election.enable", "min.insync.replicas")


class UncleanElection(Fault):
    """Make ``topic``/``partition`` (or the busiest 2-replica partition of the topics starting
    with ``topic_prefix``) lose acknowledged records through an unclean election.
    """

    kind = "unclean-election"

    def __init__(
        self,
        cluster: LocalCluster,
        topic: str | None = None,
        partition: int | None = None,
        topic_prefix: str | None = None,
        lag: float = 3.0,
        min_insync_replicas: int | None = 1,
        election_timeout: float = 60.0,
    ) -> None:
        if (topic is None) == (topic_prefix is None):
            raise SettingError("unclean-election: give either topic or topic_prefix")
        if topic is not None:
            check_topic(topic)
        if topic_prefix is not None:
            check_topic(topic_prefix, "topic_prefix")
            if partition is not None:
                raise SettingError("partition: only with a single topic")
        if partition is not None:
            check_partition(partition)
        check_duration("lag", lag)
        check_duration("election_timeout", election_timeout)
        if min_insync_replicas not in (None, 1, 2):
            raise SettingError(
                "min_insync_replicas: 1, 2 or None (leave the topic's), "
                f"got {min_insync_replicas!r}"
            )
        self.cluster = cluster
        self.topic = topic
        self.partition = partition
        self.topic_prefix = topic_prefix
        self.lag = float(lag)
        self.min_insync_replicas = min_insync_replicas
        self.election_timeout = float(election_timeout)
        self.journal = Journal(cluster.home)
        self._undo_id: str | None = None
        self._originals: dict[str, str | None] | None = None
        self.victim: tuple[str, int] | None = None
        self.leader: int | None = None
        self.follower: int | None = None
        self._lost: set[bytes] = set()
        super().__init__()

    def params(self) -> dict[str, Any]:
        return {
            "topic": self.topic, "partition": self.partition, "topic_prefix": self.topic_prefix,
            "lag": self.lag, "min_insync_replicas": self.min_insync_replicas,
            "election_timeout": self.election_timeout,
        }

    # --- choosing the victim -------------------------------------------------------------

    def _candidates(self) -> list[tuple[str, int, PartitionState]]:
        with running_admin(self.cluster) as admin:
            metadata = admin.list_topics(timeout=TIMEOUT)
        if self.topic is not None:
            topics = [self.topic]
            if self.topic not in metadata.topics:
                raise FaultError(f"no topic {self.topic}")
        else:
            assert self.topic_prefix is not None
            topics = sorted(t for t in metadata.topics if t.startswith(self.topic_prefix))
            if not topics:
                raise FaultError(f"no topic starts with {self.topic_prefix!r}")
        out = []
        for name in topics:
            for p, state in sorted(self.cluster.describe_topic(name).items()):
                if self.partition is None or p == self.partition:
                    out.append((name, p, state))
        if self.partition is not None and not out:
            raise FaultError(f"topic {self.topic} has no partition {self.partition}")
        return out

    def _choose(self) -> tuple[str, int, PartitionState]:
        candidates = self._candidates()
        usable = [
            c for c in candidates
            if len(c[2].replicas) == 2 and c[2].leader is not None
            and sorted(c[2].isr) == sorted(c[2].replicas)
        ]
        if not usable:
            name, p, state = candidates[0]
            raise FaultError(
                f"unclean election needs a partition with exactly 2 replicas, both in the ISR "
                f"(the third node keeps the controller quorum while one replica is paused and "
                f"the other killed); {name}/{p} has replicas {state.replicas}, ISR {state.isr}. "
                "Start the probe with the `unclean` preset (replication_factor=2)"
            )
        if len(usable) == 1:
            return usable[0]
        # The busiest partition: most records written over one second, then the longest log.
        with running_admin(self.cluster) as admin:
            first = {(t, p): high_watermark(admin, t, p) for t, p, _ in usable}
            time.sleep(1.0)
            growth = {(t, p): high_watermark(admin, t, p) - first[(t, p)] for t, p, _ in usable}
        return max(usable, key=lambda c: (growth[(c[0], c[1])], first[(c[0], c[1])]))

    # --- the fault -----------------------------------------------------------------------

    def _start(self) -> None:
        cluster = self.cluster
        down = [s.node_id for s in cluster.status() if s.state != "running"]
        if down:
            raise FaultError(f"brokers {down} are not running; the fault needs all three")
        topic, partition, state = self._choose()
        leader = state.leader
        assert leader is not None
        follower = next(r for r in state.replicas if r != leader)
        third = next(n for n in BROKER_IDS if n not in state.replicas)
        self.victim, self.leader, self.follower = (topic, partition), leader, follower
        info = self.record.info
        info.update(topic=topic, partition=partition, leader=leader, follower=follower,
                    tiebreaker=third)

        wanted: dict[str, str | None] = {"unclean.leader.election.enable": "true"}
        if self.min_insync_replicas is not None:
            wanted["min.insync.replicas"] = str(self.min_insync_replicas)
        # The tiebreaker is never paused or killed: ask it, one short-lived client at a time.
        with admin_on(cluster, third) as admin:
            self._originals = topic_configs(admin, topic, list(wanted))
            self._undo_id = self.journal.add(
                {"kind": "topic-configs", "topic": topic, "configs": self._originals}
            )
            set_topic_configs(admin, topic, wanted)
            self.mark(f"{topic}: {wanted}")
            info["high_watermark_at_start"] = high_watermark(admin, topic, partition)
        cluster.pause(follower)
        self.mark(f"follower {follower} paused")
        took = wait_for(
            lambda: follower not in cluster.isr(topic, partition), 60.0,
            f"broker {follower} to leave the ISR of {topic}/{partition}",
        )
        self.mark(f"follower {follower} out of the ISR after {took:.1f}s")
        time.sleep(self.lag)

        with admin_on(cluster, third) as admin:
            info["high_watermark_before_kill"] = high_watermark(admin, topic, partition)
        cluster.kill(leader)
        cluster.resume(follower)
        self.mark(f"leader {leader} killed, follower {follower} resumed")
        # The dead leader's log, from its own disk: everything it acknowledged.
        leader_dir = segments.partition_dir(cluster.data_dir(leader), topic, partition)
        old_log = segments.read_log(leader_dir)
        old_epoch = max((e for e, _ in segments.leader_epochs(leader_dir)), default=-1)
        info["old_leader_log_end"] = segments.log_end_offset(leader_dir)

        took = self._wait_elected(topic, partition, follower)
        self.mark(f"broker {follower} elected leader after {took:.1f}s")
        # Where the new leader's epoch starts is its log end at the election: the logs part
        # there. Read from its epoch checkpoint (its log end moves on with new writes).
        follower_dir = segments.partition_dir(cluster.data_dir(follower), topic, partition)
        new_epoch, new_end = self._new_epoch(follower_dir, old_epoch, follower)
        info["new_leader_epoch"] = new_epoch
        info["new_leader_log_end"] = new_end
        info["truncated"] = max(info["old_leader_log_end"] - new_end, 0)
        info["lost_offsets"] = [new_end, info["old_leader_log_end"]]
        info["lost_below_high_watermark"] = max(info["high_watermark_before_kill"] - new_end, 0)
        self._lost = {
            r.value for r in old_log
            if r.offset >= new_end and not r.control and r.value is not None
        }
        info["lost_values_sample"] = sorted(v.decode(errors="replace") for v in self._lost)[:5]

    @staticmethod
    def _new_epoch(follower_dir: Path, old_epoch: int, follower: int) -> tuple[int, int]:
        """The first leader epoch above ``old_epoch`` in the follower's checkpoint, and its
        start offset (waiting up to 30 s for the checkpoint to be written)."""
        deadline = time.monotonic() + 30.0
        while True:
            newer = [(e, o) for e, o in segments.leader_epochs(follower_dir) if e > old_epoch]
            if newer:
                return newer[0]
            if time.monotonic() >= deadline:
                raise FaultError(f"broker {follower} has no leader epoch above {old_epoch}")
            time.sleep(0.2)

    def _wait_elected(self, topic: str, partition: int, follower: int) -> float:
        started = time.monotonic()
        nudged_at = 0.0
        tp = TopicPartition(topic, partition)
        while True:
            state = self.cluster.describe_topic(topic).get(partition)
            if state is not None and state.leader == follower:
                return time.monotonic() - started
            waited = time.monotonic() - started
            if waited >= self.election_timeout:
                raise FaultError(
                    f"broker {follower} not elected leader of {topic}/{partition} after "
                    f"{self.election_timeout:.0f}s (last: {state})"
                )
            # The controller elects uncleanly on its own once it has fenced the dead leader;
            # after the session timeout, ask it directly every few seconds as well.
            if waited > 8.0 and time.monotonic() - nudged_at > 3.0:
                nudged_at = time.monotonic()
                # Fails while the dead leader is not fenced yet; the loop tells.
                # (No timeout keywords: confluent-kafka 2.16's elect_leaders fails on them
                # with a SystemError.)
                # The request itself may time out while the controller is busy fencing.
                with (contextlib.suppress(KafkaException, FaultError, TimeoutError),
                      running_admin(self.cluster) as admin):  # held: its futures die with it
                    admin.elect_leaders(ElectionType.UNCLEAN, [tp]).result(10.0)
            time.sleep(0.3)

    def _stop(self) -> None:
        cluster = self.cluster
        info = self.record.info
        if self.follower is not None and cluster.state(self.follower) == "paused":
            cluster.resume(self.follower)
            self.mark(f"follower {self.follower} resumed")
        if self.leader is not None and cluster.state(self.leader) == "stopped":
            waited = start_broker(cluster, self.leader)
            if waited > 1.0:
                self.mark(f"waited {waited:.0f}s for broker {self.leader}'s ports to be free")
            self.mark(f"old leader {self.leader} restarted")
        if self.victim is not None and self.leader is not None:
            topic, partition = self.victim
            cluster.wait_in_isr(topic, self.leader, [partition], timeout=120.0)
            self.mark(f"old leader {self.leader} back in the ISR (log truncated)")
            # The old leader truncated on rejoining: its own disk no longer has the lost values.
            leader_dir = segments.partition_dir(cluster.data_dir(self.leader), topic, partition)
            values = {r.value for r in segments.read_log(leader_dir)}
            info["lost_values_left_on_old_leader"] = len(self._lost & values)
        if self._originals is not None and self.victim is not None:
            with running_admin(cluster) as admin:
                set_topic_configs(admin, self.victim[0], self._originals)
            self.mark(f"{self.victim[0]}: settings restored")
        if self._undo_id is not None:
            self.journal.remove(self._undo_id)
            self._undo_id = None
