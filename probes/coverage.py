"""Broker coverage: every broker present leads at least one live (written) probe key.

A probe writing a handful of keys wherever Kafka put their leaders leaves most brokers of a
big cluster unprobed: loss on them is invisible. Every metadata refresh the key space measures
which present brokers lead a writable key (``measure``) and, for each one that leads none,
picks the cheapest remedy (``remedy``):

1. the broker is the *preferred* (first) replica of a writable key and in its ISR: leadership
   moved away (a restart, a failover), so a preferred leader election moves it back;
2. it is the preferred replica of a writable key but not in its ISR yet: it is catching up;
   wait (an election would fail, a new topic would be churn);
3. it is the preferred replica of no writable key (a broker that just joined, or whose keys
   retired): a new probe topic whose replica assignment puts it first (``assignment``).

Only case 3 creates anything, and it gives each such broker a key of its own, so topics are
created at most once per broker joining or key rotation, never per refresh.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class PartitionMeta:
    """What metadata says of one probe key."""

    topic: str
    partition: int
    leader: int  # -1 without a leader
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @property
    def preferred(self) -> int | None:
        return self.replicas[0] if self.replicas else None


@dataclass(frozen=True)
class Coverage:
    present: frozenset[int]  # brokers in the metadata
    covered: frozenset[int]  # present brokers leading a writable key

    @property
    def uncovered(self) -> tuple[int, ...]:
        return tuple(sorted(self.present - self.covered))


@dataclass(frozen=True)
class Remedy:
    elect: tuple[PartitionMeta, ...] = ()  # move back to their preferred leader
    create_for: tuple[int, ...] = ()  # brokers that need a new key of their own


def measure(present: Iterable[int], writable: Iterable[PartitionMeta]) -> Coverage:
    brokers = frozenset(present)
    return Coverage(brokers, frozenset(m.leader for m in writable if m.leader in brokers))


def remedy(cov: Coverage, writable: list[PartitionMeta]) -> Remedy:
    elect: list[PartitionMeta] = []
    create_for: list[int] = []
    for broker in cov.uncovered:
        own = [m for m in writable if m.preferred == broker]
        if not own:
            create_for.append(broker)
            continue
        in_sync = [m for m in own if broker in m.isr]
        if in_sync:
            elect.append(in_sync[0])
    return Remedy(tuple(elect), tuple(create_for))


def leader_load(writable: Iterable[PartitionMeta]) -> Counter[int]:
    """Writable keys each broker leads."""
    return Counter(m.leader for m in writable if m.leader >= 0)


def assignment(brokers: Iterable[int], first: Iterable[int], partitions: int, rf: int,
               load: Counter[int] | None = None) -> list[list[int]]:
    """Replica lists of a new topic: preferred leaders ``first``, then the least loaded.

    Each partition's followers are the next brokers after its leader in id order, so
    replicas spread like Kafka's own placement.
    """
    ring = sorted(set(brokers))
    if rf > len(ring) or not ring:
        raise ValueError(f"replication factor {rf} exceeds the {len(ring)} brokers present")
    load = load if load is not None else Counter()
    head = [b for b in dict.fromkeys(first) if b in ring]
    rest = sorted((b for b in ring if b not in head), key=lambda b: (load[b], b))
    order = head + rest
    out = []
    for i in range(partitions):
        at = ring.index(order[i % len(order)])
        out.append([ring[(at + j) % len(ring)] for j in range(rf)])
    return out
