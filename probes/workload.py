"""The workload: N logical processes on threads, rate-controlled, plus upkeep and shutdown.

Each process loops: wait for its turn (a shared pacer spaces ops ``1/rate`` seconds apart), then
run one op chosen at random: a consumer mode switch (assign a random subset of readable keys,
or subscribe to every readable topic) when it has none, when the readable keys changed or now
and then; a catch-up read when one is due (every ``catchup_interval`` s, one process at a time);
otherwise ``crash``, ``txn``, ``poll`` or ``send`` by the configured shares.

A maintenance thread keeps enough keys live (``KeySpace.maintain``). ``stop`` (SIGTERM) lets
every in-flight op finish (each is bounded by the op timeout), completes ops that hang past
that as ``info``, runs a final catch-up read with a fresh process, closes every client with a
bound and flushes the op events.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, TextIO

from confluent_kafka.admin import AdminClient, NewTopic

from kmon.probes import clients as C
from kmon.probes import values as V
from kmon.probes.config import ProbeConfig
from kmon.probes.coverage import Coverage
from kmon.probes.keyspace import KeySpace
from kmon.probes.metrics import ProbeMetrics
from kmon.probes.outcome import error_name
from kmon.probes.process import ASSIGN, SUBSCRIBE, CatchUp, Process
from kmon.probes.recorder import Emitter, Recorder
from kmon.probes.share import ShareProcess, configure_group, run_share
from kmon.probes.stacks import stack_of

log = logging.getLogger("kmon.probes")


class Pacer:
    """Spaces ops ``1/rate`` apart across threads; a slow stretch does not cause a burst."""

    def __init__(self, rate: float) -> None:
        self.interval = 1.0 / rate
        self.next = time.monotonic()
        self.lock = threading.Lock()

    def wait(self, stop: threading.Event) -> bool:
        """Block until this caller's slot; False if ``stop`` was set meanwhile."""
        with self.lock:
            now = time.monotonic()
            slot = max(self.next, now)
            self.next = slot + self.interval
        delay = slot - time.monotonic()
        if delay > 0:
            return not stop.wait(delay)
        return not stop.is_set()


EVENTS_FLUSH_S = 30.0  # the op events' last flush at shutdown
MAINTENANCE_JOIN_S = 2.0


def ops_bound(cfg: ProbeConfig) -> float:
    """How long a shutdown waits for the processes' in-flight ops."""
    return 2 * cfg.op_timeout + 3 * cfg.close_timeout + cfg.poll_timeout + 5


def final_read_bound(cfg: ProbeConfig) -> float:
    """How long the shutdown's final read may take before it is abandoned."""
    return cfg.final_read_timeout + cfg.poll_timeout + 3 * cfg.op_timeout


def closes_bound(cfg: ProbeConfig) -> float:
    """How long the closes of every process's clients may take together (at once, each
    process's three one after another)."""
    return 3 * cfg.close_timeout + 1.0


def shutdown_bound(cfg: ProbeConfig) -> float:
    """The longest a shutdown takes, every bound waited out (a cluster gone at SIGTERM). A
    pod's grace period shorter than this can kill the probe before its events are flushed:
    the Helm chart's probe.terminationGracePeriodSeconds covers it at the defaults."""
    final_read = final_read_bound(cfg) if cfg.final_read_timeout > 0 else 0.0
    events = 1.0 + EVENTS_FLUSH_S  # the emitter's poller joined, then its flush
    return ops_bound(cfg) + final_read + MAINTENANCE_JOIN_S + events + closes_bound(cfg)


