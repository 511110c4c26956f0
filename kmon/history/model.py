"""The op model: one Jepsen-style operation, as every part of kmon sees it.

A *history* is a sequence of ops. Each logical process alternates an ``invoke`` with its
completion (``ok``, ``fail`` or ``info``), like Jepsen's queue workload:

- ``f`` is one of ``send``, ``poll``, ``txn`` (micro-ops), ``commit`` (micro-ops: an offset
  commit of the process's consumer group), ``share-poll`` and ``ack`` (micro-ops: a share
  consumer's poll and its acknowledgements, KIP-932), ``assign``, ``subscribe`` (a list of
  keys) or ``crash`` (the process's clients were torn down; no value).
- A *key* names one topic-partition; keys and values are opaque ints or strings and keep their
  types end to end.
- Micro-ops (mops), normalised on decode so detectors never re-parse wire shapes:

  ============================  ==============================================================
  ``("send", key, value, None)``  a send as invoked, or completed with its offset unknown
  ``("send", key, value, off)``   a send whose completion reported offset ``off``
  ``("poll", None)``              a poll as invoked
  ``("poll", {key: [(off, value), ...]})``  a completed poll: records per key, in poll order
  ``("commit", key, off)``        the group's committed offset for ``key`` set to ``off`` (the
                                  next offset to read), in a ``commit`` op or, sent with
                                  ``send_offsets_to_transaction``, in a ``txn`` op
  ``("share-read", key, None)``   a share poll that may acquire records of ``key``: as invoked,
                                  or completed with its records unknown (info, fail)
  ``("share-read", key, [(off, value, count), ...])``  records of ``key`` a share poll
                                  delivered, with each one's delivery count, in poll order
  ``("ack", key, off, outcome)``  a share consumer's acknowledgement of the record at ``off``:
                                  ``accept``, ``release`` or ``reject``
  ============================  ==============================================================

- Committed offsets are data (``__consumer_offsets``): ``OpMeta.group`` names the consumer group
  an op's commits and assignments belong to, and ``OpMeta.starts`` where each partition the op
  assigned starts (``Start``): the probe looks the committed offset up and assigns it (see
  ``kmon.checker.offsets`` for what is checked).
- Share groups (KIP-932): ``OpMeta.group`` names the share group of a ``share-poll`` or ``ack``
  op. A ``share-poll`` lists a ``share-read`` per key it may acquire records of (invoked and
  completed alike); an ``ack`` op is the acknowledgements one ``commit_sync`` sent, its type
  their outcome (see ``kmon.checker.share`` for what is checked).

Codecs (JSON, JSONL, EDN, Avro) convert Jepsen's wire shapes (``["send", k, [off, v]]``,
``["poll", {k: [[off, v], ...]}]``) to and from this form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal

Key = int | str
Value = int | str
Offset = int

OpType = Literal["invoke", "ok", "fail", "info"]
OpF = Literal["send", "poll", "txn", "commit", "assign", "subscribe", "crash", "share-poll",
              "ack"]

OP_TYPES: tuple[str, ...] = ("invoke", "ok", "fail", "info")
OP_FS: tuple[str, ...] = ("send", "poll", "txn", "assign", "subscribe", "crash", "commit",
                          "share-poll", "ack")
MOP_FS: frozenset[str] = frozenset(("send", "poll", "txn"))  # ops of values (workload ops)
SHARE_FS: frozenset[str] = frozenset(("share-poll", "ack"))  # a share group's ops (KIP-932)

# A share consumer's acknowledgement of one record (``("ack", key, off, outcome)``):
ACCEPT: Final = "accept"  # processed: never delivered again
RELEASE: Final = "release"  # back to the group: delivered again (until the delivery limit)
REJECT: Final = "reject"  # unprocessable: archived, never delivered again
ACK_OUTCOMES: tuple[str, ...] = (ACCEPT, RELEASE, REJECT)

# ("send", key, value, offset | None), ("poll", {key: [(offset, value), ...]} | None),
# ("commit", key, offset), ("share-read", key, [(offset, value, count), ...] | None) or
# ("ack", key, offset, outcome)
Mop = tuple

# Where an assigned partition starts (``Start.source``):
START_COMMITTED: Final = "committed"  # at the group's committed offset, as looked up
START_RESET: Final = "reset"  # none committed: at the log start or end (auto.offset.reset)
START_RESTORED: Final = "restored"  # where this consumer was before a rebalance took it
START_CLIENT: Final = "client"  # left to the client library (offset unknown to the probe)
START_SOURCES: tuple[str, ...] = (START_COMMITTED, START_RESET, START_RESTORED, START_CLIENT)


@dataclass(slots=True, frozen=True)
class Start:
    """Where a consumer started a partition it was assigned: ``offset`` (None when the client
    library placed it, or no committed offset and no reset applies), and why there."""

    offset: int | None
    source: str  # one of START_SOURCES


@dataclass(slots=True, frozen=True)
class Rebalance:
    """One consumer-group rebalance callback seen during an op: partitions revoked or assigned."""

    kind: str  # "assigned", "revoked", "lost" or "" when the history does not say
    keys: tuple[Key, ...]


@dataclass(slots=True, frozen=True)
class KeyPlacement:
    """Where a key lives and which broker led it, as the client's metadata showed at the time."""

    topic: str
    partition: int
    leader: int | None = None
    leader_epoch: int | None = None


