"""`kmon monitor` with its checkpoint on a real S3-compatible server (moto's, on loopback),
configured by the S3A settings the Helm chart renders: a run, a stop, a restart that resumes.

What this shows: hadoop-aws and the AWS SDK bundle `kmon setup` fetched are on the monitor's
classpath; the chart's `spark.hadoop.fs.s3a.*` settings (endpoint, path-style access, region,
credentials from the environment as the chart's Secret gives them) reach a working S3A; Spark's
checkpoint, RocksDB's state and kmon's metric snapshots live in the bucket; and a restarted
monitor resumes from them: its counters continue from the bucket's snapshot and nothing is
counted twice. Not shown: AWS itself, web identity (IRSA), TLS to the store.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kmon.dashboards import tools
from kmon.streaming import replay
from kmon.synth import SynthConfig, healthy
from tests.helpers import missing_tool, wait_until
from tests.integration.test_monitor import SECOND, _create, _producer
from tests.unit.streaming.cases import CASES, placed

CHART = Path(__file__).resolve().parents[2] / "helm" / "kmon"
BUCKET = "kmon-checkpoints"
KEYS = {"AWS_ACCESS_KEY_ID": "kmon-test-id", "AWS_SECRET_ACCESS_KEY": "kmon-test-secret"}
CLUSTER = "s3a-it"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _moto_server() -> Any:
    """moto's threaded S3 server, answering `Expect: 100-continue` once.

    moto's server sends two `100 Continue` responses to such a request (werkzeug's and Python's
    http.server's both), and the AWS SDK's async client, which S3A uploads files with (RocksDB's
    SST files), takes the second for the final response: the upload fails with "Status Code:
    100" (getmoto/moto#9975, not merged). Real S3 sends one; so does this server.
    """
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    class OneContinue(MotoRequestHandler):
        def handle_expect_100(self) -> bool:
            return True  # werkzeug's run_wsgi sends the one 100 Continue

    class Server(ThreadedMotoServer):
        def _server_entry(self) -> None:
            app = DomainDispatcherApplication(create_backend_app)
            self._server = make_server(self._ip_address, self._port, app, True,
                                       request_handler=OneContinue)
            self._server_ready_event.set()
            self._server.serve_forever()

    return Server(ip_address="127.0.0.1", port=_free_port(), verbose=False)


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    """moto's S3 server on loopback with one bucket; yields a boto3 client for it."""
    boto3 = pytest.importorskip("boto3")  # moto[server] (the test extra) brings it

    server = _moto_server()
    server.start()
    host, port = server.get_host_and_port()
    client = boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1",
                          aws_access_key_id=KEYS["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=KEYS["AWS_SECRET_ACCESS_KEY"])
    client.create_bucket(Bucket=BUCKET)
    yield client
    server.stop()


def _chart_s3a_settings(endpoint: str, location: str) -> dict[str, str]:
    """The monitor's `spark.hadoop.fs.s3a.*` settings as the chart renders them."""
    helm = tools.find("helm")
    if helm is None:
        missing_tool("helm", "run `make setup` (kmon dashboards install-tools)")
    done = subprocess.run(
        [helm, "template", "t", str(CHART), "--kube-version", "1.34.0",
         "--set", "cluster=c", "--set", "kafka.bootstrapServers=kafka:9092",
         "--set", f"monitor.checkpoint.location={location}",
         "--set", f"monitor.checkpoint.s3a.endpoint={endpoint}",
         "--set", "monitor.checkpoint.s3a.region=us-east-1",
         "--set", "monitor.checkpoint.s3a.pathStyleAccess=true",
         "--set", "monitor.checkpoint.s3a.credentials.existingSecret=kmon-s3"],
        capture_output=True, text=True, check=True)
    config_map = next(d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] == "ConfigMap"
                      and d["metadata"]["name"] == "t-kmon-config")
    settings = yaml.safe_load(config_map["data"]["monitor.yaml"])
    return {k: str(v) for k, v in settings.items() if k.startswith("spark.hadoop.fs.s3a.")}


def _events(start: int) -> list[list[Any]]:
    """Two halves of one stream: a duplicate and healthy traffic, then more healthy traffic."""
    _, ops = CASES["duplicate"]
    case = list(replay.as_events(placed(ops, "duplicate"), probe="duplicate",
                                 time_offset_ns=start, time_scale=1_000_000))
    synth = list(replay.as_events(
        placed(list(healthy(600, SynthConfig(keys=2, processes=2, keys_per_process=1))),
               "healthy"), probe="healthy", time_offset_ns=start + 30 * SECOND))
    return [case + synth[:300], synth[300:]]


