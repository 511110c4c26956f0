"""The detection matrix: each scenario's fault, run while the real probe and the real monitor
run, and what the monitor reported about it.

One ``Monitor`` watches one events topic for the whole run; every row runs its own probe
(its own probe id and topic prefix ``kmon-mx-<tag>-<row>``) writing into that topic, so each
verdict is attributed to its row by the topic label of the metric and by the evidence
record's probe id. Rows with a fault run one after the other (a broker crash would hit every
probe on the cluster); rows without a fault (healthy, read-uncommitted) run together first.

Proxy rows run the probe behind the Kafka protocol proxy (``kmon.local.kafka_proxy``), whose
filters make the real brokers' answers misbehave as a Kafka-compatible broker's did
(``kmon.nemesis.protocol``); what the proxy did stays done (a hidden batch stays hidden) until
the row's probe has made its final read, then the proxy is reset. Injected rows replay a quiet
row's history (their scenario's ``base``) with the finding written in (``kmon.nemesis.inject``):
share groups' broken promises, which no fault here makes Kafka break.

Detection time: fault start (for the unclean election, the election itself: that is when the
loss happens; for injected rows, when the replay was produced) to the first verdict of an
expected type, as stamped by the monitor when it emitted the verdict and counted it.

``python -m kmon.nemesis.matrix`` (``kmon nemesis matrix``) runs every row on the local stack
and writes ``docs/detection-matrix.md``.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kmon.checker import ANOMALY_TYPES, offsets
from kmon.checker.anomaly import UNSEEN
from kmon.nemesis import presets
from kmon.nemesis.probe_child import ProbeChild, ProbeDied
from kmon.nemesis.scenarios import SCENARIOS, Scenario

if TYPE_CHECKING:
    from kmon.checker import Report
    from kmon.history.model import Op
    from kmon.local.cluster import LocalCluster
    from kmon.local.toxiproxy import LocalToxiproxy
    from kmon.nemesis.base import Fault, FaultRecord
    from kmon.streaming.monitor import Monitor

log = logging.getLogger("kmon.nemesis.matrix")

SECOND = 1_000_000_000
# Types the online monitor cannot report (cycles are searched offline only).
OFFLINE_ONLY = ("G0", "G1c")


@dataclass
class RowResult:
    """One row of the matrix, as measured."""

    name: str
    origin: str
    preset: str
    note: str
    must: tuple[str, ...]
    any_of: tuple[str, ...]
    forbidden: tuple[str, ...]
    probe: str = ""
    prefix: str = ""
    reported: dict[str, int] = field(default_factory=dict)
    offline: dict[str, int] | None = None  # ``kmon check`` on the row's history file
    verdict: str = "?"  # pass / FAIL / not provoked
    why: str = ""
    detection_s: float | None = None
    fault_start: float | None = None  # time.time() seconds
    fault_info: dict[str, Any] = field(default_factory=dict)
    evidence: str = ""
    ops: int = 0
    seconds: float = 0.0
    history: Path | None = None
    error: str = ""  # the row could not run: why
    # The probe's final read (its summary's): a key it left short leaves acknowledged values
    # unread, which the checker calls unseen; None when it did not run.
    final_read: dict[str, Any] | None = None

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"


def forbidden_types(s: Scenario) -> tuple[str, ...]:
    """Every type the monitor can report that the scenario neither expects nor allows.

    Share groups' types (``SHARE_ANOMALY_TYPES``) are among them: a row whose probe runs no
    share consumers has no share op in its history, so a share verdict there is a false alarm.
    """
    ok = set(s.must) | set(s.any_of) | set(s.allowed) | set(OFFLINE_ONLY)
    return tuple(t for t in (*ANOMALY_TYPES, UNSEEN) if t not in ok)


def judge(s: Scenario, reported: dict[str, int], provoked: bool = True) -> tuple[str, str]:
    """(verdict, why) for what the monitor reported on a row."""
    seen = {t for t, n in reported.items() if n > 0}
    bad = sorted(seen & set(forbidden_types(s)))
    if bad:
        return "FAIL", f"forbidden: {', '.join(bad)}"
    if not provoked:
        return "not provoked", "the broker did not do it in this run (see evidence)"
    missing = [t for t in s.must if t not in seen]
    if missing:
        return "FAIL", f"missing: {', '.join(missing)}"
    if s.any_of and not seen & set(s.any_of):
        return "FAIL", f"none of: {', '.join(s.any_of)}"
    return "pass", ""


def short_read(r: RowResult) -> str:
    """What the row's final read left unread ("" if it read everything)."""
    done = r.final_read
    if not done or done.get("reached", True):
        return ""
    return f"{done.get('short')} not read to the end in {done.get('seconds')}s"


