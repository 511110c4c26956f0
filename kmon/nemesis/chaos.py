"""Chaos: a seeded random schedule of faults, back to back, while probes and the monitor run.

The detection matrix runs one fault per row; production brings them one after the other:
rolling restarts, a controller failing over, a flapping network, a probe or the monitor's own
process dying. ``kmon nemesis chaos`` plays such a schedule on the local stack for N minutes:

- the schedule (``plan``) is drawn from a seed: the same seed, the same faults in the same
  order with the same holds and gaps. Each step is one bounded fault, undone before the next
  (the runner waits until the cluster is whole again), and its record (``time.time()`` stamps,
  what it chose) is written to ``schedule.jsonl`` beside the probes' histories;
- safe probes (the probe's own settings, one direct, one behind Toxiproxy so network faults
  reach it) must cost nothing: no anomaly from the monitor, none from ``kmon check`` on the
  same history, every op they recorded in the events topic, the monitor never blind longer
  than ``KmonMonitorStalled``'s threshold;
- with ``lossy`` the schedule also deletes records ahead of a lagging reader, elects an
  out-of-sync leader under an acks=1 probe and stalls answers to a probe without idempotence:
  every loss ``kmon check`` proves in those probes' histories must be reported by the monitor,
  in equal counts.

The monitor runs as its own process (``kmon monitor``, its own Spark driver) so that a fault
can kill it; it restarts from its checkpoint. Its verdicts are read from its evidence topic
(a replayed micro-batch's copies dropped by id), so counts survive the restarts. With
``standalone`` the monitor runs on the local Spark standalone cluster (``kmon pack``'s archive,
workers without kmon), and the schedule also kills a worker with its executor (a lost node)
and starts it again; in local mode there is no executor to kill (``local[*]``: the driver runs
the tasks).
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from typing import Any

from kmon.env import SettingError

# Fault kinds of the schedule. Safe ones cost nothing with the probe's safe settings.
SAFE_KINDS = ("pause-leader", "crash-leader", "pause-controller", "crash-controller",
              "rolling-restart", "events-leader", "net-latency", "net-reset",
              "net-partition", "kill-probe", "kill-monitor")
# Lossy ones lose acknowledged data on purpose, each on the probe whose settings let it.
LOSSY_KINDS = ("delete-records", "unclean-election", "idempotence-off")
# Kinds that need the monitor on the standalone Spark cluster.
CLUSTER_KINDS = ("kill-executor",)
# How often each kind is drawn (relative); the monitor's restart costs a Spark start.
WEIGHTS = {"pause-leader": 3, "crash-leader": 3, "pause-controller": 2, "crash-controller": 2,
           "rolling-restart": 1, "events-leader": 2, "net-latency": 2, "net-reset": 2,
           "net-partition": 2, "kill-probe": 1, "kill-monitor": 1, "delete-records": 2,
           "unclean-election": 1, "idempotence-off": 2, "kill-executor": 1}
# Seconds a fault holds, by kind (drawn uniformly); rolling restarts and process kills take
# what they take.
HOLDS = {"net-latency": (5.0, 15.0), "net-reset": (3.0, 8.0), "net-partition": (3.0, 10.0),
         "delete-records": (4.0, 8.0), "unclean-election": (6.0, 10.0),
         "idempotence-off": (2.0, 4.0)}
DEFAULT_HOLD = (4.0, 12.0)


@dataclass(frozen=True)
class Step:
    """One fault of the schedule: due ``at`` seconds after the start, held ``hold`` s."""

    n: int
    at: float
    kind: str
    hold: float
    pick: float  # a draw in [0, 1) the step uses to choose among brokers or probes


@dataclass
class ChaosSettings:
    minutes: float = 30.0
    seed: int = 1
    lossy: bool = False
    kinds: tuple[str, ...] = ()  # () = every safe kind (and the lossy ones with ``lossy``)
    gap: tuple[float, float] = (4.0, 15.0)  # seconds between a fault's undo and the next
    rate: float = 20.0  # ops/s per probe
    processes: int = 4
    settle_timeout: float = 600.0
    standalone: bool = False  # the monitor on the local Spark standalone cluster

    def chosen(self) -> tuple[str, ...]:
        kinds = self.kinds or (SAFE_KINDS + (LOSSY_KINDS if self.lossy else ())
                               + (CLUSTER_KINDS if self.standalone else ()))
        unknown = [k for k in kinds if k not in WEIGHTS]
        if unknown:
            raise SettingError(f"chaos kinds: unknown {unknown}; known: "
                               f"{', '.join(SAFE_KINDS + LOSSY_KINDS + CLUSTER_KINDS)}")
        if not self.lossy and set(kinds) & set(LOSSY_KINDS):
            raise SettingError("chaos kinds: lossy kinds need lossy (--lossy)")
        if not self.standalone and set(kinds) & set(CLUSTER_KINDS):
            raise SettingError("chaos kinds: kill-executor needs the monitor on the standalone "
                               "Spark cluster (--standalone)")
        return tuple(kinds)


def plan(settings: ChaosSettings) -> list[Step]:
    """The seeded schedule: steps until ``minutes`` are used up, assuming each fault takes
    its hold plus a typical undo (the runner waits for health, so real times drift later;
    the schedule's order and holds do not)."""
    rng = random.Random(settings.seed)
    kinds = settings.chosen()
    weights = [WEIGHTS[k] for k in kinds]
    steps: list[Step] = []
    at = rng.uniform(*settings.gap)
    end = settings.minutes * 60
    while at < end:
        kind = rng.choices(kinds, weights)[0]
        hold = round(rng.uniform(*HOLDS.get(kind, DEFAULT_HOLD)), 1)
        steps.append(Step(len(steps), round(at, 1), kind, hold, rng.random()))
        at += hold + _typical_undo(kind) + rng.uniform(*settings.gap)
    return steps


def _typical_undo(kind: str) -> float:
    """Seconds the undo and the wait for health typically take (for spacing the plan)."""
    return {"rolling-restart": 60.0, "kill-monitor": 45.0, "kill-executor": 30.0,
            "crash-leader": 15.0, "crash-controller": 15.0,
            "unclean-election": 30.0}.get(kind, 8.0)


@dataclass
class StepRecord:
    """What a step did: the planned step, the fault's record (or the process it killed)."""

    step: Step
    started_at: float | None = None
    ended_at: float | None = None
    info: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self.step), "started_at": self.started_at, "ended_at": self.ended_at,
                "info": self.info, "error": self.error}


def write_schedule(path: Any, records: list[StepRecord]) -> None:
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r.as_json(), default=str) + "\n")