@dataclass(slots=True)
class OpMeta:
    """What a kmon probe knows beyond Jepsen's fields; absent (None) in Jepsen histories."""

    probe: str = ""
    transactional_id: str | None = None
    txn_seq: int | None = None
    deliberate_abort: bool = False
    error: str | None = None
    seek_to_beginning: bool = False
    placements: dict[Key, KeyPlacement] = field(default_factory=dict)
    group: str | None = None  # the consumer (or share) group of the op's commits, assignments,
    # share polls and acknowledgements
    starts: dict[Key, Start] = field(default_factory=dict)  # partitions the op assigned
    # On a completion: when its invocation happened (ns). Lets per-key consumers of op events,
    # which never see a poll's key-less invoke, stamp realtime lag with the invocation time.
    invoke_time: int | None = None


@dataclass(slots=True)
class Op:
    index: int
    time: int  # nanoseconds
    process: int | str
    type: str  # one of OP_TYPES
    f: str  # one of OP_FS
    value: Any = None  # list[Mop] for send/poll/txn/commit/share-poll/ack, list[Key] for
    # assign/subscribe
    rebalance_log: tuple[Rebalance, ...] = ()
    meta: OpMeta | None = None

    @property
    def is_invoke(self) -> bool:
        return self.type == "invoke"

    def sends(self) -> list[tuple[Key, Value, Offset | None]]:
        """(key, value, offset) of each send mop, in op order."""
        if self.f not in MOP_FS or not self.value:
            return []
        return [(m[1], m[2], m[3]) for m in self.value if m[0] == "send"]

    def commits(self) -> list[tuple[Key, Offset]]:
        """(key, offset) of each offset-commit mop (``commit`` and ``txn`` ops), in op order."""
        if (self.f != "commit" and self.f != "txn") or not self.value:
            return []
        return [(m[1], m[2]) for m in self.value if m[0] == "commit"]

    def reads(self) -> dict[Key, list[tuple[Offset, Value]]]:
        """Records read per key across all poll mops, in op order."""
        out: dict[Key, list[tuple[Offset, Value]]] = {}
        if self.f not in MOP_FS or not self.value:
            return out
        for m in self.value:
            if m[0] == "poll" and m[1]:
                for k, pairs in m[1].items():
                    out.setdefault(k, []).extend(pairs)
        return out

    def share_reads(self) -> dict[Key, list[tuple[Offset, Value, int]]]:
        """Records a share poll delivered per key, (offset, value, delivery count) each."""
        out: dict[Key, list[tuple[Offset, Value, int]]] = {}
        if self.f != "share-poll" or not self.value:
            return out
        for m in self.value:
            if m[0] == "share-read" and m[2]:
                out.setdefault(m[1], []).extend(m[2])
        return out

    def acks(self) -> list[tuple[Key, Offset, str]]:
        """(key, offset, outcome) of each acknowledgement of an ``ack`` op, in op order."""
        if self.f != "ack" or not self.value:
            return []
        return [(m[1], m[2], m[3]) for m in self.value if m[0] == "ack"]

    def rebalanced_keys(self) -> set[Key]:
        keys: set[Key] = set()
        for r in self.rebalance_log:
            keys.update(r.keys)
        return keys


def send(key: Key, value: Value, offset: Offset | None = None) -> Mop:
    return ("send", key, value, offset)


def commit(key: Key, offset: Offset) -> Mop:
    return ("commit", key, offset)


def share_read(key: Key, records: list[tuple[Offset, Value, int]] | None = None) -> Mop:
    """A share poll's records of ``key`` (None: as invoked, or not known)."""
    return ("share-read", key, None if records is None else [(o, v, c) for o, v, c in records])


def ack(key: Key, offset: Offset, outcome: str) -> Mop:
    return ("ack", key, offset, outcome)


def poll(reads: dict[Key, list[tuple[Offset, Value]]] | None = None) -> Mop:
    if reads is not None:
        reads = {k: [(o, v) for o, v in pairs] for k, pairs in reads.items()}
    return ("poll", reads)


# A clock tick is an op event of no process and no key: the invocation of an empty poll at
# time ``t``. It only moves the monitor's event-time watermark (its events partition's, see
# docs/monitor.md); checkers skip it. Probes send one to every events partition each second.
TICK_PROCESS: Final = 1 << 40  # no probe process has this number


def clock_tick(t: int, probe: str) -> Op:
    """A clock tick at ``t`` (ns) from ``probe``."""
    return Op(TICK_PROCESS, t, TICK_PROCESS, "invoke", "poll", [("poll", None)],
              meta=OpMeta(probe=probe))


def is_clock_tick(op: Op) -> bool:
    return op.process == TICK_PROCESS and op.type == "invoke"
