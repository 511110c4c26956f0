"""The pager path, live: probe and monitor on the suite's cluster, Prometheus with kmon's rules,
a real Alertmanager (Debian's) and a webhook receiver on loopback counting notifications.

The rules are the generated ones with shorter windows (``RuleConfig`` below), so the run takes
minutes. In one stack, in order:

1. a healthy start notifies nothing;
2. DeleteRecords past the readers of a probe partition: one notification group for the
   lost-write alert, naming the cluster, topic, partition and broker;
3. once that notification's alerts have resolved, the monitor is SIGKILLed and restarted from
   its checkpoint under another scrape target (another ``instance``), its counters and verdict
   times restored: no verdict is counted (so notified) twice, the lost-write counter equalling
   the distinct verdicts of the evidence topic (other partitions' verdicts may come later, as
   their readers pass the deleted offsets);
4. the restarted monitor's Spark JVM is stopped (SIGSTOP; its metrics endpoint still answers):
   the monitor-stalled alert is notified; the JVM is resumed;
5. every broker is paused: the probe-blind alert is notified; the brokers are resumed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from kmon.dashboards import rules, tools
from kmon.dashboards.rules import RuleConfig
from kmon.local.alertmanager import Routing
from kmon.local.cluster import LocalCluster
from kmon.local.ports import BROKER_IDS
from kmon.local.stack import MONITOR_SLOT, LocalStack, StackOptions
from kmon.nemesis import DeleteRecords, Nemesis
from kmon.nemesis.matrix import read_evidence
from tests.helpers import missing_tool, suite_stack, wait_until
from tests.integration.promapi import Prom

# Windows short enough for a test, long enough for a 2-core machine: a monitor's Spark start
# (tens of seconds, its first batch included) must not look stalled, a restart must not look
# down.
LIVE_RULES = RuleConfig(
    anomaly_window="60s", down_for="90s", monitor_stalled_after_s=180, input_window="60s",
    blind_for="20s", probe_blind_after_s=30,
)
ROUTING = Routing(group_wait="1s", group_interval="2s", repeat_interval="1h")
LOST = f"{rules.ANOMALY_ALERT_PREFIX}lost-write"


@dataclass
class Pager:
    """The webhook receiver: every notification Alertmanager posted, in order."""

    url: str = ""
    notifications: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def firing(self, alertname: str) -> list[dict[str, Any]]:
        """Notifications of ``alertname`` with it firing."""
        with self.lock:
            return [n for n in self.notifications
                    if n["status"] == "firing" and n["groupLabels"].get("alertname") == alertname]

    def firing_names(self) -> list[str]:
        with self.lock:
            return [n["groupLabels"].get("alertname", "?") for n in self.notifications
                    if n["status"] == "firing"]


@contextlib.contextmanager
def _pager() -> Iterator[Pager]:
    pager = Pager()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with pager.lock:
                pager.notifications.append(json.loads(body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    pager.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield pager
    finally:
        server.shutdown()
        server.server_close()


def _java_children(pid: int) -> list[int]:
    """The JVMs a process started (the monitor's Spark driver JVM, through py4j)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == pid and b"java" in (entry / "cmdline").read_bytes():
                out.append(int(entry.name))
    return out


@dataclass
class Live:
    stack: LocalStack
    prom: Prom
    pager: Pager
    cluster: str
    probe_prefix: str
    anomalies_topic: str


@pytest.fixture(scope="module")
def live(local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    for tool in ("prometheus", "promtool", "prometheus-alertmanager", "amtool"):
        if tools.find(tool) is None:
            missing_tool(tool, "`make setup` installs Debian's prometheus and alertmanager")
    run = uuid.uuid4().hex[:8]
    home = tmp_path_factory.mktemp("alerting-live")
    rule_file = home / "rules.yml"
    rule_file.write_text(yaml.safe_dump(rules.prometheus_rules("read_committed", LIVE_RULES)))
    _, base = suite_stack()
    name = f"al{run}"
    with _pager() as pager:
        options = StackOptions(
            events_topic=f"kmon-events-{run}", scrape_interval="2s", cluster=f"live-{run}",
            rule_files=[rule_file], alert_webhook=pager.url, alert_routing=ROUTING,
            # lagging readers (DeleteRecords then removes acknowledged, unread records)
            # plain sends only: the fault's consequence is lost writes, nothing decided later
            probe_args=["--name", name, "--rate", "20", "--processes", "2",
                        "--set", "poll_share=0.2", "--set", "max_poll_records=1",
                        "--set", "catchup_interval=0", "--set", "txn_share=0"],
            monitor_args=["--set", f"topics.anomalies=kmon-anomalies-{run}",
                          "--set", f"topics.facts=kmon-facts-{run}",
                          "--set", f"topics.dead-letters=kmon-dead-letters-{run}"],
        )
        stack = LocalStack(local_cluster, options, home=home, port_base=base)
        stack.start(say=lambda _: None)
        try:
            assert stack.prometheus is not None
            yield Live(stack, Prom(stack.prometheus.url), pager, options.cluster,
                       f"kmon-probe-{name}", f"kmon-anomalies-{run}")
        finally:
            stack.stop(say=lambda _: None)
            for node in BROKER_IDS:
                with contextlib.suppress(Exception):
                    local_cluster.resume(node)


def _new_verdicts(cluster: LocalCluster, topic: str) -> int:
    """Distinct new lost-write verdicts (evidence records, updates left out) in ``topic``."""
    return sum(1 for rec in read_evidence(cluster.bootstrap, topic)
               if rec["anomaly"] == "lost-write" and not rec["update"])


def _children_alive(stack: LocalStack) -> bool:
    dead = stack.dead_children()
    assert not dead, "\n".join(f"{c.name} exited:\n{_tail(c.log)}" for c in dead)
    return True


def _tail(log: Path, lines: int = 25) -> str:
    text = log.read_text(errors="replace") if log.exists() else "(no log)"
    return "\n".join(text.splitlines()[-lines:])


@contextlib.contextmanager
def _logs_on_failure(stack: LocalStack) -> Iterator[None]:
    """A failed step says what the children logged last (their temp dirs do not last)."""
    try:
        yield
    except AssertionError as e:
        tails = "\n".join(f"--- {c.name} ({c.log}):\n{_tail(c.log)}" for c in stack.children)
        raise AssertionError(f"{e}\n{tails}") from e


def test_the_pager_path(live: Live, local_cluster: LocalCluster) -> None:
    with _logs_on_failure(live.stack):
        _pager_path(live, local_cluster)


def _pager_path(live: Live, local_cluster: LocalCluster) -> None:
    p, pager, stack = live.prom, live.pager, live.stack
    # 1. healthy: the monitor checks the probe's events, nobody is paged
    wait_until(lambda: _children_alive(stack) and (
        p.value(f'sum(kmon_monitor_events_total{{cluster="{live.cluster}"}})') or 0) > 0,
        "the monitor counts events", timeout=300)
    time.sleep(30)  # unread values accumulate behind the lagging readers
    assert pager.firing_names() == [], "a healthy start paged"

    # 2. a real fault: one notification group naming cluster, topic, partition and broker
    # Every partition: the one with most unread records is the one no reader polls before the
    # probe's final read (twice on 2026-11-26, no page in 6 minutes); readers that do come
    # back pass the deleted offsets of the others.
    Nemesis(local_cluster).run(DeleteRecords(local_cluster, topic_prefix=live.probe_prefix,
                                             count=64), duration=0)
    # the lagging readers must first read past the deleted offsets, then the grace period
    wait_until(lambda: bool(pager.firing(LOST)), "the lost-write page", timeout=360)
    first = pager.firing(LOST)
    # One group: as other partitions' readers pass their deleted offsets, their alerts join
    # it and Alertmanager notifies the group again (group_interval), never a second group.
    assert len({json.dumps(n["groupLabels"], sort_keys=True) for n in first}) == 1, first
    alerts = first[0]["alerts"]
    assert len({a["fingerprint"] for a in alerts}) == len(alerts)
    labels = alerts[0]["labels"]
    assert labels["cluster"] == live.cluster
    assert labels["topic"].startswith(live.probe_prefix) and labels["partition"].isdigit()
    assert labels["broker"] in {str(n) for n in BROKER_IDS}, labels
    description = alerts[0]["annotations"]["description"]
    assert f"--cluster {live.cluster} --anomaly lost-write --topic {labels['topic']}" in description
    assert "instance" not in labels and "pod" not in labels
    others = [n for n in pager.firing_names() if n != LOST]
    assert not [n for n in others if n.startswith(rules.ANOMALY_ALERT_PREFIX)], others

    # 3. after the first page's alerts resolved: kill the monitor, restart it under another
    # instance. Other partitions' verdicts may still come (each when a reader passes its
    # deleted offsets, minutes apart as the probe's processes restart: CI saw a lost-write
    # alert present for 3 minutes without a break), and page as they should; what must not
    # page again is a verdict counted before the restart.
    paged = {(a["labels"]["topic"], a["labels"]["partition"]) for n in first for a in n["alerts"]}
    wait_until(lambda: not [a for a in p.get("/api/v1/alerts")["data"]["alerts"]
                            if a["labels"]["alertname"] == LOST
                            and (a["labels"]["topic"], a["labels"]["partition"]) in paged],
               "the first page's alerts resolve", timeout=180)
    topic, partition = sorted(paged)[0]
    series = (f'kmon_anomaly_last_timestamp_seconds{{cluster="{live.cluster}",'
              f'anomaly="lost-write",topic="{topic}",partition="{partition}"')
    restored = p.value(f"max({series}}})")
    assert restored is not None
    monitor = next(c for c in stack.children if c.name == "monitor")
    assert monitor.proc is not None
    os.killpg(monitor.proc.pid, signal.SIGKILL)
    monitor.proc.wait(30)
    assert monitor.proc.returncode == -signal.SIGKILL  # the kill happened
    stack.children.remove(monitor)
    slot = MONITOR_SLOT + 5
    restarted = stack.monitor_child(slot)
    restarted.start()
    stack.children.append(restarted)
    assert stack.prometheus is not None
    stack.prometheus.targets["kmon-monitor"] = [f"127.0.0.1:{stack.ports.metrics(slot)}"]
    stack.prometheus.up()  # reload: the old target is gone, the new one is another instance
    new_instance = f'instance="127.0.0.1:{stack.ports.metrics(slot)}"'
    wait_until(lambda: _children_alive(stack) and p.value(
        f"max({series},{new_instance}}})") == restored,
        "the restarted monitor exports the restored verdict time", timeout=180)

    # 4. stall the restarted monitor's Spark JVM: its metrics still answer, no batch finishes
    assert restarted.proc is not None
    jvms = _java_children(restarted.proc.pid)
    assert jvms, "the monitor's Spark JVM"
    for jvm in jvms:
        os.kill(jvm, signal.SIGSTOP)
    try:
        wait_until(lambda: bool(pager.firing("KmonMonitorStalled")), "the monitor-stalled page",
                   timeout=300)
    finally:
        for jvm in jvms:
            os.kill(jvm, signal.SIGCONT)
    # Through the restart and the stall, no verdict was counted (and so paged) twice: the
    # lost-write counter equals the distinct verdicts in the evidence topic, which a replayed
    # batch may hold twice under one id. (Not "each alert active once": a partition's
    # deleted offsets can be decided in two waves, a minute apart, as two readers pass them;
    # a run here saw a lost-write alert resolve and fire again, rightly, on new verdicts.)
    counted = f'sum(kmon_anomalies_total{{cluster="{live.cluster}",anomaly="lost-write"}})'
    wait_until(lambda: p.value(counted) == _new_verdicts(local_cluster, live.anomalies_topic),
               "the lost-write count equals the distinct lost-write verdicts", timeout=60)
    assert pager.firing(LOST)
    assert {n for n in pager.firing_names() if n.startswith(rules.ANOMALY_ALERT_PREFIX)} == {LOST}

    # 5. every broker paused: the probe is blind, and that pages
    for node in BROKER_IDS:
        local_cluster.pause(node)
    try:
        wait_until(lambda: bool(pager.firing("KmonProbeBlind")), "the probe-blind page",
                   timeout=180)
    finally:
        for node in BROKER_IDS:
            local_cluster.resume(node)
    blind = pager.firing("KmonProbeBlind")[0]["alerts"][0]["labels"]
    assert blind["cluster"] == live.cluster and blind["f"] in {"send", "poll"}
