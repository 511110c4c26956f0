"""Running a chaos schedule (``kmon.nemesis.chaos``): the monitor's process, the probes, the
steps, and the verdicts at the end."""

from __future__ import annotations

import json
import logging
import os
import resource
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kmon.local.ports import BROKER_IDS, SPARK_WORKER_IDS
from kmon.local.spark_standalone import SparkStandalone
from kmon.nemesis import deposed_coordinator, kafka17754, presets
from kmon.nemesis.chaos import ChaosSettings, Step, StepRecord, plan, write_schedule
from kmon.nemesis.kafka17754 import Explained
from kmon.nemesis.matrix import MONITOR_TIMING, OFFLINE_ONLY, counts_of, read_topic
from kmon.nemesis.probe_child import ProbeChild, ProbeDied
from kmon.nemesis.scenarios import KAFKA_NORMAL

if TYPE_CHECKING:
    from kmon.local.cluster import LocalCluster
    from kmon.local.toxiproxy import LocalToxiproxy
    from kmon.nemesis.base import Fault

log = logging.getLogger("kmon.nemesis.chaos")

# KmonMonitorStalled's threshold (dashboards.rules.RuleConfig.monitor_stalled_after_s): the
# monitor must never go longer than this without finishing a micro-batch.
BLIND_LIMIT_S = 300.0
# Loss types a lossy probe's history can prove; the monitor's counts must equal check's.
LOSS_TYPES = ("lost-write", "duplicate", "inconsistent-offsets", "torn-transaction")
# A probe process killed on purpose leaves its last acknowledged values unread under its id
# (its replacement reads them under its own): those unseen verdicts are the kill's, not a loss.
KILLED_ALLOWED = ("unseen",)
# The probes: role -> preset. Safe roles must cost nothing; lossy roles exist with lossy.
SAFE_ROLES = {"safe": "safe", "proxied": "proxied"}
LOSSY_ROLES = {"lagging": "lagging-readers", "unclean": "unclean",
               "idempotence-off": "idempotence-off"}


def core_dumps() -> None:
    """Let this process and its children leave a core when they crash (preexec and self)."""
    hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
    resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))


class MonitorProcess:
    """``kmon monitor`` in a process of its own (its own Spark driver), killable and restarted
    from its checkpoint."""

    def __init__(self, cluster: LocalCluster, workdir: Path, tag: str, port: int,
                 settings: dict[str, str] | None = None,
                 environ: dict[str, str] | None = None) -> None:
        """``settings``: more ``--set`` settings (e.g. ``spark.*``); ``environ``: the driver's
        environment (default: this process's)."""
        self.cluster, self.workdir, self.tag, self.port = cluster, workdir, tag, port
        self.settings, self.environ = settings or {}, environ
        self.events_topic = f"kmon-ch-ev-{tag}"
        self.anomalies_topic = f"kmon-ch-an-{tag}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.kills: list[float] = []

    def command(self) -> list[str]:
        sets = {"topics.anomalies": self.anomalies_topic, "topics.facts": f"kmon-ch-fa-{self.tag}",
                "topics.dead-letters": f"kmon-ch-dl-{self.tag}", "trigger": "1s",
                "txn.trigger": "1s", **MONITOR_TIMING, **self.settings}
        cmd = [sys.executable, "-X", "faulthandler", "-m", "kmon.cli", "monitor",
               "-b", self.cluster.bootstrap, "--events-topic", self.events_topic,
               "--checkpoint", str(self.workdir / "checkpoint"),
               "--metrics-port", str(self.port)]
        for k, v in sets.items():
            cmd += ["--set", f"{k}={v}"]
        return cmd

    def start(self) -> None:
        self.starts += 1
        logf = open(self.workdir / f"monitor-{self.starts}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(self.command(), stdout=logf, stderr=subprocess.STDOUT,
                                     preexec_fn=core_dumps, cwd=self.workdir, env=self.environ)
        logf.close()

    def kill(self) -> int:
        """SIGKILL the driver (a pod evicted, a node lost); returns its pid."""
        assert self.proc is not None
        pid = self.proc.pid
        self.proc.kill()
        self.proc.wait()
        self.kills.append(time.time())
        return pid

    def stop(self) -> int | None:
        """SIGTERM, as a pod's stop does; returns its exit code."""
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def crashed(self) -> int | None:
        """The exit code if the monitor died on its own (not killed by us), else None."""
        return self.proc.poll() if self.proc is not None else None

    def metrics(self) -> dict[str, float] | None:
        """Its unlabelled samples summed by name (None: not answering)."""
        from prometheus_client.parser import text_string_to_metric_families

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return None
        out: Counter[str] = Counter()
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                out[s.name] += s.value
        return dict(out)


