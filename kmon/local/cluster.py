"""A real 3-node Kafka 4.x cluster on loopback, KRaft mode, for the local stack and the tests.

Each node is a combined broker+controller JVM (``kafka.Kafka``) started from the jars set-up
cached, with all of its state under ``<KMON_HOME>/kafka/broker-<N>/``::

    server.properties   generated from kmon's defaults and the overrides
    data/               log.dirs (and the KRaft metadata log), formatted once per cluster id
    server.log          the JVM's stdout/stderr
    pid                 checked against /proc before it is believed

The fault verbs act on one node by id: ``pause``/``resume`` (SIGSTOP/SIGCONT), ``kill``
(SIGKILL) and ``start`` (the same config and data dir). Several clusters coexist on one machine
when each has its own ``KMON_HOME`` and ``KMON_PORT_BASE``.

Besides the PLAINTEXT listener everything else uses, each broker has a SASL_SSL listener
(SCRAM-SHA-512 over TLS, ``sasl_ssl_bootstrap``) for clients configured as in production: its
certificates are made at ``up`` under ``<KMON_HOME>/kafka/tls/`` (``kmon.local.tls``), its
users with ``create_scram_user``.
"""

from __future__ import annotations

import base64
import logging
import os
import shlex
import signal
import socket
import struct
import subprocess
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ClusterMetadata,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from kmon import env, kafka_admin
from kmon.env import SettingError
from kmon.local import procs
from kmon.local.artifacts import installed_kafka
from kmon.local.java import find_java
from kmon.local.kafka_config import (
    SCRAM_MECHANISM,
    broker_properties,
    load_config_defs,
    render_properties,
    validate_overrides,
)
from kmon.local.ports import BROKER_IDS, Ports
from kmon.local.tls import TlsFiles, ensure_tls

HERE = Path(__file__).resolve().parent
MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
READY_TOPIC = "kmon-ready"
SCRAM_ITERATIONS = 4096  # Kafka's minimum for SCRAM-SHA-512: logins cost the least CPU

# Three brokers, Spark and the tests share 2 cores: small heaps; SerialGC (short pauses at
# this heap size, no extra GC threads); C1 only, which took about a third less CPU to bring
# the cluster up than the default tiered C1+C2 (11-14 s against 17-22 s of CPU here) at a
# peak throughput a local test cluster never needs. KMON_KAFKA_JVM_OPTS is appended, so
# e.g. -XX:TieredStopAtLevel=4 brings C2 back for a benchmark.
DEFAULT_JVM_OPTS = (
    "-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
    "-XX:+ExitOnOutOfMemoryError",
)

# librdkafka logs every refused connection; while a broker is down on purpose that is noise.
_client_log = logging.getLogger("kmon.local.kafka_client")
_client_log.addHandler(logging.NullHandler())
_client_log.propagate = False


class ClusterError(RuntimeError):
    """The cluster did not do what was asked (a broker died, a wait ran out)."""


@dataclass(frozen=True)
class BrokerStatus:
    node_id: int
    state: str  # "running", "paused" or "stopped"
    pid: int | None
    port: int
    log: Path


@dataclass(frozen=True)
class PartitionState:
    leader: int | None
    replicas: list[int]
    isr: list[int]


