"""Which anomalies Kafka's model allows: detect everything, judge here.

Detectors report every anomaly they find; validity only counts the types not allowed for the
configured consumer isolation level. Each exemption says why.
"""

from __future__ import annotations

from typing import Final

from kmon.checker.anomaly import G0, G1A, G1C, INT_SEND_SKIP, UNSEEN

# Allowed whatever the isolation level.
ALWAYS_ALLOWED: dict[str, str] = {
    # Kafka transactions do not isolate writes: one transaction's records interleave with
    # another's in a partition. Jepsen saw these write cycles in Kafka, Redpanda and Bufstream
    # at every isolation level.
    G0: "transactions' writes interleave in partitions (normal in Kafka's model)",
    # The same interleaving seen from inside one transaction: other producers' records land
    # between its successive sends to a partition.
    INT_SEND_SKIP: "other producers' records interleave with a transaction's sends",
}

# Allowed only when consumers read uncommitted data.
READ_UNCOMMITTED_ALLOWED: dict[str, str] = {
    # read_uncommitted consumers see records of transactions that later abort, by design.
    G1A: "read_uncommitted consumers see aborted records by design",
    # ... and may therefore see each other's uncommitted writes: write-read cycles.
    G1C: "read_uncommitted consumers may see each other's uncommitted writes",
}

# Allowed when write-write dependencies are inferred from log order (--ww-deps).
WW_DEPS_ALLOWED: dict[str, str] = {
    # Writes are not isolated, so cycles such as T1 <ww T2 <wr T1 are what Kafka's model
    # produces once ww edges are drawn: Jepsen allows them too.
    G1C: "with inferred write-write edges, interleaved transactions form ww/wr cycles",
}

# Never allowed, though not an anomaly record: acknowledged values that no ok or info poll ever
# returned cannot be shown safe (Jepsen treats them the same way).
NOT_ALLOWED: Final = {UNSEEN: "acknowledged values never consumed: their fate is unknown"}

ISOLATION_LEVELS: Final = ("read_committed", "read_uncommitted")


def allowed_anomalies(isolation: str = "read_committed", ww_deps: bool = False) -> dict[str, str]:
    """Anomaly type -> why Kafka's model allows it, for consumers at ``isolation``."""
    if isolation not in ISOLATION_LEVELS:
        raise ValueError(f"isolation must be one of {ISOLATION_LEVELS}, got {isolation!r}")
    allowed = dict(ALWAYS_ALLOWED)
    if isolation == "read_uncommitted":
        allowed.update(READ_UNCOMMITTED_ALLOWED)
    if ww_deps:
        allowed.update(WW_DEPS_ALLOWED)
    return allowed


def invalidating(
    types: list[str] | set[str], isolation: str = "read_committed", ww_deps: bool = False
) -> list[str]:
    """The anomaly types among ``types`` (``unseen`` included) that make a history invalid."""
    allowed = allowed_anomalies(isolation, ww_deps)
    return sorted(t for t in types if t not in allowed)
