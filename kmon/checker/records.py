"""The records a key's state keeps besides its window, and that detectors pass around.

Slotted classes in a compiled module: each field is a load. State stores keep them as the
lists or tuples they were before (``row``, ``loose_of``...), so saved states load unchanged.
"""

from __future__ import annotations

from typing import Any, Final

from kmon.checker.flags import CAND, DECIDED, READ_OK, VER, W_OK

# ProcPos's fields, named once for its slots and its serialized form (compiled classes do not
# expose ``__slots__``).
PROC_FIELDS: Final = (
    "lag_pos", "poll_off", "poll_op", "poll_val", "send_off", "send_op", "send_val", "time"
)


class ProcPos:
    """One process's position on one key: its last ok poll and send, for order checks."""

    __slots__ = PROC_FIELDS

    def __init__(self) -> None:
        self.poll_off: int | None = None  # None: no position (never polled, or reset)
        self.poll_op = -1
        self.poll_val: Any = None
        self.send_off: int | None = None
        self.send_op = -1
        self.send_val: Any = None
        self.lag_pos = -1  # highest offset this process has read: what it has caught up to
        self.time = 0


class Loose:
    """A value the key knows but holds in no slot: a send that completed without an offset, or
    a value displaced from its offset by a conflicting one (the flags are a slot's)."""

    __slots__ = ("ack_time", "flags", "offset", "time", "writer")

    def __init__(self, offset: int | None, flags: int, writer: int, ack_time: int,
                 time: int) -> None:
        self.offset = offset  # where it was sent or read; None: its send named no offset
        self.flags = flags
        self.writer = writer  # the writer op's index, -1 unknown
        self.ack_time = ack_time  # when it was acknowledged or first revealed (ns; 0: never)
        self.time = time  # the latest event that touched it: forgotten a grace period after

    def consumed(self) -> bool:
        """A committed (ok) poll read it."""
        return bool(self.flags & READ_OK)

    def acked(self) -> bool:
        """Its writer's completion was ok."""
        return bool(self.flags & W_OK)

    def mark(self, flag: int) -> None:
        """Record a detector's bookkeeping flag (``KeyState.mark``)."""
        self.flags |= flag

    def in_version_order(self) -> bool:
        """A poll read it at ``offset``, or an ok send's ack named it."""
        return bool(self.flags & VER)

    def decided(self) -> None:
        """Its absence verdict was given (``lost_write``)."""
        self.flags = (self.flags & ~CAND) | DECIDED

    def marked(self, flag: int) -> bool:
        return bool(self.flags & flag)

    def row(self) -> list[Any]:
        """As state stores keep it (a list, the format's since version 2)."""
        return [self.offset, self.flags, self.writer, self.ack_time, self.time]


def loose_of(row: list[Any]) -> Loose:
    return Loose(row[0], row[1], row[2], row[3], row[4])


class PendingRead:
    """A read of a value whose writer's outcome is not known yet: judged (G1a, visibility) when
    the writer completes, or forgotten after ``deadline``."""

    __slots__ = ("deadline", "offset", "ok", "process", "reader")

    def __init__(self, reader: int, offset: int, deadline: int, process: Any, ok: bool) -> None:
        self.reader = reader  # the reading op's index
        self.offset = offset
        self.deadline = deadline
        self.process = process
        self.ok = ok  # the reading op committed

    def row(self) -> list[Any]:
        return [self.reader, self.offset, self.deadline, self.process, self.ok]


def pending_read_of(row: list[Any]) -> PendingRead:
    return PendingRead(row[0], row[1], row[2], row[3], row[4])


class Crossing:
    """An op that read or sent across empty offsets (``poll_skip``): a value landing on one
    later proves a skip. ``within`` one op (``op``'s successive reads or sends, from offset
    ``lo`` to ``hi``), or between a process's two ops (``first_op`` then ``op``; ``process``
    -1 unless an int)."""

    __slots__ = ("first_op", "hi", "lo", "op", "process", "send", "within")

    def __init__(self, op: int, send: bool, within: bool, first_op: int, process: int,
                 lo: int, hi: int) -> None:
        self.op = op
        self.send = send  # between two sends (else two reads)
        self.within = within
        self.first_op = first_op
        self.process = process
        self.lo = lo
        self.hi = hi