def new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, base64url without padding, never starting with
    ``-`` (Kafka's ``Uuid.randomUuid`` rejects those too: a command line reads them as flags)."""
    while True:
        raw = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not raw.startswith("-"):
            return raw


def cluster_id_arg(cluster_id: str) -> str:
    """kafka-storage's cluster id option in one word, so an id of an older cluster that does
    start with ``-`` is read as the value (one id in 64 did; its format then failed)."""
    return f"--cluster-id={cluster_id}"


class LocalCluster:
    """Handle on the local cluster at ``home`` and ``port_base`` (defaults from ``kmon.env``).

    The handle holds no connection until one is needed; several handles on the same home
    agree, because everything they know is read back from the home's files and /proc.
    """

    def __init__(
        self,
        home: str | os.PathLike[str] | None = None,
        port_base: int | None = None,
        overrides: Mapping[str, str] | None = None,
        cache: str | os.PathLike[str] | None = None,
        jvm_opts: Iterable[str] | None = None,
        proxied_listener: bool = True,
        sasl_ssl_listener: bool = True,
    ) -> None:
        self.home = env.kmon_home(home)
        # Each broker also listens for Toxiproxy (kmon.local.toxiproxy; ports in
        # kmon.local.ports); idle unless a client bootstraps through the proxies.
        self.proxied_listener = proxied_listener
        self.sasl_ssl_listener = sasl_ssl_listener
        self.ports = Ports(env.port_base(port_base))
        self.overrides = dict(overrides or {})
        self.cache = env.kmon_cache(cache)
        extra = shlex.split(os.environ.get("KMON_KAFKA_JVM_OPTS", ""))
        self.jvm_opts = [*(jvm_opts if jvm_opts is not None else DEFAULT_JVM_OPTS), *extra]

    # --- where things are ----------------------------------------------------------------

    @property
    def root(self) -> Path:
        return self.home / "kafka"

    def node_dir(self, node_id: int) -> Path:
        return self.root / f"broker-{_check_id(node_id)}"

    def config_path(self, node_id: int) -> Path:
        return self.node_dir(node_id) / "server.properties"

    def data_dir(self, node_id: int) -> Path:
        return self.node_dir(node_id) / "data"

    def log_path(self, node_id: int) -> Path:
        return self.node_dir(node_id) / "server.log"

    def pid_path(self, node_id: int) -> Path:
        return self.node_dir(node_id) / "pid"

    @property
    def bootstrap(self) -> str:
        """``bootstrap.servers`` for clients: all three brokers."""
        return self.ports.bootstrap

    @property
    def proxied_bootstrap(self) -> str:
        """``bootstrap.servers`` through the Toxiproxy proxies (``kmon.local.toxiproxy``)."""
        return self.ports.proxied_bootstrap

    @property
    def sasl_ssl_bootstrap(self) -> str:
        """``bootstrap.servers`` of the SASL_SSL listeners (SCRAM-SHA-512, CA ``ca_path``)."""
        return self.ports.sasl_ssl_bootstrap

    @property
    def tls(self) -> TlsFiles:
        return TlsFiles(self.root / "tls")

    @property
    def ca_path(self) -> Path:
        """The CA certificate that SASL_SSL clients trust (``ssl.ca.location``)."""
        return self.tls.ca_cert

    def sasl_ssl_client_config(self, username: str, password: str, **extra: Any
                               ) -> dict[str, Any]:
        """``client_config`` for the SASL_SSL listeners, logging in as ``username``."""
        return self.client_config(**{
            "bootstrap.servers": self.sasl_ssl_bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": SCRAM_MECHANISM,
            "sasl.username": username,
            "sasl.password": password,
            "ssl.ca.location": str(self.ca_path),
            **extra,
        })

    def broker_address(self, node_id: int) -> str:
        return f"127.0.0.1:{self.ports.broker(_check_id(node_id))}"

    @property
    def cluster_id(self) -> str | None:
        path = self.root / "cluster.id"
        return path.read_text().strip() if path.is_file() else None

    # --- state ---------------------------------------------------------------------------

    def pid(self, node_id: int) -> int | None:
        """The pid of node ``node_id`` if it is alive (running or paused), else None."""
        return procs.read_pid(self.pid_path(node_id), str(self.config_path(node_id)))

    def pids(self) -> dict[int, int | None]:
        return {n: self.pid(n) for n in BROKER_IDS}

    def state(self, node_id: int) -> str:
        pid = self.pid(node_id)
        if pid is None:
            return "stopped"
        return "paused" if procs.is_stopped(pid) else "running"

    def status(self) -> list[BrokerStatus]:
        return [
            BrokerStatus(n, self.state(n), self.pid(n), self.ports.broker(n), self.log_path(n))
            for n in BROKER_IDS
        ]

    def is_up(self) -> bool:
        """All three nodes have a live process (running or paused)."""
        return all(self.pid(n) is not None for n in BROKER_IDS)

    # --- lifecycle -----------------------------------------------------------------------

    def prepare(self) -> None:
        """Check everything a start needs and write the configs; starts nothing.

        Fails fast, naming the culprit: an unknown or malformed override, Kafka not set up,
        no Java, a port already taken, or a running cluster with other settings.
        """
        dist = installed_kafka(self.cache)
        validate_overrides(self.overrides, load_config_defs(dist.config_defs))
        find_java()
        running = [n for n in BROKER_IDS if self.pid(n) is not None]
        for n in BROKER_IDS:
            wanted = render_properties(broker_properties(
                n, self.ports, self.data_dir(n), self.overrides,
                proxied_listener=self.proxied_listener,
                sasl_ssl_keystore=self.tls.broker_pem(n) if self.sasl_ssl_listener else None,
            ))
            path = self.config_path(n)
            if n in running:
                if not path.is_file() or path.read_text() != wanted:
                    raise SettingError(
                        f"broker {n} is running with other settings than asked "
                        f"(see {path}); run `kmon cluster down` first"
                    )
                continue
            self._check_ports(n)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(wanted)

    def up(self, timeout: float = 180.0) -> None:
        """Start whatever is not running and wait until the cluster takes ``acks=all`` writes.

        Idempotent: running nodes are left alone; paused nodes are resumed.
        """
        self.prepare()
        if self.sasl_ssl_listener:
            ensure_tls(self.tls, BROKER_IDS)
        self._format_storage()
        for n in BROKER_IDS:
            pid = self.pid(n)
            if pid is None:
                self._spawn(n)
            elif procs.is_stopped(pid):
                procs.signal_pid(pid, signal.SIGCONT)
        self.wait_ready(timeout)

    def down(self, timeout: float = 30.0) -> None:
        """Stop every node (SIGTERM, then SIGKILL); no process is left behind.

        A node's clean shutdown asks the controller quorum to move its leaderships away. Once
        only one node is left the quorum is gone and that node would wait for it forever, so
        it gets a few seconds and then SIGKILL (its next start recovers the log, no acked
        data is lost: it is all in the page cache). ``timeout`` bounds the whole stop.
        """
        pids = {n: pid for n in BROKER_IDS if (pid := self.pid(n)) is not None}
        for pid in pids.values():
            procs.signal_pid(pid, signal.SIGCONT)  # a paused JVM cannot act on SIGTERM
            procs.signal_pid(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        quorum_lost_at: float | None = None
        while alive := [pid for pid in pids.values() if procs.is_alive(pid)]:
            now = time.monotonic()
            if len(alive) <= len(BROKER_IDS) // 2 and quorum_lost_at is None:
                quorum_lost_at = now
            if now >= deadline or (quorum_lost_at is not None and now - quorum_lost_at > 3.0):
                for pid in alive:
                    procs.signal_pid(pid, signal.SIGKILL)
                for pid in alive:
                    procs.wait_dead(pid, 10.0)
                break
            time.sleep(0.1)
        for n, pid in pids.items():
            if procs.is_alive(pid):
                raise ClusterError(f"broker {n} (pid {pid}) survived SIGKILL")
            self._forget(n)

    # --- fault verbs ---------------------------------------------------------------------

    def pause(self, node_id: int) -> int:
        """SIGSTOP node ``node_id``; returns its pid."""
        pid = self._require_pid(node_id)
        procs.signal_pid(pid, signal.SIGSTOP)
        _wait_for(lambda: procs.is_stopped(pid), 5.0, f"broker {node_id} to stop")
        return pid

    def resume(self, node_id: int) -> int:
        """SIGCONT node ``node_id``; returns its pid."""
        pid = self._require_pid(node_id)
        procs.signal_pid(pid, signal.SIGCONT)
        _wait_for(lambda: not procs.is_stopped(pid), 5.0, f"broker {node_id} to continue")
        return pid

    def kill(self, node_id: int) -> int:
        """SIGKILL node ``node_id`` (no shutdown, no flush); returns the pid it had."""
        pid = self._require_pid(node_id)
        procs.signal_pid(pid, signal.SIGKILL)
        if not procs.wait_dead(pid, 10.0):
            raise ClusterError(f"broker {node_id} (pid {pid}) survived SIGKILL")
        self._forget(node_id)
        return pid

    def start(self, node_id: int, wait: bool = True, timeout: float = 120.0) -> int:
        """Start node ``node_id`` again with its config and data dir; returns its pid.

        With ``wait``, returns once the broker is registered (unfenced) with the controller.
        """
        _check_id(node_id)
        pid = self.pid(node_id)
        if pid is None:
            if not self.config_path(node_id).is_file():
                raise SettingError(f"broker {node_id} has no config yet: run `kmon cluster up`")
            self._check_ports(node_id)
            pid = self._spawn(node_id)
        if wait:
            self.wait_registered([node_id], timeout)
        return pid

    # --- waiting ---------------------------------------------------------------------------

    def wait_registered(self, node_ids: Iterable[int], timeout: float = 120.0) -> None:
        """Wait until each of ``node_ids`` serves requests and is a live broker.

        Each broker is asked on its own port: right after a restart the cluster still lists
        the previous incarnation as live until its session times out, and a broker enables
        request processing only once the controller has unfenced it.
        """
        pending = set(node_ids)
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive(pending)
            pending = {n for n in pending if not self.serving(n)}
            if not pending:
                live = self.live_brokers(timeout=min(10.0, max(1.0, deadline - time.monotonic())))
                pending = set(node_ids) - live
                if not pending:
                    return
            if time.monotonic() >= deadline:
                raise ClusterError(
                    f"brokers {sorted(pending)} not serving after {timeout:.0f}s; "
                    f"logs: {self.root}/broker-N/server.log"
                )
            time.sleep(0.3)

    def serving(self, node_id: int, timeout: float = 2.0) -> bool:
        """True if broker ``node_id`` answers an ApiVersions request on its own listener."""
        return _answers_api_versions(self.ports.broker(_check_id(node_id)), timeout)

    def wait_ready(self, timeout: float = 180.0) -> None:
        """Wait until all brokers are registered and an RF=3 topic takes an ``acks=all`` write."""
        deadline = time.monotonic() + timeout
        self.wait_registered(BROKER_IDS, timeout)
        self.create_topic(READY_TOPIC, partitions=1, replication_factor=3, exist_ok=True)
        last_error = "no attempt"
        while time.monotonic() < deadline:
            remaining = deadline - time.monotonic()
            last_error = self._probe_write(min(30.0, max(1.0, remaining)))
            if not last_error:
                return
            self._check_alive(BROKER_IDS)
            time.sleep(0.5)
        raise ClusterError(f"cluster did not accept an acks=all write: {last_error}")

    def wait_in_isr(
        self, topic: str, node_id: int, partitions: Iterable[int] | None = None,
        timeout: float = 120.0,
    ) -> None:
        """Wait until ``node_id`` is in the ISR of every listed partition (default: all)."""
        deadline = time.monotonic() + timeout
        last: dict[int, PartitionState] = {}
        while True:
            last = self.describe_topic(topic)
            wanted = list(partitions) if partitions is not None else list(last)
            if wanted and all(p in last and node_id in last[p].isr for p in wanted):
                return
            if time.monotonic() >= deadline:
                raise ClusterError(
                    f"broker {node_id} not back in the ISR of {topic} after {timeout:.0f}s: "
                    + ", ".join(f"p{p} isr={s.isr}" for p, s in sorted(last.items()))
                )
            time.sleep(0.3)

    # --- metadata and topics -------------------------------------------------------------

    def admin(self) -> AdminClient:
        """A new AdminClient on this cluster, for the caller to use in a ``with`` block.

        None is kept: an idle client's threads would live on through every broker kill and
        pause (a test process holding them has died in librdkafka's threads). And none is left
        to the garbage collector: a client caught in a reference cycle (an exception's
        traceback holds its frame) is destroyed wherever the collector happens to run, which
        can be a librdkafka thread running a callback, and librdkafka aborts or crashes when
        a client is destroyed from its own thread (confluent-kafka-python #2129). ``with``
        destroys it here and now."""
        return AdminClient(self.client_config())

    def _any_admin(self) -> AdminClient:
        """An AdminClient on a running broker: a paused one would take requests and hang."""
        running = [n for n in BROKER_IDS if self.state(n) == "running"]
        return self.node_admin(running[0]) if running else self.admin()

    def node_admin(self, node_id: int) -> AdminClient:
        """A new AdminClient talking to broker ``node_id`` only (see ``admin``)."""
        return AdminClient(self.client_config(**{
            "bootstrap.servers": self.broker_address(node_id),
            # Metadata requests about a topic must never create it.
            "allow.auto.create.topics": False,
        }))

    def client_config(self, **extra: Any) -> dict[str, Any]:
        """Base config for confluent-kafka clients of this cluster (add your own settings)."""
        return {
            "bootstrap.servers": self.bootstrap,
            # Route librdkafka's logs through Python logging, silenced by default: a broker
            # killed on purpose makes every client log refused connections.
            "logger": _client_log,
            # Errors such as "all brokers down" arrive here too; callers see real failures
            # through futures and delivery reports instead.
            "error_cb": _ignore_error,
            **extra,
        }

    def create_scram_user(self, name: str, password: str, timeout: float = 30.0) -> None:
        """Create (or reset) a SCRAM-SHA-512 user for the SASL_SSL listeners.

        KRaft keeps SCRAM credentials in the metadata log, so they are made through the Admin
        API (here over PLAINTEXT, which needs no login) once the cluster is up, not with the
        storage tool. Returns once every running broker knows the user: each applies the
        metadata log on its own, and a login at one that has not yet would fail.
        """
        upsert = UserScramCredentialUpsertion(
            name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS),
            password.encode())
        with self._any_admin() as admin:  # held until the result: its futures die with it
            admin.alter_user_scram_credentials([upsert], request_timeout=timeout)[name].result(
                timeout + 5)
        for n in BROKER_IDS:
            if self.state(n) == "running":
                _wait_for(lambda n=n: self._knows_user(n, name), timeout,
                          f"broker {n} to know SCRAM user {name}")

    def _knows_user(self, node_id: int, name: str) -> bool:
        with self.node_admin(node_id) as admin:
            future = admin.describe_user_scram_credentials([name], request_timeout=5)[name]
            try:
                return bool(future.result(10).scram_credential_infos)
            except KafkaException:  # not applied there yet (RESOURCE_NOT_FOUND)
                return False

    def live_brokers(self, timeout: float = 10.0) -> set[int]:
        """Ids of the brokers the cluster metadata lists (registered, not fenced, not stopped).

        Empty if no running broker answers within ``timeout``.
        """
        try:
            metadata = self._metadata(None, timeout)
        except ClusterError:
            return set()
        return set(metadata.brokers)

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 3,
        config: Mapping[str, str] | None = None,
        exist_ok: bool = False,
        timeout: float = 30.0,
    ) -> None:
        topic = NewTopic(
            name, num_partitions=partitions, replication_factor=replication_factor,
            config=dict(config or {}),
        )
        with self._any_admin() as admin:  # held until the result: its futures die with it
            future = admin.create_topics([topic], request_timeout=timeout)[name]
            try:
                future.result(timeout + 5)
            except KafkaException as exc:
                if not (exist_ok and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS):
                    raise
        # Creation is acknowledged before every broker has the metadata; wait for leaders.
        _wait_for(
            lambda: _has_leaders(self, name, partitions), timeout, f"leaders for topic {name}"
        )

    def drop_topics(self, prefix: str, keep: Iterable[str] = (), timeout: float = 60.0,
                    ) -> list[str]:
        """Delete the topics whose names begin with ``prefix`` (Kafka's internal ones and the
        readiness topic never), but those in ``keep``; their names, sorted, once no running
        broker lists them any more. For the topics earlier test, matrix, chaos and benchmark
        runs left: hundreds of partitions left behind slow the nodes' 512 MB heaps into
        back-to-back garbage collections."""
        kept = {*keep, READY_TOPIC}
        names = sorted(t for t in self._metadata(None, timeout).topics
                       if t.startswith(prefix) and not t.startswith("__") and t not in kept)
        if names:
            with self._any_admin() as admin:
                kafka_admin.delete_topics(admin, names, timeout)
            # The controller answers once it has deleted them, and each broker learns it from
            # the metadata log a moment later: until then its Metadata answer still lists them.
            _wait_for(lambda: not self._listed_by_some_broker(names), timeout,
                      f"every broker to forget the deleted topics {', '.join(names)}")
        return names

    def _listed_by_some_broker(self, names: list[str]) -> bool:
        """Whether any running broker's Metadata answer lists one of ``names`` (a broker
        that does not answer within a few seconds, paused, is not asked)."""
        for n in BROKER_IDS:
            if self.state(n) != "running":
                continue
            try:
                with self.node_admin(n) as admin:
                    listed = admin.list_topics(timeout=3.0).topics
            except KafkaException:
                continue
            if any(name in listed for name in names):
                return True
        return False

    def describe_topic(self, topic: str, timeout: float = 30.0) -> dict[int, PartitionState]:
        """Leader, replicas and ISR of each partition of ``topic``, by partition id."""
        metadata = self._metadata(topic, timeout).topics.get(topic)
        if metadata is None or metadata.error is not None:
            raise ClusterError(f"no metadata for topic {topic}: {metadata and metadata.error}")
        return {
            p.id: PartitionState(
                leader=p.leader if p.leader >= 0 else None,
                replicas=list(p.replicas),
                isr=list(p.isrs),
            )
            for p in metadata.partitions.values()
        }

    def _metadata(self, topic: str | None, timeout: float) -> ClusterMetadata:
        """A Metadata answer from some running broker, trying each in turn until ``timeout``.

        librdkafka sends a request to any broker it has a connection to, and a paused broker
        keeps its connections open but never answers: short attempts, retried, get around it.
        """
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while True:
            for n in BROKER_IDS:
                if self.state(n) != "running":
                    continue
                attempt = min(3.0, max(0.5, deadline - time.monotonic()))
                try:
                    with self.node_admin(n) as admin:
                        return admin.list_topics(topic, timeout=attempt)
                except KafkaException as exc:
                    last = exc
            if time.monotonic() >= deadline:
                raise ClusterError(f"no broker answered a metadata request: {last}")
            time.sleep(0.2)

    def leader(self, topic: str, partition: int = 0) -> int | None:
        """The broker id leading ``topic``/``partition`` now, or None during an election."""
        return self.describe_topic(topic)[partition].leader

    def isr(self, topic: str, partition: int = 0) -> list[int]:
        return self.describe_topic(topic)[partition].isr

    # --- internals -----------------------------------------------------------------------

    def _check_ports(self, node_id: int) -> None:
        ports = [
            (f"broker {node_id} listener", self.ports.broker(node_id)),
            (f"controller {node_id} listener", self.ports.controller(node_id)),
        ]
        if self.proxied_listener:
            ports.append(
                (f"broker {node_id} proxied listener", self.ports.proxied_listener(node_id))
            )
        if self.sasl_ssl_listener:
            ports.append((f"broker {node_id} SASL_SSL listener", self.ports.sasl_ssl(node_id)))
        for name, port in ports:
            if procs.port_in_use(port):
                raise SettingError(
                    f"port {port} ({name}) is already in use; pick another base with "
                    "--port-base or KMON_PORT_BASE"
                )

    def _ensure_cluster_id(self) -> str:
        path = self.root / "cluster.id"
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(new_cluster_id() + "\n")
        return path.read_text().strip()

    def _format_storage(self) -> None:
        """Format each node's data dir once for this cluster's id (in parallel: JVM starts)."""
        cluster_id = self._ensure_cluster_id()
        dist = installed_kafka(self.cache)
        java = str(find_java())
        pending = {}
        for n in BROKER_IDS:
            meta = self.data_dir(n) / "meta.properties"
            if meta.is_file():
                if f"cluster.id={cluster_id}" not in meta.read_text():
                    raise SettingError(
                        f"{self.data_dir(n)} belongs to another cluster; "
                        f"remove {self.root} to start afresh"
                    )
                continue
            cmd = [
                java, *self._log_opts(n), "-cp", dist.classpath, STORAGE_TOOL, "format",
                cluster_id_arg(cluster_id), "-c", str(self.config_path(n)), "--ignore-formatted",
            ]
            pending[n] = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        for n, proc in pending.items():
            out, _ = proc.communicate()
            if proc.returncode != 0:
                raise ClusterError(
                    f"formatting broker {n}'s storage failed:\n{out.decode()[-2000:]}"
                )

    def _log_opts(self, node_id: int) -> list[str]:
        return [
            f"-Dlog4j2.configurationFile={HERE / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.node_dir(node_id)}",
        ]

    def _spawn(self, node_id: int) -> int:
        dist = installed_kafka(self.cache)
        cmd = [
            str(find_java()), *self.jvm_opts, *self._log_opts(node_id),
            "-cp", dist.classpath, MAIN_CLASS, str(self.config_path(node_id)),
        ]
        log_path = self.log_path(node_id)
        with open(log_path, "a") as log:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            log.write(f"\n=== kmon {stamp}: starting broker {node_id}: {shlex.join(cmd)}\n")
        pid = procs.spawn(cmd, log_path, self.node_dir(node_id))
        self.pid_path(node_id).write_text(f"{pid}\n")
        return pid

    def _require_pid(self, node_id: int) -> int:
        pid = self.pid(_check_id(node_id))
        if pid is None:
            raise ClusterError(f"broker {node_id} is not running")
        return pid

    def _check_alive(self, node_ids: Iterable[int]) -> None:
        for n in node_ids:
            if self.pid(n) is None:
                raise ClusterError(
                    f"broker {n} is not running; end of {self.log_path(n)}:\n"
                    + procs.tail(self.log_path(n))
                )

    def _forget(self, node_id: int) -> None:
        self.pid_path(node_id).unlink(missing_ok=True)

    def _probe_write(self, timeout: float) -> str:
        """One acks=all write to the ready topic; returns '' on success, else the error."""
        errors: list[str] = []
        delivered: list[bool] = []

        def report(err: KafkaError | None, _msg: object) -> None:
            if err is None:
                delivered.append(True)
            else:
                errors.append(str(err))

        producer = Producer(self.client_config(**{
            "acks": "all",  # the readiness criterion itself
            "message.timeout.ms": int(timeout * 1000),  # bounded by the caller's deadline
        }))
        producer.produce(READY_TOPIC, value=b"ready", on_delivery=report)
        producer.flush(timeout + 1)
        if delivered:
            return ""
        return errors[0] if errors else "no delivery report"


def _ignore_error(_err: KafkaError) -> None:
    pass


def _answers_api_versions(port: int, timeout: float) -> bool:
    """Speak the smallest request of the Kafka protocol (ApiVersions v0) to one broker."""
    correlation_id = 7
    client_id = b"kmon"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            header = b""
            while len(header) < 10:  # size, correlation id, error code
                chunk = sock.recv(10 - len(header))
                if not chunk:
                    return False
                header += chunk
    except OSError:
        return False
    _, got_id, error = struct.unpack(">iih", header)
    return got_id == correlation_id and error == 0


def _has_leaders(cluster: LocalCluster, topic: str, partitions: int) -> bool:
    try:
        state = cluster.describe_topic(topic, timeout=5.0)
    except (ClusterError, KafkaException):
        return False
    return len(state) >= partitions and all(s.leader is not None for s in state.values())


def _check_id(node_id: int) -> int:
    if node_id not in BROKER_IDS:
        raise SettingError(f"no broker {node_id}: brokers are {', '.join(map(str, BROKER_IDS))}")
    return node_id


def _wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)
