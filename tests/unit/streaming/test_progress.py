"""The monitor's progress poller: every batch's report reaches the outputs once, in order,
also when several batches finished between two polls."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kmon.streaming.monitor import _ProgressPoller


def report(batch: int) -> SimpleNamespace:
    return SimpleNamespace(batchId=batch, numInputRows=10 * batch, inputRowsPerSecond=1.0,
                           durationMs={"triggerExecution": 5}, eventTime={},
                           stateOperators=[SimpleNamespace(numRowsTotal=3, memoryUsedBytes=9)])


class Query:
    def __init__(self) -> None:
        self.done: list[SimpleNamespace] = []
        self.recent_reads = 0

    def finish(self, batch: int) -> None:
        self.done.append(report(batch))

    @property
    def lastProgress(self) -> Any:
        return self.done[-1] if self.done else None

    @property
    def recentProgress(self) -> list[SimpleNamespace]:
        self.recent_reads += 1
        return list(self.done)


class Outputs:
    def __init__(self) -> None:
        self.got: list[tuple[str, int]] = []

    def progress(self, stage: str, p: dict[str, Any]) -> None:
        self.got.append((stage, p["batchId"]))


def test_each_report_reaches_the_outputs_once_in_order() -> None:
    keys, txns = Query(), Query()
    monitor = SimpleNamespace(queries={"keys": keys, "transactions": txns}, outputs=Outputs())
    poller = _ProgressPoller(monitor)  # type: ignore[arg-type]
    poller.poll()  # nothing finished yet
    keys.finish(0)
    keys.finish(1)
    poller.poll()  # the first look reads every report so far
    txns.finish(7)  # a restarted query goes on from its checkpoint's batch
    keys.finish(2)
    poller.poll()
    poller.poll()  # nothing new
    reads = keys.recent_reads
    keys.finish(3)
    poller.poll()  # the next batch only: its last report is enough
    assert keys.recent_reads == reads
    for b in (4, 5, 6):
        keys.finish(b)
    poller.poll()  # batches finished faster than the polls: the gap is filled
    assert monitor.outputs.got == [
        ("keys", 0), ("keys", 1), ("keys", 2), ("transactions", 7), ("keys", 3), ("keys", 4),
        ("keys", 5), ("keys", 6)]