@dataclass
class MatrixSettings:
    warmup: float = 8.0  # seconds of probe traffic before the fault
    run_on: float = 5.0  # seconds of probe traffic after the fault is undone
    rate: float = 30.0
    processes: int = 4
    durations: dict[str, float] = field(default_factory=dict)  # per-row overrides
    settle_timeout: float = 240.0


class Matrix:
    """One monitor, one events topic, rows run against the local cluster."""

    def __init__(self, cluster: LocalCluster, proxy: LocalToxiproxy, spark: Any, workdir: Path,
                 settings: MatrixSettings | None = None) -> None:
        from kmon.nemesis.runner import Nemesis

        self.cluster, self.proxy, self.spark = cluster, proxy, spark
        self.workdir = Path(workdir)
        self.settings = settings or MatrixSettings()
        self.tag = uuid.uuid4().hex[:6]
        self.events_topic = f"kmon-mx-ev-{self.tag}"
        self.nemesis = Nemesis(cluster, proxy)
        from kmon.nemesis.protocol import kafka_proxy_of

        self.kafka_proxy = kafka_proxy_of(cluster)
        self.monitor: Monitor | None = None
        self.results: dict[str, RowResult] = {}
        self.scenarios: dict[str, Scenario] = {}  # each row's, by name (any scenario list)
        self.probe_deaths: list[str] = []  # probe processes that crashed, and the row
        self._emitted = 0  # op events handed to the events topic, by every probe and replay

    # -- the monitor --------------------------------------------------------------------

    def start(self) -> None:
        from kmon.streaming import config
        from kmon.streaming.monitor import Monitor

        self.workdir.mkdir(parents=True, exist_ok=True)
        t = self.tag
        cfg = config.from_mapping({
            "kafka.bootstrap.servers": self.cluster.bootstrap,
            "checkpoint": str(self.workdir / f"ck-{t}"),
            "topics.events": self.events_topic, "topics.anomalies": f"kmon-mx-an-{t}",
            "topics.facts": f"kmon-mx-fa-{t}", "topics.dead-letters": f"kmon-mx-dl-{t}",
            # A metrics port is not needed: the runner reads the monitor's registry in-process.
            "metrics.port": 0, "trigger": "1s", "txn.trigger": "1s", **MONITOR_TIMING})
        self.cluster.drop_topics("kmon-mx-")  # earlier matrices' (each leaves about 60)
        self._create_events_topic()
        self.monitor = Monitor(cfg, self.spark)
        self.monitor.start()

    def _create_events_topic(self) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        # RF 3: the crash and pause rows must not take the events away from the monitor.
        with AdminClient({"bootstrap.servers": self.cluster.bootstrap}) as admin:
            fut = admin.create_topics([NewTopic(self.events_topic, num_partitions=4,
                                                replication_factor=3)])
            fut[self.events_topic].result(30)

    def stop(self) -> None:
        if self.monitor is not None:
            self.monitor.stop()

    def _send(self, events: Iterable[Op]) -> None:
        """Hand ``events`` to the events topic with a producer of their own: no client of the
        test's process stays connected while the rows' faults kill and pause brokers (the test
        process has died under such faults, with librdkafka clients lingering in it)."""
        from confluent_kafka import Producer

        from kmon.streaming import replay

        # Idempotent: replayed events exactly once and in order per process.
        producer = Producer({"bootstrap.servers": self.cluster.bootstrap,
                             "enable.idempotence": True})
        try:
            self._emitted += replay.produce(producer, self.events_topic, events)
        finally:
            producer.close()

    # -- rows -----------------------------------------------------------------------------

    def _row(self, s: Scenario) -> RowResult:
        r = RowResult(s.name, s.origin, s.preset, s.note, s.must, s.any_of, forbidden_types(s))
        r.prefix = f"kmon-mx-{self.tag}-{s.name}"
        self.results[s.name] = r
        self.scenarios[s.name] = s
        return r

    def _duration(self, s: Scenario) -> float:
        return self.settings.durations.get(s.name, s.duration)

    def _probe(self, s: Scenario, r: RowResult) -> ProbeChild:
        """A started probe workload for row ``r``, in its own process, writing its history."""
        st = self.settings
        r.history = self.workdir / f"{r.prefix}.jsonl"
        if presets.get(s.preset).kafka_proxied:
            self.kafka_proxy.up()  # idempotent: started once, on the first row behind it
        probe = ProbeChild({
            "kafka.bootstrap.servers": self.cluster.bootstrap,
            # Events go straight to the brokers even when the probe's clients are behind the
            # proxies: a network fault must reach the workload, not the monitor's input.
            "events.kafka.bootstrap.servers": self.cluster.bootstrap,
            "name": f"mx{self.tag}-{s.name}",
            "topic_prefix": r.prefix,
            "events.topic": self.events_topic, "rate": str(st.rate),
            "processes": str(st.processes), "metrics.port": "0", "catchup_interval": "10",
            "final_read_timeout": "30", **presets.get(s.preset).probe_settings(self.cluster)},
            r.history)
        probe.start()
        r.probe = probe.probe_id
        return probe

    def _finish_probe(self, r: RowResult, probe: ProbeChild, started: float) -> None:
        """Shut the row's probe down; raises ``ProbeDied`` if its process crashed."""
        summary = probe.shutdown()
        r.ops = summary["ops"]
        r.final_read = summary.get("final_read")
        self._emitted += summary["events_emitted"]
        r.seconds = round(time.monotonic() - started, 1)
        log.info("row %s: probe summary %s", r.name, json.dumps(summary))

    def run_quiet(self, scenarios: Sequence[Scenario]) -> None:
        """Rows without a fault, all at once (their probes do not disturb each other). A row
        whose probe process crashed fails: never run again, since a rerun would hide a crash
        an operator's probe would hit too."""
        started = time.monotonic()
        running = []
        for s in scenarios:
            r = self._row(s)
            running.append((r, self._probe(s, r)))
        hold = max(self._duration(s) for s in scenarios) + self.settings.warmup
        time.sleep(hold + self.settings.run_on)
        for r, probe in running:
            try:
                self._finish_probe(r, probe, started)
            except ProbeDied as exc:
                self._probe_died(r, exc)

    def run_fault(self, s: Scenario) -> None:
        """A row with a fault: probe, warm-up, fault held and undone, run on, final read.
        A fault that fails marks its row failed (``error``); the cluster is healed and the
        next rows still run. A row whose probe process crashed fails too (no rerun)."""
        r = self._row(s)
        try:
            self._run_fault(s, r)
        except ProbeDied as exc:
            self._probe_died(r, exc)
            self.nemesis.heal()
        except Exception as exc:
            log.exception("row %s", s.name)
            r.error = f"{type(exc).__name__}: {exc}"
            self.nemesis.heal()

    def _probe_died(self, r: RowResult, exc: ProbeDied) -> None:
        log.warning("row %s: %s", r.name, exc)
        self.probe_deaths.append(f"{r.name}: {exc}")
        r.error = f"the probe's process failed: {exc}"

    def _run_fault(self, s: Scenario, r: RowResult) -> None:
        assert s.make_fault is not None
        started = time.monotonic()
        probe = self._probe(s, r)
        fault: Fault | None = None
        try:
            time.sleep(self.settings.warmup)
            fault = s.make_fault(self.cluster, self.proxy, r.prefix)
            record = self.nemesis.start(fault)
            try:
                time.sleep(self._duration(s))
            finally:
                self.nemesis.stop(fault)
            r.fault_start = _fault_start(record)
            r.fault_info = dict(record.info)
            time.sleep(self.settings.run_on)
        finally:
            self._finish_probe(r, probe, started)
            _release(fault)
        if "injections" in r.fault_info:
            r.evidence = (f"{r.fault_info.get('injected', 0)} injected by the proxy, e.g. "
                          + "; ".join(r.fault_info["injections"][:3]))
        if s.evidence == "duplicate-on-disk":
            dups = duplicates_in_log(self.cluster.bootstrap, r.prefix)
            r.evidence = f"{len(dups)} values at two offsets in the log"
            r.fault_info["duplicated_in_log"] = len(dups)

    def run_injected(self, s: Scenario, base: Iterable[Op]) -> None:
        """Replay ``base`` (a real probe's history) with ``s``'s finding injected."""
        from kmon.nemesis import inject
        from kmon.streaming import replay

        r = self._row(s)
        r.probe = f"mx{self.tag}-{s.name}.inj"
        try:
            ops, r.evidence = inject.INJECTORS[s.name](list(base), r.prefix)
        except ValueError as exc:  # the base lacks what the finding is written into
            r.error = f"nothing to inject into: {exc}"
            return
        r.ops = sum(1 for o in ops if o.type != "invoke")
        r.offline = offline_counts_of(ops, "read_committed")
        t0 = min(o.time for o in ops)
        r.fault_start = time.time()
        # The history's clock moved to now: the watermark sees the replay as current.
        events = replay.as_events(ops, probe=r.probe, time_offset_ns=time.time_ns() - t0)
        self._send(events)

    # -- collecting -----------------------------------------------------------------------

    def settle(self) -> None:
        """Wait until the monitor has read every event, then move the watermark past every
        grace period (clock ticks) and let both stages decide."""
        from kmon.streaming import replay

        assert self.monitor is not None
        m, cfg = self.monitor.metrics, self.monitor.cfg
        timeout = self.settings.settle_timeout
        wait_for(lambda: m.events >= self._emitted, "the monitor to read every op event",
                 timeout)
        # Two rounds: the first tick decides stage 1's absence verdicts; the facts they send
        # reach stage 2, whose verdicts the second tick's round lets it decide. A start waits
        # for the transactions it may have read (offsets.SETTLE_NS) if that is longer.
        wait = max(cfg.grace_s, offsets.SETTLE_NS / 1e9)
        for _ in range(2):
            time.sleep(cfg.watermark_delay_s + wait + 2 * cfg.trigger_s)
            self._send([replay.clock_tick(time.time_ns(), "matrix-clock")])
            wait_for(lambda: m.events >= self._emitted, "the monitor to read the tick", timeout)
        time.sleep(4 * cfg.trigger_s + 2)  # the last micro-batches' outputs

    def collect(self, offline: bool = True) -> list[RowResult]:
        """Fill in each row's reported counts, detection time and verdict."""
        assert self.monitor is not None
        dead = [name for name, q in self.monitor.queries.items() if not q.isActive]
        if dead:  # counts would be silently short: say so instead of judging rows on them
            raise RuntimeError(f"the monitor's {', '.join(dead)} query stopped during the run"
                               " (its error is in the log): the matrix is incomplete")
        evidence = read_evidence(self.cluster.bootstrap, self.monitor.cfg.anomalies_topic)
        counts = self._counts_by_prefix()
        for name, r in self.results.items():
            s = self.scenarios[name]
            r.reported = counts.get(r.prefix, {})
            firsts = [e["detected_at"] / SECOND for e in evidence
                      if e["probe"] == r.probe and not e.get("update")
                      and e["anomaly"] in (*s.must, *s.any_of)]
            if firsts and r.fault_start is not None:
                r.detection_s = round(min(firsts) - r.fault_start, 1)
            provoked = not s.evidence or bool(r.fault_info.get("duplicated_in_log"))
            r.verdict, r.why = judge(s, r.reported, provoked)
            if r.verdict == "FAIL" and r.reported.get(UNSEEN) and short_read(r):
                r.why += f" (the probe's final read: {short_read(r)})"
            if r.error:
                r.verdict, r.why = "FAIL", f"did not run: {r.error}"
            if offline and r.history is not None:
                r.offline = offline_counts(r.history, s.preset)
        return list(self.results.values())

    def _counts_by_prefix(self) -> dict[str, dict[str, int]]:
        assert self.monitor is not None
        m = self.monitor.metrics
        out: dict[str, Counter[str]] = {}
        for k, n in list(m.anomalies.items()):
            out.setdefault(_prefix(k.topic), Counter())[k.anomaly] += n
        for p, n in list(m.unseen_verdicts.items()):
            out.setdefault(_prefix(p.topic), Counter())[UNSEEN] += n
        return {k: dict(v) for k, v in out.items()}