def on_standalone(monitor: MonitorProcess, spark: SparkStandalone, archive: Path) -> None:
    """Point ``monitor`` at the standalone cluster, shipping kmon as a cluster's workers get
    it: ``kmon pack``'s ``archive`` (docs/monitor.md); the driver on loopback like them."""
    from kmon.pack import ALIAS, EXECUTOR_PYTHON

    monitor.settings.update({"spark.master": spark.master_url,
                             "spark.pyspark.python": EXECUTOR_PYTHON,
                             "spark.archives": f"{archive}#{ALIAS}"})
    monitor.environ = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}


class BlindWatch(threading.Thread):
    """Samples the monitor's last finished micro-batch every ``every`` s; ``worst`` is the
    longest it went without one, as ``KmonMonitorStalled`` measures it (down time included:
    a killed driver finishes nothing), from its first batch on (the first start is set-up)."""

    def __init__(self, monitor: MonitorProcess, every: float = 2.0) -> None:
        super().__init__(name="kmon-chaos-blind", daemon=True)
        self.monitor, self.every = monitor, every
        self.last_batch: float | None = None
        self.worst = 0.0
        self.worst_at = 0.0
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.wait(self.every):
            m = self.monitor.metrics()
            ts = (m or {}).get("kmon_monitor_last_batch_timestamp_seconds", 0.0)
            # The gauge holds the process' start until its first batch: a restarted driver
            # is still blind then.
            started = (m or {}).get("kmon_monitor_start_timestamp_seconds", 0.0)
            if ts > started and (self.last_batch is None or ts > self.last_batch):
                self.last_batch = ts
            if self.last_batch is None:
                continue
            blind = time.time() - self.last_batch
            if blind > self.worst:
                self.worst, self.worst_at = blind, time.time()


@dataclass
class ProbeSlot:
    """One probe role; each incarnation a process (a killed one is replaced, same name and
    topics, a new probe id)."""

    role: str
    preset: str
    name: str
    current: ProbeChild | None = None
    ids: list[str] = field(default_factory=list)
    killed: list[str] = field(default_factory=list)
    histories: dict[str, Path] = field(default_factory=dict)
    summaries: dict[str, dict[str, Any]] = field(default_factory=dict)
    crashes: list[str] = field(default_factory=list)

    @property
    def prefix(self) -> str:
        return f"kmon-ch-{self.name}"


