"""Where the fold puts what it finds: anomalies, facts for the transaction stage, samples.

Detectors only append here; judging (the policy) and reporting happen elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kmon.checker.anomaly import Anomaly


@dataclass(slots=True, init=False)
class TxnFact:
    """What one key learned about one write of a multi-write op (transaction ``writer``).

    ``kind`` is ``visible`` (some poll read one of the op's values on this key) or ``invisible``
    (the value sits below what readers of the key have read past, yet nobody read it, and the
    grace period is over: it never will be visible).
    """

    kind: str
    writer: int
    key: Any
    value: Any
    offset: int | None
    outcome: str  # ok / info / fail / unknown, as the writer's completion said
    time: int
    # invisible: the poll that read past the value, and the highest offset read then (-1 when
    # not known), for the lost-write record of an info writer proven committed
    reader: int
    max_read: int

    # Written out (init=False): the dataclass's generated __init__ is interpreted code, about
    # 2,500 instructions a fact from the compiled fold; this one compiles.
    def __init__(self, kind: str, writer: int, key: Any, value: Any, offset: int | None,
                 outcome: str, time: int, reader: int = -1, max_read: int = -1) -> None:
        self.kind = kind
        self.writer = writer
        self.key = key
        self.value = value
        self.offset = offset
        self.outcome = outcome
        self.time = time
        self.reader = reader
        self.max_read = max_read


# One realtime-lag sample: (the poll's invocation time ns, process, key, lag ns). A plain tuple:
# one is made per ok poll and tracked key, so they must be cheap.
LagSample = tuple[int, Any, Any, int]


@dataclass
class Sink:
    anomalies: list[Anomaly] = field(default_factory=list)
    facts: list[TxnFact] = field(default_factory=list)
    lags: list[LagSample] = field(default_factory=list)
    unseen: list[tuple[Any, Any, int | None, int]] = field(default_factory=list)
    # first-read delays (ns) of acked values: send acked -> first poll that saw it
    e2e: list[tuple[Any, int]] = field(default_factory=list)

    def anomaly(self, type: str, record: dict[str, Any]) -> None:
        self.anomalies.append(Anomaly(type, record))

    def clear(self) -> None:
        self.anomalies.clear()
        self.facts.clear()
        self.lags.clear()
        self.unseen.clear()
        self.e2e.clear()