def _release(fault: Fault | None) -> None:
    """Undo what a proxy fault holds (hidden batches), once its row's probe has finished."""
    release = getattr(fault, "release", None)
    if release is not None:
        release()


def _prefix(topic: str) -> str:
    """The probe topic prefix of a probe topic ``<prefix>.<n>``."""
    return topic.rsplit(".", 1)[0]


def _scenario(name: str) -> Scenario:
    return next(s for s in SCENARIOS if s.name == name)


def _fault_start(record: FaultRecord) -> float:
    """When the fault did its damage: the election for an unclean election, else its start."""
    for mark in record.marks:
        if "elected leader" in mark.what:
            return float(mark.at)
    return float(record.started_at or record.invoked_at)


def read_topic(bootstrap: str, topic: str, isolation: str = "read_uncommitted",
               timeout: float = 30.0) -> list[Any]:
    """Every record now in ``topic`` (every partition, from its start)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                  "enable.auto.commit": False, "isolation.level": isolation})
    try:
        meta = c.list_topics(topic, timeout=10).topics[topic]
        marks = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                 for p in meta.partitions}
        c.assign([TopicPartition(topic, p, lo) for p, (lo, _) in marks.items()])
        left = {p for p, (lo, hi) in marks.items() if hi > lo}
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while left and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append(msg)
            if msg.offset() >= marks[msg.partition()][1] - 1:
                left.discard(msg.partition())
        return out
    finally:
        c.close()


def read_evidence(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """The monitor's evidence records, a replayed micro-batch's copies dropped by id."""
    seen: dict[str, dict[str, Any]] = {}
    for msg in read_topic(bootstrap, topic):
        rec = json.loads(msg.value())
        seen.setdefault(rec["id"], rec)
    return list(seen.values())


def duplicates_in_log(bootstrap: str, prefix: str) -> dict[tuple[str, int, bytes], list[int]]:
    """Values stored at two offsets or more of one partition of the probe's topics, read
    straight from the brokers (every record, aborted ones included): the broker's own word
    on whether it duplicated."""
    from confluent_kafka.admin import AdminClient

    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        names = admin.list_topics(timeout=10).topics
    topics = [t for t in names if t.startswith(prefix + ".")]
    where: dict[tuple[str, int, bytes], list[int]] = {}
    for topic in topics:
        for msg in read_topic(bootstrap, topic):
            where.setdefault((topic, msg.partition(), msg.value()), []).append(msg.offset())
    return {k: v for k, v in where.items() if len(v) > 1}


def offline_counts(history: Path, preset: str) -> dict[str, int]:
    """What ``kmon check`` finds in a row's history: errors by type, plus unseen values."""
    from kmon.history import iter_ops

    isolation = ("read_uncommitted" if presets.get(preset).settings.get(
        "consumer.isolation.level") == "read_uncommitted" else "read_committed")
    return offline_counts_of(iter_ops(history), isolation)


