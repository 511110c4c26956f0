"""kmon's nemesis: real faults on the local Kafka cluster, each bounded in time and undone.

Fault model
-----------
A fault (``base.Fault``) is *started*, is in effect for a while, and is *stopped*, which undoes
it; ``stop`` is idempotent and also undoes a start that failed half-way. Settings are checked
when the fault is made (``SettingError`` naming the setting); what the cluster looks like is
checked when it starts (``FaultError`` saying why it cannot). Every fault keeps a
``FaultRecord``: ``time.time()`` stamps (invoked, in effect, stop invoked, undone, cluster
healthy again), what it chose and measured (``info``), and timed ``marks`` for the steps in
between. ``runner.Nemesis`` runs faults (start, hold, stop, wait until healthy) and is what
the CLI, the test fixtures and the detection matrix drive.

Faults
------
1. ``pause`` (``process.Pause``): SIGSTOP a broker, a node or the leader of a topic-partition;
   SIGCONT to undo.
2. ``crash`` (``process.Crash``): SIGKILL a broker; start it again on the same data dir.
3. ``net-<kind>`` (``network.NetworkFault``): latency, timeout (stalled data), reset,
   bandwidth, slicer or down, on the Toxiproxy proxies between clients and chosen brokers
   (``kmon.local.toxiproxy``); toxics removed to undo. Only clients that bootstrap through the
   proxies are hit.
4. ``delete-records`` (``records.DeleteRecords``): DeleteRecords up to the high watermark on
   probe partitions, once or repeatedly; measures how many deleted records no consumer group
   had read. Deleted data stays deleted (KAFKA-17062's loss, on demand).
5. ``unclean-election`` (``unclean.UncleanElection``): on a 2-replica partition, pause the
   follower until it leaves the ISR, let the leader take writes alone, kill it, resume the
   follower: it is elected uncleanly with a shorter log. At stop the old leader restarts and
   truncates. The lost offsets are measured from the old leader's segment files.
6. Unsafe client settings (``presets``): probe settings that let real faults cause anomalies
   (idempotence off with retries behind the proxies; read_uncommitted with many aborts; acks=1
   on 2-replica topics).

Evidence and health
-------------------
``segments`` reads a partition's log straight from a broker's disk (did a value really land at
two offsets? did the old leader really truncate?). ``health.problems`` says what keeps the
cluster from being whole (a broker down, an ISR short, a proxy dirty, an undo pending);
``health.heal`` mends it, also after a nemesis that was killed (``kafka.Journal``).

Detection matrix
----------------
``scenarios.SCENARIOS`` lists the matrix rows: preset, fault, duration, and the anomaly types
the monitor must, may and must not report. See docs/nemesis.md.
"""

from __future__ import annotations

import importlib
from typing import Any

# Names -> defining module, imported on first use: the CLI reads fault kinds from
# kmon.nemesis.network for `kmon --help` without loading the Kafka client.
_EXPORTS = {
    "Crash": "process",
    "DeleteRecords": "records",
    "Fault": "base",
    "FaultError": "base",
    "FaultRecord": "base",
    "Mark": "base",
    "Nemesis": "runner",
    "NetworkFault": "network",
    "Pause": "process",
    "Target": "targets",
    "UncleanElection": "unclean",
}
__all__ = sorted(_EXPORTS)

def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"kmon.nemesis.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'kmon.nemesis' has no attribute {name!r}")