class Workload:
    def __init__(
        self,
        cfg: ProbeConfig,
        metrics: ProbeMetrics | None = None,
        history: TextIO | None = None,
    ) -> None:
        self.cfg = cfg
        self.metrics = metrics if metrics is not None else ProbeMetrics(
            identity=C.identity(cfg))
        self.probe_tag = V.probe_tag(cfg.probe_id)
        self.rng = random.Random(cfg.seed)
        self.stopping = threading.Event()
        self.pacer = Pacer(cfg.rate)
        self.admin = AdminClient(C.admin_config(cfg, f"kmon-probe-{cfg.name}-admin"))
        self.keyspace = KeySpace(cfg, self.admin)
        self.emitter: Emitter | None = None
        self.recorder = Recorder(cfg.probe_id, self.metrics, None, history)
        self.processes: list[Process] = []
        self.threads: list[threading.Thread] = []
        self.share_threads: list[threading.Thread] = []  # share consumers (share.processes)
        self._pid_lock = threading.Lock()
        self._next_pid = 0
        self._catchup_lock = threading.Lock()
        self._next_catchup = float("inf")
        self._maintenance: threading.Thread | None = None
        self.started_at = 0.0
        self.run_ended_at = 0.0
        self.run_ops = 0
        self.stopped_at = 0.0
        self.abandoned = 0
        self.final_read: CatchUp | None = None  # how the shutdown's final read went
        self._final_reader: Process | None = None  # its clients are closed with the others
        self.last_summary: dict[str, Any] = {}
        self._reported_stuck: set[tuple[int, int]] = set()
        # Clients whose call hung past every timeout: kept referenced, never closed.
        self.abandoned_clients: list[Any] = []

    # -- shared services for processes ------------------------------------------------------

    def new_pid(self) -> int:
        with self._pid_lock:
            pid = self._next_pid
            if pid > V.MAX_PROCESS:
                raise RuntimeError("process ids exhausted for this run: restart the probe")
            self._next_pid += 1
            return pid

    def count_error(self, err: Any) -> None:
        name = error_name(err)
        if name:
            self.metrics.client_errors.labels(code=name).inc()

    def catchup_due(self) -> bool:
        """True for exactly one caller once the catch-up interval has passed."""
        if time.monotonic() < self._next_catchup:
            return False
        with self._catchup_lock:
            if time.monotonic() < self._next_catchup:
                return False
            self._next_catchup = time.monotonic() + self.cfg.catchup_interval
            return True

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        cfg = self.cfg
        C.validate(cfg)
        self.keyspace.start(timeout=max(60.0, cfg.op_timeout * 6))
        if cfg.events_enabled:
            self._ensure_events_topic()
            self.emitter = Emitter(C.events_producer_config(cfg, self.count_error),
                                   cfg.events_topic, self.metrics, probe=cfg.probe_id,
                                   tick_interval=cfg.events_tick_interval)
            self.recorder.emitter = self.emitter
        self.started_at = time.monotonic()
        if cfg.catchup_interval > 0:
            self._next_catchup = self.started_at + cfg.catchup_interval
        if cfg.share_processes:
            configure_group(self.admin, cfg)
        self.metrics.up.set(1)
        self._publish_keys()
        self._maintenance = threading.Thread(target=self._maintain, name="kmon-probe-upkeep",
                                             daemon=True)
        self._maintenance.start()
        for slot in range(cfg.processes):
            proc = Process(slot, self, random.Random(self.rng.random()))
            self.processes.append(proc)
            t = threading.Thread(target=self._loop, args=(proc,), name=f"kmon-probe-{slot}",
                                 daemon=True)
            self.threads.append(t)
            t.start()
        for n in range(cfg.share_processes):
            sp = ShareProcess(cfg.processes + 1 + n, self, random.Random(self.rng.random()))
            t = threading.Thread(target=run_share, args=(sp, self), daemon=True,
                                 name=f"kmon-probe-share-{n}")
            self.share_threads.append(t)
            t.start()
        log.info("probe %s running: %d processes, %.1f ops/s target, topics %s.<n>",
                 cfg.probe_id, cfg.processes, cfg.rate, cfg.topic_prefix)

    def _ensure_events_topic(self) -> None:
        cfg = self.cfg
        base = dict(cfg.clients["events.kafka"])
        if "bootstrap.servers" not in base:
            base = {**cfg.clients["kafka"], **base}
        admin = AdminClient({**base, "logger": C.librdkafka_log})
        md = admin.list_topics(timeout=30)
        if cfg.events_topic in md.topics:
            return
        if not cfg.events_create_topic:
            raise RuntimeError(f"events topic {cfg.events_topic} does not exist "
                               "(events.create_topic is off)")
        new = NewTopic(cfg.events_topic, num_partitions=cfg.events_partitions,
                       replication_factor=cfg.events_replication_factor,
                       config={"min.insync.replicas": str(min(2, cfg.events_replication_factor))})
        try:
            admin.create_topics([new], request_timeout=30)[cfg.events_topic].result(35)
        except Exception as e:
            if "TOPIC_ALREADY_EXISTS" not in str(e):
                raise

    def _maintain(self) -> None:
        grace = 2 * self.cfg.op_timeout + 2 * self.cfg.close_timeout + self.cfg.poll_timeout
        while not self.stopping.wait(1.0):
            try:
                self.keyspace.maintain(grace)
                self._publish_keys()
                self._watch_stuck(grace)
            except Exception:
                log.exception("probe upkeep failed; retrying")

    def _publish_keys(self) -> None:
        self.metrics.keys_live.set(self.keyspace.writable_count())
        cov = self.keyspace.coverage
        if cov is not None:
            self.metrics.coverage(len(cov.present), len(cov.covered))

    def _watch_stuck(self, limit: float) -> None:
        """Log (once per op) where a process is stuck when an op outlives every timeout."""
        now = time.time_ns()
        with self.recorder.lock:
            pending = {p: op for p, op in self.recorder.pending.items()}
        for proc, t in zip(self.processes, self.threads, strict=True):
            op = pending.get(proc.pid)
            if op is None or (now - op.invoke_time) / 1e9 < limit:
                continue
            key = (proc.pid, op.invoke_time)
            stack = "" if key in self._reported_stuck else stack_of(t)
            if not stack:
                continue
            self._reported_stuck.add(key)
            log.warning("process %d has been in a %s op for %.0fs, in:\n%s", proc.pid, op.f,
                        (now - op.invoke_time) / 1e9, stack)

    def _loop(self, proc: Process) -> None:
        while not self.stopping.is_set():
            if not self.pacer.wait(self.stopping):
                break
            try:
                self.step(proc)
            except Exception:
                # A bug, not a cluster fault: say so, and continue as a fresh process so the
                # history stays well-formed (a pending op is completed as info).
                log.exception("probe process %d failed", proc.pid)
                self.recorder.complete_abandoned_process(proc.pid, "probe error")
                proc.respawn()

    def step(self, proc: Process) -> None:
        cfg, rng = self.cfg, proc.rng
        if proc.needs_crash():
            proc.crash()
            return
        proc.refresh_leaders()
        stale = proc.keys_version != self.keyspace.version
        if proc.mode is None or stale or rng.random() < 1.0 / cfg.mode_switch_ops:
            self.switch_mode(proc, keep=stale and proc.mode is not None)
            return
        if self.catchup_due():
            proc.catch_up(max(5.0, cfg.op_timeout), self.stopping.is_set)
            return
        r = rng.random()
        if r < cfg.crash_share:
            proc.crash()
        elif r < cfg.crash_share + cfg.txn_share:
            proc.txn()
        elif rng.random() < cfg.poll_share or not proc.send():
            proc.poll()

    def switch_mode(self, proc: Process, keep: bool = False) -> None:
        """Assign a random subset of readable keys, or subscribe to every readable topic.

        ``keep``: stay in the current mode (the readable keys changed under it)."""
        topics = self.keyspace.readable_topics()
        if not topics:
            proc.crash()
            return
        mode = proc.mode if keep else (
            SUBSCRIBE if proc.rng.random() < self.cfg.subscribe_share else ASSIGN)
        if mode == SUBSCRIBE:
            proc.subscribe(topics)
        else:
            keys = self.keyspace.readable_keys()
            proc.assign(sorted(proc.rng.sample(keys, proc.rng.randint(1, len(keys)))))

    def run(self, duration: float | None = None) -> None:
        """Run until ``duration`` seconds passed (None: the config's; 0: until ``stop``)."""
        duration = self.cfg.duration if duration is None else duration
        deadline = time.monotonic() + duration if duration else None
        while not self.stopping.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                break
            self.stopping.wait(0.2 if deadline is None else min(0.2, deadline - time.monotonic()))

    def stop(self) -> None:
        """Ask every process to finish its op and stop (safe from a signal handler)."""
        self.stopping.set()

    def shutdown(self, close: bool = True) -> dict[str, Any]:
        """Stop, let in-flight ops finish, final read, make the history durable (sealed, its
        events flushed), then close the clients; returns a summary.

        The closes come last, and ``close=False`` leaves them to ``close_clients``: a close
        can block in librdkafka (a group leave with the coordinator away, once for minutes
        in CI), and the history must not wait on it, nor the caller's summary. Nothing of
        the history is lost so: the processes' ops are over, and a consumer's close only
        serves revocations, which belong to a next op of its process that never comes."""
        cfg = self.cfg
        self.stopping.set()
        self.run_ended_at = time.monotonic()
        self.run_ops = sum(self.recorder.outcomes.values())
        budget = ops_bound(cfg)
        deadline = time.monotonic() + budget
        for t in self.threads:
            t.join(max(0.1, deadline - time.monotonic()))
        for t in self.share_threads:  # each acknowledges what it holds and closes its client
            t.join(max(0.1, deadline - time.monotonic()))
        hung = [p for p, t in zip(self.processes, self.threads, strict=True) if t.is_alive()]
        hung += [t for t in self.share_threads if t.is_alive()]
        if hung:
            log.warning("%d processes still in an op after %.0fs: reported info", len(hung),
                        budget)
            for t in self.threads:
                stack = stack_of(t)
                if stack:
                    log.warning("%s is stuck in:\n%s", t.name, stack)
            self.abandoned = self.recorder.retire_pending(
                "probe shut down before the op completed")
        if cfg.final_read_timeout > 0:
            self.final_read = self._final_read()
        if self._maintenance is not None:
            self._maintenance.join(MAINTENANCE_JOIN_S)
        # The history ends here: a call still hung that returns later adds nothing to it.
        self.abandoned += self.recorder.seal("probe shut down before the op completed")
        undelivered = (self.emitter.close(timeout=EVENTS_FLUSH_S) if self.emitter is not None
                       else 0)
        self.recorder.flush()
        self.metrics.up.set(0)
        self.stopped_at = time.monotonic()
        self.last_summary = self.summary(undelivered)
        if close:
            self.close_clients()
            self.last_summary["hung_clients"] = len(self.abandoned_clients)
        return self.last_summary

    def close_clients(self) -> None:
        """Close the clients of every process whose op loop ended, and the final reader's:
        all processes at once, each its own clients in order, each close bounded by
        ``close_timeout``. One after another, a broker outage (every close waiting out its
        bound) would take processes x 3 bounds, past a pod's grace period."""
        done = [p for p, t in zip(self.processes, self.threads, strict=True)
                if not t.is_alive()]
        if self._final_reader is not None:
            done.append(self._final_reader)
            self._final_reader = None
        closers = [threading.Thread(target=p.close_clients, name=f"kmon-close-{p.pid}",
                                    daemon=True) for p in done]
        for t in closers:
            t.start()
        deadline = time.monotonic() + closes_bound(self.cfg)
        for t in closers:
            t.join(max(0.1, deadline - time.monotonic()))

    def _final_read(self) -> CatchUp | None:
        """Read every key up to its end, as a fresh process of the assign group. A key left
        short leaves its acknowledged values unread, which the checker must call ``unseen``:
        the warning names the keys, so that such a verdict comes with its reason.

        The read runs on a helper thread, bounded: a librdkafka call that never returns
        (CI saw a poll hang past 300 s after DeleteRecords) must not keep the shutdown from
        flushing the op events. The reader is then retired, its client abandoned."""
        cfg = self.cfg
        reader = Process(cfg.processes, self, random.Random(self.rng.random()))
        given_up = threading.Event()
        bound = final_read_bound(cfg)
        began = time.monotonic()
        try:
            done = C.bounded(reader.catch_up, cfg.final_read_timeout, given_up.is_set,
                             timeout=bound, name="final-read")
        except C.Hung as e:
            given_up.set()
            self.abandoned += self.recorder.retire(reader.pid, f"final read: {e}")
            self.abandoned_clients.append(reader)  # its clients stay referenced, unclosed
            log.warning("final read still in a client call after %.0fs: abandoned, in:\n%s",
                        bound, e.stack)
            return CatchUp(0, False, sorted(self.keyspace.readable_keys()),
                           time.monotonic() - began)
        except Exception:
            log.exception("final read failed")
            self._final_reader = reader  # closed with the others, after the history
            return None
        self._final_reader = reader
        if not done.reached:
            log.warning("final read: %d keys not read to their end in %.1fs (%s): their "
                        "acknowledged values may be reported unseen", len(done.short),
                        done.seconds, self._key_names(done.short))
        return done

    def _key_names(self, keys: list[int], most: int = 8) -> str:
        names = ["{}/{}".format(*self.keyspace.topic_partition(k)) for k in keys[:most]]
        return ", ".join(names) + (f", ... ({len(keys)})" if len(keys) > most else "")

    def summary(self, undelivered: int = 0) -> dict[str, Any]:
        counts: Counter[str] = Counter(self.recorder.outcomes)
        completed = sum(counts.values())
        now = time.monotonic()
        run = max(1e-9, (self.run_ended_at or now) - self.started_at)
        run_ops = self.run_ops if self.run_ended_at else completed
        return {
            "probe": self.cfg.probe_id,
            "seconds": round((self.stopped_at or now) - self.started_at, 1),
            "ops": completed,
            # while the workload ran (the shutdown's final read is not paced)
            "ops_per_second": round(run_ops / run, 1),
            "outcomes": dict(sorted(counts.items())),
            # info among send/poll/txn completions (crash ops always complete info)
            "info_share": _share(counts, "info"),
            "fail_share": _share(counts, "fail"),
            "events_emitted": self.emitter.emitted if self.emitter else 0,
            "events_dropped": self.emitter.dropped if self.emitter else 0,
            "events_undelivered_at_exit": undelivered,
            "abandoned_ops": self.abandoned,
            "processes_used": self._next_pid,
            "hung_clients": len(self.abandoned_clients),
            "topics_created": self.keyspace.created,
            "brokers": _brokers(self.keyspace.coverage),
            "final_read": _final_read_summary(self.final_read, self._key_names),
        }


def _final_read_summary(done: CatchUp | None,
                        names: Callable[[list[int]], str]) -> dict[str, Any] | None:
    """The final read for the summary (None: not run, or it raised)."""
    if done is None:
        return None
    return {"reached": done.reached, "short": names(done.short), "polls": done.polls,
            "seconds": round(done.seconds, 1)}


def _brokers(cov: Coverage | None) -> dict[str, list[int]]:
    if cov is None:
        return {}
    return {"present": sorted(cov.present), "covered": sorted(cov.covered)}


def _share(counts: Counter[str], type_: str) -> float:
    total = sum(v for k, v in counts.items() if k.split()[0] in ("send", "poll", "txn"))
    n = sum(v for k, v in counts.items() if k.split()[0] in ("send", "poll", "txn")
            and k.endswith(" " + type_))
    return round(n / total, 4) if total else 0.0


@contextlib.contextmanager
def running(cfg: ProbeConfig, history: TextIO | None = None,
            metrics: ProbeMetrics | None = None):
    """A started workload, shut down on exit (tests and embedding)."""
    wl = Workload(cfg, metrics, history)
    wl.start()
    try:
        yield wl
    finally:
        wl.shutdown()