@dataclass
class ChaosResult:
    """The verdicts: ``passed`` only if every check held."""

    seed: int
    minutes: float
    steps: list[dict[str, Any]]
    ops: dict[str, int]  # probe id -> op events in the events topic
    monitor: dict[str, dict[str, int]]  # probe id -> types the monitor reported
    offline: dict[str, dict[str, int]]  # probe id -> what kmon check finds
    unaccounted: list[str]  # probe ids whose history and events disagree
    crashes: list[str]  # probe or monitor processes that died on their own
    killed: list[str]  # probe ids killed on purpose
    blind_s: float
    failures: list[str]
    # probe id -> op events the events topic held twice (its producer's resends under broker
    # failovers); the monitor folds each op once
    event_copies: dict[str, int] = field(default_factory=dict)
    # probe id -> known upstream behaviours' trails that explain some of a safe probe's
    # anomalies (kmon.nemesis.kafka17754, deposed_coordinator): reported by both sides, and no
    # false alarm
    known_bugs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.failures

    def as_json(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {**asdict(self), "passed": self.passed}


class Chaos:
    """Probes, a monitor process and a seeded schedule on the local cluster."""

    def __init__(self, cluster: LocalCluster, proxy: LocalToxiproxy, workdir: Path,
                 settings: ChaosSettings) -> None:
        from kmon.nemesis.runner import Nemesis

        self.cluster, self.proxy, self.settings = cluster, proxy, settings
        self.workdir = Path(workdir)
        self.tag = uuid.uuid4().hex[:6]
        self.nemesis = Nemesis(cluster, proxy)
        # The lagging probe's readers fall ever further behind, so a transaction's halves can
        # be decided minutes apart: the monitor keeps writers in stage 2 (txn.retention) and
        # unread values in stage 1 (10 x unseen.grace) for the whole run. Its defaults, 5 and
        # 10 min, miss those torn transactions by design (seed 12: 218 of 246; docs/monitor.md).
        keep = settings.minutes + 15
        memory = {"txn.retention": f"{int(keep)}min", "unseen.grace": f"{int(keep * 6)}s"}
        self.spark = (SparkStandalone(home=cluster.home, port_base=cluster.ports.base)
                      if settings.standalone else None)
        self.monitor = MonitorProcess(cluster, self.workdir, self.tag,
                                      cluster.ports.metrics(13), memory)
        roles = {**SAFE_ROLES, **(LOSSY_ROLES if settings.lossy else {})}
        self.slots = {r: ProbeSlot(r, p, f"{self.tag}-{r}") for r, p in roles.items()}
        self.records: list[StepRecord] = []
        self.watch = BlindWatch(self.monitor)
        self.steps = plan(settings)
        self.crashes_seen: list[str] = []  # the monitor dying on its own

    # -- start and stop -------------------------------------------------------------------

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        core_dumps()
        self.cluster.drop_topics("kmon-ch-")  # earlier chaos runs'
        self._create_events_topic()
        if self.spark is not None:
            self._on_standalone(self.spark)
        self.monitor.start()
        for slot in self.slots.values():
            self._start_probe(slot)
        self.watch.start()

    def data_dirs(self) -> list[Path]:
        return [self.cluster.data_dir(n) for n in BROKER_IDS]

    def _on_standalone(self, spark: SparkStandalone) -> None:
        from kmon.pack import pack

        spark.up()
        on_standalone(self.monitor, spark, pack(log=lambda _: None))

    def _create_events_topic(self) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        # RF 3, min ISR 2: the events survive a broker loss, as the probes' own topic would.
        with AdminClient({"bootstrap.servers": self.cluster.bootstrap}) as admin:
            new = NewTopic(self.monitor.events_topic, num_partitions=4, replication_factor=3,
                           config={"min.insync.replicas": "2"})
            admin.create_topics([new])[self.monitor.events_topic].result(30)

    def _start_probe(self, slot: ProbeSlot) -> None:
        n = len(slot.ids)
        history = self.workdir / f"{slot.name}-{n}.jsonl"
        st = self.settings
        child = ProbeChild({
            "kafka.bootstrap.servers": self.cluster.bootstrap,
            "events.kafka.bootstrap.servers": self.cluster.bootstrap,
            "name": slot.name, "topic_prefix": slot.prefix,
            "events.topic": self.monitor.events_topic, "rate": str(st.rate),
            "processes": str(st.processes), "metrics.port": "0", "catchup_interval": "10",
            "final_read_timeout": "30",
            **presets.get(slot.preset).probe_settings(self.cluster)}, history)
        child.start()
        slot.current = child
        slot.ids.append(child.probe_id)
        slot.histories[child.probe_id] = history

    def stop_probes(self) -> None:
        for slot in self.slots.values():
            child, slot.current = slot.current, None
            if child is None:
                continue
            try:
                slot.summaries[child.probe_id] = child.shutdown()
            except ProbeDied as exc:
                slot.crashes.append(f"{child.probe_id}: {exc}")

    # -- the schedule -----------------------------------------------------------------------

    def run(self, on_step: Any = None) -> None:
        t0 = time.monotonic()
        for step in self.steps:
            delay = step.at - (time.monotonic() - t0)
            if delay > 0:
                time.sleep(delay)
            rec = self._do(step)
            self.records.append(rec)
            write_schedule(self.workdir / "schedule.jsonl", self.records)
            if on_step is not None:
                on_step(rec)
            self.check_monitor()
        left = self.settings.minutes * 60 - (time.monotonic() - t0)
        if left > 0:
            time.sleep(left)

    def check_monitor(self) -> None:
        """The monitor dying on its own (not killed by a step) is a crash: say so, with the
        tail of its log, and start it again from its checkpoint."""
        code = self.monitor.crashed()
        if code is None:
            return
        logfile = self.workdir / f"monitor-{self.monitor.starts}.log"
        tail = logfile.read_text(errors="replace")[-1500:] if logfile.exists() else ""
        log.error("the monitor died on its own (exit %s); restarting it. Its log ends:\n%s",
                  code, tail)
        self.crashes_seen.append(f"monitor exit {code} ({logfile.name})")
        self.monitor.start()

    def _do(self, step: Step) -> StepRecord:
        rec = StepRecord(step, started_at=time.time())
        try:
            if step.kind == "kill-probe":
                rec.info = self._kill_probe(step)
            elif step.kind == "kill-monitor":
                rec.info = {"killed_pid": self.monitor.kill()}
                self.monitor.start()
            elif step.kind == "kill-executor":
                rec.info = self._kill_executor(step)
            else:
                fault = self._fault(step)
                try:
                    self.nemesis.start(fault)
                    time.sleep(step.hold)
                finally:
                    self.nemesis.stop(fault)
                    _release(fault)
                rec.info = fault.record.as_json()
        except Exception as exc:
            log.exception("step %s", step)
            rec.error = f"{type(exc).__name__}: {exc}"
            self._heal()
        rec.ended_at = time.time()
        return rec

    def _heal(self) -> None:
        from kmon.nemesis import health

        try:
            self.nemesis.heal()
            health.wait_healthy(self.cluster, self.proxy, 300.0)
        except Exception:
            log.exception("heal after a failed step")

    def _kill_probe(self, step: Step) -> dict[str, Any]:
        safe = [s for s in self.slots.values() if s.role in SAFE_ROLES]
        slot = safe[int(step.pick * len(safe))]
        child = slot.current
        assert child is not None
        pid = child.kill()
        slot.killed.append(child.probe_id)
        self._start_probe(slot)
        return {"probe": slot.killed[-1], "pid": pid, "replacement": slot.ids[-1]}

    def _kill_executor(self, step: Step) -> dict[str, Any]:
        """A lost node: a worker's JVM and its executor SIGKILLed, its tasks moving to the
        other worker for ``hold`` s, then the worker back."""
        assert self.spark is not None
        worker = SPARK_WORKER_IDS[int(step.pick * len(SPARK_WORKER_IDS))]
        killed = self.spark.kill_worker(worker)
        time.sleep(step.hold)
        self.spark.start_worker(worker)
        self.spark.wait_workers(len(SPARK_WORKER_IDS))
        return {"worker": worker, "killed_pids": killed}

    def _fault(self, step: Step) -> Fault:
        from kmon.nemesis.network import NetworkFault
        from kmon.nemesis.process import Crash, Pause
        from kmon.nemesis.records import DeleteRecords
        from kmon.nemesis.rolling import RollingRestart, active_controller
        from kmon.nemesis.scenarios import _leader
        from kmon.nemesis.targets import Target
        from kmon.nemesis.unclean import UncleanElection

        c, p, k, pick = self.cluster, self.proxy, step.kind, step.pick
        node = Target(node=1 + int(pick * 3))
        safe_prefix = self.slots["safe" if pick < 0.5 else "proxied"].prefix
        if k in ("pause-leader", "crash-leader"):
            return (Pause if k.startswith("pause") else Crash)(c, _leader(c, safe_prefix))
        if k in ("pause-controller", "crash-controller"):
            target = Target(node=active_controller(c))
            return (Pause if k.startswith("pause") else Crash)(c, target)
        if k == "rolling-restart":
            return RollingRestart(c)
        if k == "events-leader":  # the monitor's input fails over under it
            target = Target(topic=self.monitor.events_topic, partition=int(pick * 4))
            return (Pause if pick < 0.5 else Crash)(c, target)
        if k == "net-latency":
            return NetworkFault(p, "latency", latency_ms=300, jitter_ms=100)
        if k == "net-reset":
            return NetworkFault(p, "reset", timeout_ms=200)
        if k == "net-partition":
            return NetworkFault(p, "down", [node])
        if k == "delete-records":
            return DeleteRecords(c, topic_prefix=self.slots["lagging"].prefix, count=4,
                                 interval=1.0)
        if k == "unclean-election":
            return UncleanElection(c, topic_prefix=self.slots["unclean"].prefix, lag=6.0)
        if k == "idempotence-off":
            return NetworkFault(p, "timeout", [_leader(c, self.slots["idempotence-off"].prefix)],
                                cluster=c)
        raise ValueError(f"no fault for {k}")


def _release(fault: Fault) -> None:
    release = getattr(fault, "release", None)
    if release is not None:
        release()


# -- the end: settle, read back, judge ------------------------------------------------------


@dataclass
class EventsRead:
    """The events topic read back: each probe's ops by index (a copy the topic holds twice
    counted in ``copies``, not kept)."""

    ops: dict[str, list[Any]]
    copies: dict[str, int]


def events_by_probe(bootstrap: str, topic: str) -> EventsRead:
    from kmon.history.avro import decode_event
    from kmon.history.model import is_clock_tick

    by: dict[str, dict[int, Any]] = {}
    copies: Counter[str] = Counter()
    msgs = read_topic(bootstrap, topic, timeout=300.0)
    for msg in msgs:
        op = decode_event(msg.value(), msg.headers())
        if is_clock_tick(op) or op.meta is None:
            continue
        mine = by.setdefault(op.meta.probe, {})
        if op.index in mine:
            copies[op.meta.probe] += 1
        mine[op.index] = op
    ops = {p: [v[i] for i in sorted(v)] for p, v in by.items()}
    return EventsRead(ops, dict(copies))


def settle(chaos: Chaos) -> None:
    settle_monitor(chaos.monitor, chaos.settings.settle_timeout, chaos.check_monitor)


def settle_monitor(monitor: MonitorProcess, timeout: float,
                   check: Callable[[], None] = lambda: None) -> None:
    """Wait until the monitor committed every event now in its topic, then move its watermark
    past every grace period with clock ticks (twice: stage 2 decides on what stage 1's
    decisions sent). ``check`` runs while waiting (e.g. restarting a monitor that died)."""
    from confluent_kafka import Producer

    from kmon.streaming import replay

    bootstrap = monitor.cluster.bootstrap
    for round_ in range(3):
        wait_committed(monitor, end_offsets(bootstrap, monitor.events_topic), timeout, check)
        if round_ == 2:
            break
        time.sleep(5 + 10 + 2)  # watermark delay + grace + two triggers (MONITOR_TIMING)
        producer = Producer({"bootstrap.servers": bootstrap})
        try:
            replay.produce(producer, monitor.events_topic,
                           [replay.clock_tick(time.time_ns(), "chaos-clock")])
        finally:
            producer.close()
    time.sleep(6)  # the last micro-batches' outputs


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's high watermark."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in parts}
    finally:
        c.close()


def committed_offsets(checkpoint: Path) -> dict[int, int]:
    """The events offsets up to which the monitor's stage 1 committed a batch (partition ->
    next offset), from its checkpoint: the newest batch in ``commits/`` and its line per
    source in ``offsets/``.

    Read from the checkpoint, not from ``kmon_monitor_events_total``: that counter is fed by
    progress reports, and a driver SIGKILLed between a batch's commit and its report never
    counts that batch (a restarted monitor goes on from the next one)."""
    keys = checkpoint / "keys"
    commits = [int(p.name) for p in (keys / "commits").glob("[0-9]*") if p.name.isdigit()]
    if not commits:
        return {}
    lines = (keys / "offsets" / str(max(commits))).read_text().splitlines()[2:]
    out: dict[int, int] = {}
    for line in filter(str.strip, lines):
        for parts in json.loads(line).values():
            out.update({int(p): int(o) for p, o in parts.items()})
    return out


def wait_committed(monitor: MonitorProcess, ends: dict[int, int], timeout: float,
                   check: Callable[[], None] = lambda: None) -> None:
    """Wait until the monitor's stage 1 committed a batch reaching ``ends`` (partition ->
    offset) on every events partition; ``check`` runs between looks."""
    checkpoint = monitor.workdir / "checkpoint"
    deadline = time.monotonic() + timeout
    while True:
        check()  # e.g. one that died meanwhile is a crash; the verdicts need it back
        done = committed_offsets(checkpoint)
        if all(done.get(p, 0) >= end for p, end in ends.items()):
            return
        if time.monotonic() > deadline:
            m = monitor.metrics() or {}
            raise TimeoutError(f"the monitor committed events offsets {done} of {ends} in "
                               f"{timeout:.0f}s (kmon_monitor_events_total "
                               f"{m.get('kmon_monitor_events_total')})")
        time.sleep(2)


def _serious(counts: dict[str, int], allowed: tuple[str, ...] = ()) -> dict[str, int]:
    """The counts that are anomalies here: Kafka's normal ones, the offline-only ones and
    ``allowed`` left out."""
    skip = set(KAFKA_NORMAL) | set(OFFLINE_ONLY) | set(allowed)
    return {t: n for t, n in counts.items() if n and t not in skip}


def monitor_counts(bootstrap: str, anomalies_topic: str) -> dict[str, dict[str, int]]:
    """Verdicts per probe id from the evidence topic (first records only, by id)."""
    from kmon.nemesis.matrix import read_evidence

    out: dict[str, Counter[str]] = {}
    for e in read_evidence(bootstrap, anomalies_topic):
        if not e.get("update"):
            out.setdefault(e["probe"], Counter())[e["anomaly"]] += 1
    return {p: dict(c) for p, c in out.items()}


def judge(chaos: Chaos, ops: dict[str, list[Any]], reported: dict[str, dict[str, int]],
          ) -> ChaosResult:
    from kmon.checker import CheckConfig, check
    from kmon.history import iter_ops

    failures: list[str] = []
    offline: dict[str, dict[str, int]] = {}
    explained: dict[str, Explained] = {}
    unaccounted: list[str] = []
    crashes = list(chaos.crashes_seen)
    for slot in chaos.slots.values():
        crashes += slot.crashes
        for pid in slot.ids:
            mine = ops.get(pid, [])
            if pid in slot.summaries:  # stopped cleanly: its file is the whole history
                history = list(iter_ops(slot.histories[pid]))
                dropped = slot.summaries[pid].get("events_dropped", 0)
                if len(history) != len(mine) or dropped:
                    unaccounted.append(f"{pid}: {len(history)} ops in its history, {len(mine)}"
                                       f" in the events topic, {dropped} dropped")
            else:  # killed: what it emitted is what there is
                history = mine
            report = check(history, CheckConfig(isolation="read_committed"))
            offline[pid] = counts_of(report)
            if slot.role in SAFE_ROLES and _serious(offline[pid]):
                explained[pid] = explain_known(history, report.errors, chaos.data_dirs())
        failures += _judge_slot(slot, reported, offline, explained)
    failures += [f"crashed: {c}" for c in crashes]
    failures += [f"not accounted for: {u}" for u in unaccounted]
    failures += [f"step {r.step.n} ({r.step.kind}) failed: {r.error}"
                 for r in chaos.records if r.error]
    if chaos.watch.worst > BLIND_LIMIT_S:
        failures.append(f"the monitor was blind {chaos.watch.worst:.0f}s "
                        f"(KmonMonitorStalled after {BLIND_LIMIT_S:.0f}s)")
    return ChaosResult(
        seed=chaos.settings.seed, minutes=chaos.settings.minutes,
        steps=[r.as_json() for r in chaos.records],
        ops={p: len(v) for p, v in ops.items()}, monitor=reported, offline=offline,
        unaccounted=unaccounted, crashes=crashes,
        killed=[k for s in chaos.slots.values() for k in s.killed],
        blind_s=round(chaos.watch.worst, 1), failures=failures,
        known_bugs={p: e.trails for p, e in explained.items() if e.trails})


def explain_known(history: list[Any], errors: dict[str, list[dict[str, Any]]],
                  data_dirs: list[Path]) -> Explained:
    """What of a safe probe's anomalies a known upstream behaviour explains, each proven by
    its trail in the brokers' data or logs: KAFKA-17754 (losses) and a deposed group
    coordinator's stale offsets (rereads)."""
    counts: dict[str, int] = {}
    trails: list[dict[str, Any]] = []
    for known in (kafka17754.explain(history, errors, data_dirs),
                  deposed_coordinator.explain(history, errors, data_dirs)):
        counts.update(known.counts)  # each explains its own anomaly types
        trails += known.trails
    return Explained(counts, trails)


def _judge_slot(slot: ProbeSlot, reported: dict[str, dict[str, int]],
                offline: dict[str, dict[str, int]],
                explained: dict[str, Explained] | None = None) -> list[str]:
    out = []
    if slot.role in SAFE_ROLES:
        for pid in slot.ids:
            allowed = KILLED_ALLOWED if pid in slot.killed else ()
            known = explained[pid].counts if explained and pid in explained else {}
            seen = _serious(_less(reported.get(pid, {}), known), allowed)
            found = _serious(_less(offline.get(pid, {}), known), allowed)
            if seen:
                out.append(f"false alarm from the monitor on {pid} ({slot.role}): {seen}")
            if found:
                out.append(f"kmon check finds {found} in {pid} ({slot.role})")
        return out
    for t in LOSS_TYPES:
        mon = sum(reported.get(pid, {}).get(t, 0) for pid in slot.ids)
        off = sum(offline.get(pid, {}).get(t, 0) for pid in slot.ids)
        if mon != off:
            out.append(f"{slot.role}: the monitor reported {mon} {t}, kmon check finds {off}")
    return out


def _less(counts: dict[str, int], known: dict[str, int]) -> dict[str, int]:
    """``counts`` without the records a known upstream bug explains."""
    return {t: n - known.get(t, 0) for t, n in counts.items() if n > known.get(t, 0)}


def finish(chaos: Chaos) -> ChaosResult:
    """Stop the probes (final reads), let the monitor decide everything, judge."""
    chaos.stop_probes()
    read = events_by_probe(chaos.cluster.bootstrap, chaos.monitor.events_topic)
    settle(chaos)
    chaos.watch.stop_event.set()
    reported = monitor_counts(chaos.cluster.bootstrap, chaos.monitor.anomalies_topic)
    code = chaos.monitor.stop()
    result = judge(chaos, read.ops, reported)
    result.event_copies = read.copies
    if code not in (0, None, -signal.SIGTERM):
        result.failures.append(f"the monitor exited {code} on SIGTERM")
    (chaos.workdir / "result.json").write_text(json.dumps(result.as_json(), indent=1,
                                                          default=str))
    return result


def run_chaos(cluster: LocalCluster, proxy: LocalToxiproxy, workdir: Path,
              settings: ChaosSettings, on_step: Any = None) -> ChaosResult:
    """The whole run: start, the schedule, finish; the cluster healed whatever happens."""
    chaos = Chaos(cluster, proxy, workdir, settings)
    try:
        chaos.start()
        chaos.run(on_step)
        return finish(chaos)
    finally:
        chaos.nemesis.heal()
        if chaos.spark is not None:
            chaos.spark.down()
        for slot in chaos.slots.values():
            if slot.current is not None:
                slot.current.kill()
        if chaos.monitor.proc is not None and chaos.monitor.proc.poll() is None:
            chaos.monitor.kill()