class MonitorProcess:
    """`kmon monitor` as the container runs it: its own process, JVM and metrics port."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.port = _free_port()
        self.log = log
        kmon = str(Path(sys.executable).parent / "kmon")
        with open(log, "w") as out:
            self.proc = subprocess.Popen([kmon, "monitor", *args, "--metrics-port",
                                          str(self.port)], env=env, stdout=out,
                                         stderr=subprocess.STDOUT)

    def counter(self, name: str, **labels: str) -> float | None:
        """A metric's value now; None while the endpoint is not up."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics",
                                        timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return None
        total = 0.0
        for m in re.finditer(rf"^{name}\{{([^}}]*)\}} (\S+)$", text, re.M):
            if all(f'{k}="{v}"' in m[1] for k, v in labels.items()):
                total += float(m[2])
        return total

    def wait(self, what: str, condition: Any, timeout: float) -> None:
        def check() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"kmon monitor exited ({self.proc.returncode}) before "
                                     f"{what}:\n{self.log.read_text()[-4000:]}")
            return bool(condition())

        wait_until(check, what, timeout)

    def stop(self) -> int:
        """SIGTERM, as Kubernetes stops a pod; the monitor finishes its batch and exits."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(180)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        return self.proc.returncode


def _keys(s3: Any, prefix: str) -> list[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def _batches(keys: list[str], log: str) -> set[int]:
    return {int(k.rsplit("/", 1)[1]) for k in keys
            if re.search(rf"/keys/{log}/\d+$", k)}


@pytest.mark.timeout(1200)  # two JVM starts with a 700 MB jar on a loaded 2-core machine
def test_monitor_checkpoints_to_s3a_and_resumes_from_it(
    s3: Any, kafka_bootstrap: str, tmp_path: Path,
) -> None:
    run = uuid.uuid4().hex[:8]
    prefix = f"kmon/{run}"
    location = f"s3a://{BUCKET}/{prefix}"
    conf = _chart_s3a_settings(s3.meta.endpoint_url, location)
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    topic = f"ev-{run}"
    _create(kafka_bootstrap, topic)
    settings = {"topics.events": topic, "topics.anomalies": f"an-{run}",
                "topics.facts": f"fa-{run}", "topics.dead-letters": f"dl-{run}",
                "trigger": "500ms", "txn.trigger": "500ms", "grace": "2s",
                "watermark.delay": "1s", "unseen.grace": "20s", "cluster": CLUSTER, **conf}
    args = ["-b", kafka_bootstrap, "--checkpoint", location,
            *(a for k, v in settings.items() for a in ("--set", f"{k}={v}"))]
    # The chart's Secret reaches driver and executors as these variables (the chart's S3A
    # credentials provider reads them); nothing else about S3 is in the environment.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | KEYS
    first_half, second_half = _events(time.time_ns() - 600 * SECOND)
    producer = _producer(kafka_bootstrap)
    replay.produce(producer, topic, first_half)

    first = MonitorProcess(args, env, tmp_path / "monitor-1.log")
    try:
        first.wait("the first half processed", lambda: (
            first.counter("kmon_monitor_events_total") == len(first_half)
            and first.counter("kmon_anomalies_total", anomaly="duplicate") == 1), 600)
        time.sleep(3)  # a few more (empty) micro-batches: their commits land too
    finally:
        assert first.stop() == 0, first.log.read_text()[-4000:]
    keys = _keys(s3, prefix)
    for part in ("keys/offsets/", "keys/commits/", "keys/state/", "transactions/offsets/",
                 "metrics/"):
        assert any(k.startswith(f"{prefix}/{part}") for k in keys), (part, keys)
    committed = _batches(keys, "commits")
    assert committed, keys

    replay.produce(producer, topic, second_half)
    second = MonitorProcess(args, env, tmp_path / "monitor-2.log")
    try:
        # Counters come back from the bucket's snapshot before any new event is counted...
        second.wait("the restored counters", lambda: (
            second.counter("kmon_monitor_events_total") or 0) >= len(first_half), 600)
        total = len(first_half) + len(second_half)
        second.wait("the second half processed", lambda: (
            second.counter("kmon_monitor_events_total") or 0) >= total, 600)
        time.sleep(5)  # a replay of the first half would show by now
        # ... and the first half is not read again: a monitor that did not resume would have
        # counted it twice, and decided the duplicate twice.
        assert second.counter("kmon_monitor_events_total") == total
        assert second.counter("kmon_anomalies_total", anomaly="duplicate") == 1
    finally:
        assert second.stop() == 0, second.log.read_text()[-4000:]
    after = _keys(s3, prefix)
    assert min(_batches(after, "offsets") - committed) > max(committed)  # batch ids go on
