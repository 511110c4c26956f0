"""Anomaly names and records.

One identifier per anomaly everywhere: the report key, the Prometheus ``anomaly`` label, the
alert name's suffix and the runbook anchor are these strings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

INCONSISTENT_OFFSETS: Final = "inconsistent-offsets"
DUPLICATE: Final = "duplicate"
LOST_WRITE: Final = "lost-write"
G1A: Final = "G1a"
PRECOMMITTED_READ: Final = "precommitted-read"
POLL_SKIP: Final = "poll-skip"
NONMONOTONIC_POLL: Final = "nonmonotonic-poll"
NONMONOTONIC_SEND: Final = "nonmonotonic-send"
INT_POLL_SKIP: Final = "int-poll-skip"
INT_NONMONOTONIC_POLL: Final = "int-nonmonotonic-poll"
INT_SEND_SKIP: Final = "int-send-skip"
INT_NONMONOTONIC_SEND: Final = "int-nonmonotonic-send"
G0: Final = "G0"
G1C: Final = "G1c"
TORN_TRANSACTION: Final = "torn-transaction"
# Committed offsets (``offsets``): where an assigned consumer starts, against the group's commits
OFFSET_COMMIT_LOST: Final = "offset-commit-lost"
OFFSET_COMMIT_REREAD: Final = "offset-commit-reread"
OFFSET_COMMIT_SKIP: Final = "offset-commit-skip"

# Share groups (``share``, KIP-932): what a share group promises about each record. Part of
# ANOMALY_TYPES (so of the monitor's metrics, the alerts and the runbook); SHARE_ANOMALY_TYPES
# names the subset (docs/share-groups.md).
SHARE_LOST: Final = "share-lost"
SHARE_DOUBLE_ACCEPT: Final = "share-double-accept"
SHARE_REDELIVERED: Final = "share-redelivered"
SHARE_CONCURRENT_DELIVERY: Final = "share-concurrent-delivery"
SHARE_DELIVERY_COUNT: Final = "share-delivery-count"
SHARE_ANOMALY_TYPES: tuple[str, ...] = (
    SHARE_LOST,
    SHARE_DOUBLE_ACCEPT,
    SHARE_REDELIVERED,
    SHARE_CONCURRENT_DELIVERY,
    SHARE_DELIVERY_COUNT,
)

ANOMALY_TYPES: tuple[str, ...] = (
    INCONSISTENT_OFFSETS,
    DUPLICATE,
    LOST_WRITE,
    G1A,
    PRECOMMITTED_READ,
    POLL_SKIP,
    NONMONOTONIC_POLL,
    NONMONOTONIC_SEND,
    INT_POLL_SKIP,
    INT_NONMONOTONIC_POLL,
    INT_SEND_SKIP,
    INT_NONMONOTONIC_SEND,
    G0,
    G1C,
    TORN_TRANSACTION,
    OFFSET_COMMIT_LOST,
    OFFSET_COMMIT_REREAD,
    OFFSET_COMMIT_SKIP,
    *SHARE_ANOMALY_TYPES,
)

# Not errors, but verdicts the online monitor also emits as evidence.
UNSEEN: Final = "unseen"


@dataclass(slots=True)
class Anomaly:
    """One detected anomaly: its type and a JSON-ready record (``key`` plus evidence fields)."""

    type: str
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> Any:
        return self.record.get("key")