def offline_counts_of(ops: Iterable[Op], isolation: str) -> dict[str, int]:
    from kmon.checker import CheckConfig, check

    return counts_of(check(ops, CheckConfig(
        isolation=isolation, share_lock_ns=round(presets.SHARE_LOCK_S * 1e9))))


def counts_of(report: Report) -> dict[str, int]:
    """A report's records per anomaly type, and its unseen values (``UNSEEN``)."""
    out = {t: len(v) for t, v in report.errors.items() if v}
    unseen = sum(report.unseen_counts.values())
    if unseen:
        out[UNSEEN] = unseen
    return out


def wait_for(cond: Callable[[], bool], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(1.0)


def _counts(c: dict[str, int] | None) -> str:
    if c is None:
        return "-"
    return ", ".join(f"{t} {n}" for t, n in sorted(c.items())) or "0"


def render_table(rows: Sequence[RowResult]) -> str:
    """The matrix as a Markdown table."""
    head = ("| row | origin | fault | expected | forbidden (besides the rest) | monitor reported |"
            " `kmon check` on the same history | verdict | detection (s) | ops |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        expected = ", ".join(r.must) + (" / any of " + " or ".join(r.any_of) if r.any_of else "")
        short = [t for t in r.forbidden if t in ("lost-write", "duplicate", "G1a",
                                                 "inconsistent-offsets", "torn-transaction")]
        det = "-" if r.detection_s is None else f"{r.detection_s:.1f}"
        verdict = r.verdict + (f" ({r.why})" if r.why else "")
        lines.append(f"| {r.name} | {r.origin} | {r.note} | {expected or 'nothing'} | "
                     f"{', '.join(short) or '-'} | {_counts(r.reported)} | "
                     f"{_counts(r.offline)} | {verdict} | {det} | {r.ops} |")
    return head + "\n".join(lines) + "\n"


def render_details(rows: Sequence[RowResult]) -> str:
    """Per row: what the fault chose and measured, and the evidence check."""
    out = []
    for r in rows:
        info = {k: v for k, v in r.fault_info.items() if not isinstance(v, list | dict)
                or len(json.dumps(v, default=str)) < 120}
        extra = f"; evidence: {r.evidence}" if r.evidence else ""
        out.append(f"- **{r.name}** ({r.seconds:.0f} s, probe `{r.probe}`): "
                   f"`{json.dumps(info, default=str)}`{extra}")
    return "\n".join(out) + "\n"


def render_bugs(rows: Sequence[RowResult]) -> str:
    """The bug each proxy row reproduces, and how its filter imitates it."""
    lines = [f"- **{r.name}**: {_scenario(r.name).reproduces}\n" for r in rows
             if _scenario(r.name).reproduces]
    if not lines:
        return ""
    return ("\n## The bugs the proxy rows reproduce\n\nEach through the Kafka protocol proxy "
            "(`kmon nemesis proxy up`), real clients and real brokers on both sides:\n\n"
            + "".join(lines))


def render_deaths(deaths: Sequence[str]) -> str:
    """Probe processes that crashed (in librdkafka) and had their row run again."""
    if not deaths:
        return ""
    return ("\n## Probe processes that crashed\n\nEach probe runs in its own process; these "
            "died (in the Kafka client library, not kmon) and their row ran again on fresh "
            "topics:\n\n" + "".join(f"- {d}\n" for d in deaths))


# -- whole runs: the matrix document, the soak ----------------------------------------------

REGENERATE = ("kmon run &   # the local stack, with Toxiproxy\n"
              "kmon nemesis matrix --out docs/detection-matrix.md   # or: make matrix")


def run_all(m: Matrix, names: Sequence[str] | None = None) -> list[RowResult]:
    """Every row (or ``names``): quiet rows together, injected replays of their base rows'
    histories, then each fault row; settle and collect."""
    from kmon.history import iter_ops

    chosen = [s for s in SCENARIOS if names is None or s.name in names]
    quiet = [s for s in chosen if s.origin != "injected" and s.make_fault is None]
    injected = [s for s in chosen if s.origin == "injected"]
    for base in dict.fromkeys(s.base for s in injected):
        if not any(s.name == base for s in quiet):
            quiet.append(_scenario(base))  # the history its injected rows replay
    if quiet:
        m.run_quiet(quiet)
    histories: dict[str, list[Op]] = {}
    for s in injected:
        if s.base not in histories:
            path = m.results[s.base].history
            assert path is not None
            histories[s.base] = list(iter_ops(path))
        m.run_injected(s, histories[s.base])
    for s in chosen:
        if s.make_fault is not None:
            m.run_fault(s)
    m.settle()
    return m.collect()


# The monitor's event-time settings: the production defaults.
MONITOR_TIMING = {
    # The events topic lives on the faulted cluster: an events partition whose leader a row
    # kills lags the others by a failover (the brokers' 9 s session timeout, then the probes'
    # retries). With one watermark that followed the freshest partition and 2 s + 5 s, CI
    # once saw a lost-write decided before the lagging partition brought the read that
    # contradicted it (the unclean-election row). The monitor now decides on the lowest
    # partition's watermark; the production defaults stay as a second margin.
    "watermark.delay": "5s",
    "grace": "10s",
    # A leader pause stalls each probe process's one loop of sends, transactions and polls
    # (every call may wait op_timeout, 10 s), so readers can trail acks by over 30 s with
    # nothing lost (CI saw 35 such values once at 30 s); the final read catches up well
    # within 60 s of the fault's end.
    "unseen.grace": "60s",
    # The rows with share consumers run their share group with this lock (presets).
    "share.lock": f"{presets.SHARE_LOCK_S:g}s",
}


def write_doc(path: Path, rows: Sequence[RowResult], took_s: float, settings: MatrixSettings,
              command: str, probe_deaths: Sequence[str] = ()) -> None:
    passed = sum(r.passed for r in rows)
    text = (
        "# Detection matrix\n\n"
        f"Generated by a run on the local stack; regenerate with:\n\n```sh\n{command}\n```\n\n"
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {len(rows)} rows, {passed} "
        f"passed, {took_s / 60:.1f} min. Each row ran the real probe ({settings.processes} "
        f"processes, {settings.rate:.0f} ops/s target) with the row's preset, "
        f"{settings.warmup:.0f} s of warm-up before the fault and {settings.run_on:.0f} s "
        "after it, then the probe's final read; one in-process monitor (trigger 1 s, "
        f"watermark delay {MONITOR_TIMING['watermark.delay']}, grace {MONITOR_TIMING['grace']},"
        f" unseen grace {MONITOR_TIMING['unseen.grace']}) watched every row's op events "
        "in one events topic (see `kmon.nemesis.matrix` and docs/nemesis.md).\n\n"
        "- **origin**: `real`: a real fault on the real cluster; `proxy`: the real cluster "
        "behind the Kafka protocol proxy (Kroxylicious with kmon's filters, "
        "`kmon.local.kafka_proxy`), whose filter makes the brokers' answers misbehave as the "
        "bug did, while the real probe's clients talk to it (`kmon.nemesis.protocol`; the "
        "section below links each bug and says how its filter imitates it); `injected`: a "
        "replay of a quiet row's real history with the finding written in "
        "(`kmon.nemesis.inject`), for share groups' promises, which Kafka keeps under every "
        "fault here and no proxy filter breaks yet.\n"
        "- **forbidden**: every type neither expected nor allowed must not be reported; the "
        "column names the serious ones (`kmon.nemesis.scenarios` has each row's allowances).\n"
        "- **monitor reported**: `kmon_anomalies_total` (and `kmon_unseen_verdicts_total` as "
        "`unseen`) summed over the row's probe topics; `G0`/`int-send-skip` are normal in "
        "Kafka (transactions interleave), `G0`/`G1c` are found offline only.\n"
        "- **detection**: fault start (the unclean row: the election; proxy rows: the "
        "filter switched on) to the first verdict of an expected type, as the monitor "
        "emitted it. It "
        f"includes the monitor's grace period ({MONITOR_TIMING['grace']}) for absence "
        "verdicts and, for faults "
        "whose damage is only seen when the probe reads again (lost writes), the time until "
        "a consumer reads past the gap.\n\n"
        + render_table(rows) + render_bugs(rows) + "\n## Per row\n\n" + render_details(rows)
        + render_deaths(probe_deaths))
    path.write_text(text)


def soak(m: Matrix, minutes: float) -> dict[str, Any]:
    """The healthy row for ``minutes``: its op count and what the monitor and ``kmon check``
    reported (both must be nothing)."""
    m.settings.durations["healthy"] = minutes * 60
    m.run_quiet([_scenario("healthy")])
    m.settle()
    r = m.collect()[0]
    return {"minutes": minutes, "ops": r.ops, "monitor": r.reported, "kmon_check": r.offline,
            "verdict": r.verdict, "probe": r.probe, "probe_crashes": m.probe_deaths}
